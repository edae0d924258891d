"""llama3.1-8b Server: Poisson arrivals at server_target_qps; mlperf.conf from v5.1 limits each sample's time to
first token (2 s, p99) and time per output token (100 ms, p99) instead of its whole latency.

A Server target may sit below the real rate (it then reports less), not above. A GPU class holds one GPU's values
and serves ``<model>x<count>``, whose target is the class's times the count (code/config/resolve.py). The in-flight
engine reports each sample's first token after the step that chose it (``FirstTokenComplete``), so the time per
output token, not the first token, bounds the rate: more slots raise it until a step passes ~100 ms. The PyTorch
backend hands over whole responses, and its first tokens go with them.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.llama31 import CPU_LENGTH_SCALE, CPU_MODEL, LlamaBaseConfig, llama_ladder


class ServerBaseConfig(LlamaBaseConfig):
    scenario = Scenario.Server
    num_workers = 1
    batch_timeout_us = 0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(ServerBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    synthetic_length_scale = CPU_LENGTH_SCALE
    gpu_batch_size = 8
    server_target_qps = 2.0  # a third of the Offline class's rate: batches stay small


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(ServerBaseConfig):
    # estimates, lower bounds as Server needs: the H200's rates scaled by the memory's speed (configs/llama31)
    engine_ladder = llama_ladder(fp8={"gpu_batch_size": 512, "server_target_qps": 39.0},
                                 fp8_gemms={"server_target_qps": 17.0}, bf16={})
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    # samples in flight: llama_memory_plan's fit with ~1,000-token prompts, as Offline
    gpu_batch_size = 384
    # estimate, a lower bound as Server needs: the H200's rate scaled by the memory's speed (configs/llama31)
    server_target_qps = 17.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # fp8: the target sits under a rate that held both token limits (59 with the CUDA decode kernel); FP8 GEMMs with
    # a bf16 cache get bf16's, a lower bound (measured: llama-server57-fp8-ss-2026-11-29, cuda-decode-2026-11-29)
    engine_ladder = llama_ladder(fp8={"gpu_batch_size": 512, "server_target_qps": 58.0},
                                 fp8_gemms={"server_target_qps": 25.0}, bf16={})
    # the memory plan's cap, as Offline; the target sits just under the rate whose time per output token held
    # its limit
    gpu_batch_size = 512
    server_target_qps = 25.0  # measured: llama-server-2026-11-29
