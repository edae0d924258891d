"""BERT SingleStream: one sample at a time; the 90th-percentile latency is the metric.

GPU classes run the packed path with a CUDA graph per token bucket (documentation/bert_gpu.md). The expected latency
is set near the p90 measured on H100 and H200 (measured: bert-singlestream-2026-11-28, in
documentation/notes/journal/) so LoadGen pre-generates enough queries to fill the minimum duration. A GPU class is a
GPU model and serves ``<model>x<count>`` of any count with its values as they are: one sample at a time runs on one
GPU, so the latency does not depend on the count (code/config/resolve.py). The engine ladders
(configs/bert/__init__.py) share one expected latency: a hint, near enough for every engine.
"""

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.config.cpu_features import BestCpuPrecision
from configs.bert import (
    BertBaseConfig,
    bert_99_9_ladder,
    bert_99_ladder,
    high_accuracy_on_cpu,
    high_accuracy_on_gpu,
    on_gpu,
)
from configs.configuration import ConfigRegistry, gpu_model_classes


class SingleStreamBaseConfig(BertBaseConfig):
    scenario = Scenario.SingleStream
    gpu_batch_size = 1
    num_workers = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(SingleStreamBaseConfig):
    precision = BestCpuPrecision()  # bf16 where the CPU has bf16 arithmetic, else fp32
    device = "cpu"
    single_stream_expected_latency_ns = 300_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_cpu
class CPU_HighAccuracy(CPU):
    single_stream_expected_latency_ns = 800_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
@on_gpu
class H100_SXM_80GB(SingleStreamBaseConfig):
    # FP8 attention over the e4m3 residual first, as Offline and Server (measured: bert-singlestream-2026-11-28)
    engine_ladder = bert_99_ladder(fp8={}, fp16={}, int8={}, fp8_attention={})
    single_stream_expected_latency_ns = 1_400_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    engine_ladder = bert_99_9_ladder(fp8={}, fp16={})


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    engine_ladder = bert_99_9_ladder(fp8={}, fp16={})


# Every other GPU model's classes (A100_SXM4_40GB, L4, ...; code/common/gpu_models.py) are derived from the H100 SXM's
# and the GPU (code/config/any_gpu.py), and named here as if written: configs.bert.SingleStream.A100_SXM4_40GB.
__getattr__ = gpu_model_classes(Benchmark.BERT, Scenario.SingleStream)
