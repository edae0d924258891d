"""GPT-J SingleStream: one sample at a time; the 90th-percentile latency is the metric.

H100 SXM and H200 values come from shortened runs of the bf16 engine with 128 new tokens per sample, the worst case
(documentation/performance.md); the FP8 engine (``--precision=fp8 --kv_cache_dtype=fp8``) is opt-in until its
quality gate passes (documentation/gptj_gpu.md).
A GPU class is a GPU model and serves ``<model>x<count>`` of any count with its values as they are: one sample
at a time runs on one GPU, so the latency does not depend on the count (configs/configuration.py).
The expected latency is set below the measured p90, so LoadGen plans enough queries to fill the minimum duration.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.gptj import CPU_MODEL, GptjBaseConfig


class SingleStreamBaseConfig(GptjBaseConfig):
    scenario = Scenario.SingleStream
    num_workers = 1
    gpu_batch_size = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(SingleStreamBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    single_stream_expected_latency_ns = 500_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class CPU_HighAccuracy(CPU):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(SingleStreamBaseConfig):
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    single_stream_expected_latency_ns = 1_000_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    single_stream_expected_latency_ns = 800_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    pass
