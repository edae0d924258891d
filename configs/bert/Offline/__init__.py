"""BERT Offline: one query with every sample; throughput is the metric.

Each system class is one machine; ``_HighAccuracy`` subclasses are the bert-99.9 variants. GPU classes run the
packed fast path (documentation/bert_gpu.md). Each GPU class's expected QPS is the throughput measured on that GPU
for its variant (bert-99: fp16 with bias + GELU in the w1 GEMM's epilogue; bert-99.9: fp16, erf GELU), rounded; an
xN class is N times its one-GPU parent. The measurements are in documentation/performance.md. fp8 is opt-in
(``--precision=fp8``), not the default for bert-99: it keeps MLPerf's F1 rule but changes the best answer span on
more than the 1% of features the project allows, and so does every subset of FP8 GEMMs (documentation/performance.md);
run AccuracyOnly with the real checkpoint before using it.
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
    # Packed batches: 512 samples of mean length ~166 are ~85k tokens, enough to saturate the GEMMs; larger batches
    # double memory for no gain (performance.md). Two workers: one packs/unpacks while the other's batch runs.
    gpu_batch_size = 512
    num_workers = 2
    offline_expected_qps = 4900.0  # the measured throughput, rounded (performance.md, H100 SXM, bert-99)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx1_HighAccuracy(H100_SXM_80GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4600.0  # the measured throughput, rounded (performance.md, H100 SXM, bert-99.9)


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
    offline_expected_qps = 5000.0  # the measured throughput, rounded (performance.md, H200, bert-99)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx1_HighAccuracy(H200_SXM_141GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4700.0  # the measured throughput, rounded (performance.md, H200, bert-99.9)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx8(H200_SXM_141GBx1):
    offline_expected_qps = 5000.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx8_HighAccuracy(H200_SXM_141GBx8):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    offline_expected_qps = 4700.0 * 8
