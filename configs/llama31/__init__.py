"""Llama 3.1 8B Instruct on CNN/DailyMail (llama3.1-8b): settings every llama3.1-8b config shares.

The reference fixes generation (greedy, 1 to 128 new tokens) and has one accuracy target, 99%, so there are no
``_HighAccuracy`` classes. The GPU classes run the PyTorch backend (bf16, eager) until the in-flight engine
(grouped-query decode attention, FP8 GEMMs and KV cache) exists; their values are estimates from the H100's and
H200's memory bandwidth, said where each is set, not measurements.
"""

from code.common.constants import Benchmark
from configs.configuration import BenchmarkConfiguration


class LlamaBaseConfig(BenchmarkConfiguration):
    """Benchmark-wide defaults; scenario bases and system classes override them."""

    benchmark = Benchmark.LLAMA31
    model_name = "8b"
    sort_by_length = True


# Llama-3.1-8B greedy on a CPU takes minutes a sample, so the CPU classes run random-weight runs of the tiny model
# of the same architecture (model_name applies to random weights; a checkpoint brings its own architecture), on
# prompts a quarter of the data set's lengths (~200 tokens).
CPU_MODEL = "tiny"
CPU_LENGTH_SCALE = 0.25

# Where the classes' numbers come from (none is a GPU measurement yet: the PyTorch backend has not run on one).
# - CPU: the tiny model's first --test_run on the 2-core development machine (fp32, 16 a batch, prompts ~200 tokens,
#   the machine shared with other work, load average 4.4): 5.2 samples/s; the Offline class sets 6.
# - H100 SXM, bf16 eager: one decode step reads the 16 GB of weights, >= ~5 ms at 3.35 TB/s, ~20 ms eager (32 layers
#   of a few kernels each, ~4x). Offline: 64 samples a batch (their KV cache, 131 kB a token, ~22 GB for prompts up
#   to ~2,600 tokens), ~130 steps plus ~1.5 s of prefill: ~15 samples/s; the class sets 20 (Offline may sit
#   above). Server: batches of up to 16, a third of that, 5 (a lower bound). SingleStream: ~130 steps and a
#   prefill, ~2.7 s; the class sets 2 s (below the p90).
# - H200: memory bandwidth 4.8 TB/s, 1.4x the H100's: Offline 45 (twice the batch in 141 GB), Server 7,
#   SingleStream 1.4 s.
