"""BERT Offline: one query with every sample; throughput is the metric.

Each system class is one machine; ``_HighAccuracy`` subclasses are the bert-99.9 variants. The GPU numbers are
starting points for our PyTorch backend (tuned by the GPU performance work), not measured claims.
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
    gpu_batch_size = 256
    num_workers = 2
    offline_expected_qps = 4000.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx1_HighAccuracy(H100_SXM_80GBx1):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GBx8(H100_SXM_80GBx1):
    offline_expected_qps = 4000.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx8_HighAccuracy(H100_SXM_80GBx8):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx1(H100_SXM_80GBx1):
    gpu_batch_size = 512
    offline_expected_qps = 4400.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx1_HighAccuracy(H200_SXM_141GBx1):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx8(H200_SXM_141GBx1):
    offline_expected_qps = 4400.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx8_HighAccuracy(H200_SXM_141GBx8):
    pass
