"""Llama 3.1 8B Instruct on CNN/DailyMail (llama3.1-8b): settings every llama3.1-8b config shares.

The reference fixes generation (greedy, 1 to 128 new tokens) and has one accuracy target, 99%, so there are no
``_HighAccuracy`` classes. The H100 and H200 classes run the in-flight engine (``inflight``: continuous batching),
Offline and Server through an engine ladder (``llama_ladder``: FP8 GEMMs and KV cache first, bf16 last; the real
accuracy run decides), SingleStream in bf16 with one slot (no complete GPU run yet); their values are estimates, said
where each is set, but for the H200's Offline and Server rates, which were measured.
"""

from typing import Any

from code.common.constants import Benchmark
from code.config.ladder import Rung
from configs.configuration import BenchmarkConfiguration


def llama_ladder(fp8: dict[str, Any], fp8_gemms: dict[str, Any], bf16: dict[str, Any]) -> tuple[Rung, ...]:
    """Llama 3.1 8B's engines on an H100/H200 (the inflight backend), fastest first, each with its slots and rates.

    FP8 GEMMs (cuBLASLt's fast accumulation) and an FP8 KV cache first, as the published H100/H200 results run
    llama3.1-8b: one FP8 GEMM's output is 3.7% from float32's against bf16's 0.23%, as e4m3's three mantissa bits
    make it, and only the real accuracy run on the checkpoint says whether the 99% ROUGE target holds (random
    weights amplify any rounding into the logits). Then FP8 GEMMs with a bf16 KV cache, then bf16 throughout (the
    class's own values). Measured: llama-fp8-2026-11-29 (documentation/notes/journal/)."""
    return (
        Rung("fp8", "FP8 GEMMs with cuBLASLt fast accumulation and an FP8 KV cache", precision="fp8",
             kv_cache_dtype="fp8", fp8_fast_accum=True, **fp8),
        Rung("fp8-gemms", "FP8 GEMMs with fast accumulation, bf16 KV cache", precision="fp8", kv_cache_dtype="auto",
             fp8_fast_accum=True, **fp8_gemms),
        Rung("bf16", "bf16 GEMMs and KV cache", precision="bf16", kv_cache_dtype="auto", fp8_fast_accum=False,
             **bf16),
    )


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

# Where the classes' numbers come from (the H200's Offline and Server rates are set from measurements; the rest are
# estimates).
# - CPU: the tiny model's first --test_run on the 2-core development machine (fp32, 16 a batch, prompts ~200 tokens,
#   the machine shared with other work, load average 4.4): 5.2 samples/s; the Offline class sets 6.
# - SingleStream, the in-flight engine with one slot (one CUDA graph a step): ~128 steps, each at least the
#   weights' read (16 GB: ~4.8 ms at the H100's 3.35 TB/s, ~3.3 ms at the H200's 4.8), but one slot's decode
#   attention runs on a few programs and the step's host round trip is paid 128 times: an H200 took ~1 s a sample
#   (FP8 GEMMs barely less), so the classes set 1.0 s (H200) and 1.1 s (H100) as the expected latency, which
#   only sizes the test (the checker's SingleStream figure is LoadGen's early-stopping estimate of the 90th
#   percentile time to first token when token latencies are on).
# - The in-flight engine (Offline, Server), bf16: slots from code/llama31/memory_plan.py (typical ~1,000-token
#   prompts: ~400 fit an H100, the 512 cap an H200). A sample costs its prefill, ~16 TFLOP for 1,000 tokens (~25 ms
#   at ~650 TFLOP/s, the same tensor cores on both GPUs), and its share of ~128 decode steps, each reading the 16 GB
#   of weights and every slot's cache (~55-70 GB at 400-512 slots: ~20-25 ms on an H200) for 400-512 tokens, ~6 ms a
#   sample: ~30 samples/s at best on either GPU (published H200 results, FP8, reach 64). Offline sets 25 (H100) and
#   30 (H200), meant to sit above the rate. Server: the engine reports each first token after the step that chose
#   it, so the 100 ms p99 time per output token bounds the rate, not the 2 s first token: the Offline slots, and a
#   target below the measured rate on the H200; on the H100 that rate scaled by memory speed (3.35 / 4.8), 17.
# - The FP8 rungs (``llama_ladder``): FP8 GEMMs halve the weights a decode step reads (8 GB) and run prefill's GEMMs
#   at FP8's rate; the FP8 cache halves the cache's bytes, so 512 slots fit an H100 too. The H200's Offline and
#   Server rates of the top rung are set from measurements; FP8 GEMMs with a bf16 cache share Offline's upper bound
#   and Server takes bf16's rate as a lower bound; the H100's are the H200's scaled by memory speed (~0.7).
