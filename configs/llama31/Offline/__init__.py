"""llama3.1-8b Offline: one query with every sample; LoadGen reports samples/s and tokens/s.

An expected QPS may sit above the real rate, not below: LoadGen sizes the one query from it, and a query that ends
before the minimum duration is INVALID. A GPU class holds one GPU's values and serves ``<model>x<count>``, whose
expected QPS is the class's times the count (code/config/resolve.py).
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.llama31 import CPU_LENGTH_SCALE, CPU_MODEL, LlamaBaseConfig, llama_ladder


class OfflineBaseConfig(LlamaBaseConfig):
    scenario = Scenario.Offline
    num_workers = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(OfflineBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    synthetic_length_scale = CPU_LENGTH_SCALE
    gpu_batch_size = 16
    # the first --test_run's rate on the 2-core development machine, rounded up (configs/llama31/__init__.py)
    offline_expected_qps = 6.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(OfflineBaseConfig):
    # fp8: the memory plan's cap with an FP8 cache and weights; the rates are estimates, the H200's scaled by the
    # memory's speed and set above it, as Offline needs (configs/llama31/__init__.py)
    engine_ladder = llama_ladder(fp8={"gpu_batch_size": 512, "offline_expected_qps": 45.0},
                                 fp8_gemms={"offline_expected_qps": 42.0}, bf16={})
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    # samples in flight: llama_memory_plan fits 402 with ~1,000-token prompts (128 kB of KV cache a token)
    gpu_batch_size = 384
    # estimate, meant to sit above the rate as Offline needs (configs/llama31/__init__.py)
    offline_expected_qps = 25.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # fp8: the rate is set above the one measured (60.95 with the CUDA decode kernel), as Offline needs; FP8 GEMMs
    # with a bf16 cache keep the Triton kernel's upper bound (measured: llama-fused-2026-11-29, cuda-decode-2026-11-29)
    engine_ladder = llama_ladder(fp8={"gpu_batch_size": 512, "offline_expected_qps": 62.0},
                                 fp8_gemms={"offline_expected_qps": 60.0}, bf16={})
    # llama_memory_plan's cap (~800 would fit 141 GB); the rate is set above the one measured in bf16, as Offline
    # needs (measured: llama-server-2026-11-29)
    gpu_batch_size = 512
    offline_expected_qps = 30.0
