"""BERT Offline: one query with every sample; throughput is the metric.

Each system class is one machine; ``_HighAccuracy`` subclasses are the bert-99.9 variants. GPU classes run the
packed fast path (documentation/bert_gpu.md). H200 numbers were measured on one H200 (2026-11-22, LoadGen Offline
test runs, synthetic SQuAD-like lengths): bert-99 (fp16, bias + GELU in the w1 GEMM's epilogue) 4,988 samples/s,
bert-99.9 (fp16, erf GELU) 4,656-4,716, fp8 7,020-7,250 (7,574 with fp8_fast_accum). fp8 is opt-in
(``--precision=fp8``), not the default for bert-99: on a MiniLM fine-tuned for QA it keeps MLPerf's F1 rule (99.89%
of fp32's) but changes the best answer span on ~2.7% of features, above the 1% the project allows (so does every
subset of FP8 GEMMs measured) (documentation/performance.md); run AccuracyOnly with the real checkpoint before
using it. H100 SXM (one lent
H100 80GB HBM3, same day, one run each): bert-99 4,870 samples/s, bert-99.9 4,599.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.bert import BertBaseConfig
from configs.configuration import ConfigRegistry


class OfflineBaseConfig(BertBaseConfig):
    scenario = Scenario.Offline
    num_workers = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(OfflineBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI. bf16 uses AMX/AVX512-BF16 where present."""

    precision = "bf16"
    device = "cpu"
    gpu_batch_size = 8
    offline_expected_qps = 6.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class CPU_HighAccuracy(CPU):
    precision = "fp32"
    offline_expected_qps = 1.5


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GBx1(OfflineBaseConfig):
    precision = "fp16"
    device = "cuda"
    # bias + tanh GELU in the w1 GEMM's epilogue: forward -6% (H200); span agreement with float32 >= 99% on
    # every model checked, not 99.9% (documentation/performance.md), so the _HighAccuracy classes turn it off.
    gelu_in_gemm = True
    # Packed batches: 512 samples of mean length ~166 are ~85k tokens, enough to saturate the GEMMs (1024 measured
    # 2% faster single-threaded, doubling memory). Two workers: one packs/unpacks while the other's batch runs.
    gpu_batch_size = 512
    num_workers = 2
    offline_expected_qps = 4900.0  # measured 4,870 on an H100 SXM (fp16 + GELU epilogue, 2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx1_HighAccuracy(H100_SXM_80GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4600.0  # measured 4,599 (fp16, erf GELU, 2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GBx8(H100_SXM_80GBx1):
    offline_expected_qps = 4900.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx8_HighAccuracy(H100_SXM_80GBx8):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4600.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx1(H100_SXM_80GBx1):
    gpu_batch_size = 512
    offline_expected_qps = 5000.0  # measured 4,988 (fp16 + GELU epilogue, 2026-11-22); fp8 7,056-7,250


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx1_HighAccuracy(H200_SXM_141GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4700.0  # measured 4,656-4,716 (fp16, erf GELU, 2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx8(H200_SXM_141GBx1):
    offline_expected_qps = 5000.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx8_HighAccuracy(H200_SXM_141GBx8):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4700.0 * 8
