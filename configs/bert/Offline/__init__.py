"""BERT Offline: one query with every sample; throughput is the metric.

``CPU`` is one machine; a GPU class is a GPU model and holds one GPU's values. It serves ``<model>x<count>`` of
any count (code/config/resolve.py): the system's expected QPS is the class's times the count; every other value
is the class's. ``_HighAccuracy`` subclasses are the bert-99.9 variants. GPU classes run the packed path
(documentation/bert_gpu.md). Each GPU class's expected QPS is the throughput measured on one such GPU for its
variant, rounded. Each GPU class lists its engines fastest first (``engine_ladder``, configs/bert/__init__.py), each
with its expected QPS; the real accuracy run picks one (documentation/bert_gpu.md, "Which engine each target runs"),
and the class's own values are its last engine's. Each number cites the measurement journal's entry
(documentation/notes/journal/) by its id: ``# measured: <id>``.
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


class OfflineBaseConfig(BertBaseConfig):
    scenario = Scenario.Offline
    num_workers = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(OfflineBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI. Its precision is the CPU's choice
    (bf16 only with AMX or AVX512-BF16: code/config/cpu_features.py)."""

    precision = BestCpuPrecision()  # bf16 where the CPU has bf16 arithmetic, else fp32
    device = "cpu"
    gpu_batch_size = 8
    offline_expected_qps = 6.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_cpu
class CPU_HighAccuracy(CPU):
    offline_expected_qps = 1.5


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
@on_gpu
class H100_SXM_80GB(OfflineBaseConfig):
    # measured: bert-offline-2026-11-28 (the e4m3 residual without FP8 attention is not measured here: no rung)
    engine_ladder = bert_99_ladder(fp8={"offline_expected_qps": 7500.0}, fp16={"offline_expected_qps": 4900.0},
                                   int8={"offline_expected_qps": 6400.0},
                                   fp8_attention={"offline_expected_qps": 8700.0})
    # Packed batches of 512 samples (~85k tokens) saturate the GEMMs; larger ones double memory for no gain
    # (measured: bert-offline-2026-11-28). Two workers: one packs/unpacks while the other's batch runs.
    gpu_batch_size = 512
    num_workers = 2
    offline_expected_qps = 4900.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    # measured: bert-offline-2026-11-28 (rounded up: an Offline query must outlast the minimum duration)
    engine_ladder = bert_99_9_ladder(fp8={"offline_expected_qps": 7000.0}, fp16={"offline_expected_qps": 4600.0})
    offline_expected_qps = 4600.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # measured: bert-offline-2026-11-28
    engine_ladder = bert_99_ladder(fp8={"offline_expected_qps": 7500.0}, fp16={"offline_expected_qps": 5000.0},
                                   int8={"offline_expected_qps": 6400.0},
                                   fp8_residual={"offline_expected_qps": 8500.0},
                                   fp8_attention={"offline_expected_qps": 8800.0})
    gpu_batch_size = 512
    offline_expected_qps = 5000.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    # measured: bert-offline-2026-11-28 (7,500 bounds both FP8 engines from above)
    engine_ladder = bert_99_9_ladder(fp8={"offline_expected_qps": 7500.0}, fp16={"offline_expected_qps": 4700.0})
    offline_expected_qps = 4700.0


# Every other GPU model's classes (A100_SXM4_40GB, L4, ...; code/common/gpu_models.py) are derived from the H100 SXM's
# and the GPU (code/config/any_gpu.py), and named here as if written: configs.bert.Offline.A100_SXM4_40GB.
__getattr__ = gpu_model_classes(Benchmark.BERT, Scenario.Offline)
