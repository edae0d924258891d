"""llama3.1-8b SingleStream (edge): one sample at a time; the 90th-percentile latency is the metric.

The expected latency is set below the p90, so LoadGen plans enough queries to fill the minimum duration. A GPU
class serves ``<model>x<count>`` with its values as they are: one sample at a time runs on one GPU.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.llama31 import CPU_LENGTH_SCALE, CPU_MODEL, LlamaBaseConfig, llama_ladder


class SingleStreamBaseConfig(LlamaBaseConfig):
    scenario = Scenario.SingleStream
    num_workers = 1
    gpu_batch_size = 1


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(SingleStreamBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    # the in-flight engine, as on a GPU: it reports each first token as soon as it has it, so LoadGen times the
    # first token and the time per output token (the pytorch backend's whole responses time neither)
    backend = "inflight"
    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    synthetic_length_scale = CPU_LENGTH_SCALE
    single_stream_expected_latency_ns = 200_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(SingleStreamBaseConfig):
    # the in-flight engine with one slot: its decode step is one CUDA graph, and it reports each first token as soon
    # as it has it, which SingleStream's token latencies time. FP8 first, as Offline and Server: a sample reads
    # half the bytes; the expected latencies are estimates, the H200's scaled by the memory's speed
    engine_ladder = llama_ladder(fp8={"single_stream_expected_latency_ns": 750_000_000},
                                 fp8_gemms={"single_stream_expected_latency_ns": 850_000_000}, bf16={})
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    # the bf16 rung's: an estimate, the H200's sample time scaled by the memory's speed (configs/llama31/__init__.py)
    single_stream_expected_latency_ns = 1_100_000_000


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # a sample's whole time, so LoadGen plans the queries the minimum duration holds; FP8 GEMMs with a bf16 cache:
    # an estimate between the two (measured: llama-server57-fp8-ss-2026-11-29)
    engine_ladder = llama_ladder(fp8={"single_stream_expected_latency_ns": 500_000_000},
                                 fp8_gemms={"single_stream_expected_latency_ns": 600_000_000}, bf16={})
    # the bf16 rung's sample time (measured: llama-server37-ss-2026-11-29)
    single_stream_expected_latency_ns = 1_000_000_000
