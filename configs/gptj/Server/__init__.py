"""GPT-J Server: Poisson arrivals at server_target_qps; p99 latency must stay under 20 s.

H100 SXM and H200 values come from shortened runs of the bf16 engine with 128 new tokens per sample, the worst case
(documentation/performance.md); the FP8 engine (``--precision=fp8 --kv_cache_dtype=fp8``) is opt-in until its
quality gate passes (documentation/gptj_gpu.md).
A GPU class is a GPU model and holds one GPU's values; it serves ``<model>x<count>`` of any count, whose target
QPS is the class's times the count; every other value is the class's (configs/configuration.py).
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.gptj import CPU_MODEL, GptjBaseConfig


class ServerBaseConfig(GptjBaseConfig):
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
    gpu_batch_size = 8
    server_target_qps = 1.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class CPU_HighAccuracy(CPU):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(ServerBaseConfig):
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    gpu_batch_size = 96  # samples in flight: the prompt KV pool and generated rows fill ~60 GB
    server_target_qps = 8.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    gpu_batch_size = 128
    server_target_qps = 15.5


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    pass
