"""BERT Server: Poisson arrivals at server_target_qps; p99 latency must stay under 130 ms.

GPU classes run the packed fast path (documentation/bert_gpu.md): batches of up to 128 samples (~21k tokens) gathered
for at most 2 ms, two workers so one batch is packed while the other runs; batches up to 16k tokens replay a CUDA
graph. H200 numbers were measured on one H200 (2026-11-22, LoadGen Server test runs, synthetic lengths): bert-99
(fp16, bias + GELU in the w1 GEMM's epilogue) 4,738 QPS VALID, bert-99.9 (fp16, erf GELU) 4,423-4,480; on one H100
SXM the same day bert-99 4,626 VALID (p99 128 ms; 4,383 at 87 ms), bert-99.9 4,139 VALID (p99 90 ms). The targets
below sit a little under the highest VALID rate. On a CPU, BERT-large cannot meet 130 ms per query; the CPU class
exists so the flow runs everywhere (its result is INVALID, and says why).
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.bert import BertBaseConfig
from configs.configuration import ConfigRegistry


class ServerBaseConfig(BertBaseConfig):
    scenario = Scenario.Server
    num_workers = 1
    batch_timeout_us = 0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(ServerBaseConfig):
    precision = "bf16"
    device = "cpu"
    gpu_batch_size = 4
    server_target_qps = 1.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class CPU_HighAccuracy(CPU):
    precision = "fp32"
    server_target_qps = 0.5


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GBx1(ServerBaseConfig):
    precision = "fp16"
    device = "cuda"
    # bias + tanh GELU in the w1 GEMM's epilogue: forward -6% (H200); span agreement with float32 >= 99% on
    # every model checked, not 99.9% (documentation/performance.md), so the _HighAccuracy classes turn it off.
    gelu_in_gemm = True
    gpu_batch_size = 128
    num_workers = 2
    batch_timeout_us = 2000
    server_target_qps = 4400.0  # H100 SXM: 4,383 VALID at p99 87 ms, 4,626 at 128 ms (2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx1_HighAccuracy(H100_SXM_80GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    server_target_qps = 4000.0  # H100 SXM: 4,139 VALID at p99 90 ms (fp16, erf GELU, 2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GBx8(H100_SXM_80GBx1):
    server_target_qps = 4400.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GBx8_HighAccuracy(H100_SXM_80GBx8):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    server_target_qps = 4000.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx1(H100_SXM_80GBx1):
    server_target_qps = 4700.0  # 4,738 VALID (fp16 + GELU epilogue, 2026-11-22); fp8 6,500-6,750 VALID


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx1_HighAccuracy(H200_SXM_141GBx1):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    server_target_qps = 4400.0  # 4,423-4,480 VALID (fp16, erf GELU, 2026-11-22)


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GBx8(H200_SXM_141GBx1):
    server_target_qps = 4700.0 * 8


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GBx8_HighAccuracy(H200_SXM_141GBx8):
    gelu_in_gemm = False  # erf GELU, the reference's form: the tanh epilogue misses the 99.9% bar
    server_target_qps = 4400.0 * 8
