"""GPT-J Offline: one query with every sample; LoadGen reports samples/s and inferred tokens/s.

H100 SXM and H200 classes list their engines fastest first (``engine_ladder``, configs/gptj/__init__.py); the real
accuracy run picks one (documentation/gptj_gpu.md). The bf16 engine's values (the class's own) come from shortened
runs with 128 new tokens per sample, the worst case; the FP8 engine's from runs with realistic output lengths
(``# measured: <id>``: the measurement journal's entry, documentation/notes/journal/). An expected QPS may sit
above the real rate, not below: LoadGen sizes the one query from it, and a query that ends before the minimum
duration is INVALID.
A GPU class is a GPU model and holds one GPU's values; it serves ``<model>x<count>`` of any count, whose expected
QPS is the class's times the count; every other value is the class's (code/config/resolve.py).
"""

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry, gpu_model_classes
from configs.gptj import CPU_MODEL, GptjBaseConfig, gptj_ladder


class OfflineBaseConfig(GptjBaseConfig):
    scenario = Scenario.Offline
    num_workers = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(OfflineBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    gpu_batch_size = 16
    offline_expected_qps = 4.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class CPU_HighAccuracy(CPU):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(OfflineBaseConfig):
    # fp8: 192 slots, realistic output lengths; an upper bound for float32 accumulation (safe for Offline), and for
    # FP8 GEMMs with a bf16 cache, not measured on their own (measured: gptj-offline-2026-11-28); 44 for the CUDA
    # decode kernel is an estimate: the 39.81 measured with the Triton kernel times the H200's gain (x1.085)
    engine_ladder = gptj_ladder(fp8={"gpu_batch_size": 192, "offline_expected_qps": 44.0},
                                fp8_gemms={"offline_expected_qps": 40.0}, bf16={})
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    gpu_batch_size = 96  # samples in flight: the prompt KV pool and generated rows fill ~60 GB
    offline_expected_qps = 13.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    pass


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # fp8: 256 slots, realistic output lengths; 50 issues enough samples for the FP8 engines with the CUDA decode
    # kernel (48.17; LoadGen adds 10%: an upper bound is safe for Offline, a lower one is not); FP8 GEMMs with a bf16
    # cache keep the Triton kernel's 44 (measured: gptj-offline-2026-11-28, cuda-decode-2026-11-29)
    engine_ladder = gptj_ladder(fp8={"gpu_batch_size": 256, "offline_expected_qps": 50.0},
                                fp8_gemms={"offline_expected_qps": 44.0}, bf16={})
    gpu_batch_size = 128
    offline_expected_qps = 20.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    pass


# Every other GPU model's classes (A100_SXM4_40GB, L4, ...; code/common/gpu_models.py) are derived from the H100 SXM's
# and the GPU (code/config/any_gpu.py), and named here as if written: configs.gptj.Offline.A100_SXM4_40GB.
__getattr__ = gpu_model_classes(Benchmark.GPTJ, Scenario.Offline)
