"""GPT-J SingleStream: one sample at a time; the 90th-percentile latency is the metric.

H100 SXM and H200 classes list their engines fastest first (``engine_ladder``, configs/gptj/__init__.py); the real
accuracy run picks one (documentation/gptj_gpu.md). The bf16 engine's values (the class's own) come from shortened
runs with 128 new tokens per sample, the worst case; the FP8 engine's from a run with realistic output lengths
(``# measured: <id>``: the measurement journal's entry, documentation/notes/journal/).
A GPU class is a GPU model and serves ``<model>x<count>`` of any count with its values as they are: one sample
at a time runs on one GPU, so the latency does not depend on the count (code/config/resolve.py).
The expected latency is set below the measured p90, so LoadGen plans enough queries to fill the minimum duration.
"""

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry, gpu_model_classes
from configs.gptj import CPU_MODEL, GptjBaseConfig, gptj_ladder


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
    # FP8 is not measured on an H100: the H200's p90 times the two GPUs' bf16 ratio, less a margin
    # (measured: gptj-singlestream-2026-11-28)
    engine_ladder = gptj_ladder(fp8={"single_stream_expected_latency_ns": 700_000_000}, fp8_gemms={}, bf16={})
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    single_stream_expected_latency_ns = 1_000_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # fp8 measured: decode-splits-2026-11-29; the other rungs: gptj-singlestream-2026-11-28
    engine_ladder = gptj_ladder(fp8={"single_stream_expected_latency_ns": 480_000_000}, fp8_gemms={}, bf16={})
    single_stream_expected_latency_ns = 800_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    pass


# Every other GPU model's classes (A100_SXM4_40GB, L4, ...; code/common/gpu_models.py) are derived from the H100 SXM's
# and the GPU (code/config/any_gpu.py), and named here as if written: configs.gptj.SingleStream.A100_SXM4_40GB.
__getattr__ = gpu_model_classes(Benchmark.GPTJ, Scenario.SingleStream)
