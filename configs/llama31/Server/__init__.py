"""llama3.1-8b Server: Poisson arrivals at server_target_qps; mlperf.conf from v5.1 limits each sample's time to
first token (2 s, p99) and time per output token (100 ms, p99) instead of its whole latency.

A Server target may sit below the real rate (it then reports less), not above. A GPU class holds one GPU's values
and serves ``<model>x<count>``, whose target is the class's times the count (code/config/resolve.py). The PyTorch
and in-flight backends hand over whole responses, so the core reports a sample's first token
(``FirstTokenComplete``) with it: until an engine streams first tokens, a Server run's TTFT is each sample's whole
latency.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
from configs.configuration import ConfigRegistry
from configs.llama31 import CPU_LENGTH_SCALE, CPU_MODEL, LlamaBaseConfig


class ServerBaseConfig(LlamaBaseConfig):
    scenario = Scenario.Server
    num_workers = 1
    batch_timeout_us = 0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(ServerBaseConfig):
    """Any machine without an NVIDIA GPU: the embedded default and CI."""

    model_name = CPU_MODEL
    precision = "fp32"
    device = "cpu"
    synthetic_sample_count = 64
    synthetic_length_scale = CPU_LENGTH_SCALE
    gpu_batch_size = 8
    server_target_qps = 2.0  # a third of the Offline class's rate: batches stay small


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H100_SXM_80GB(ServerBaseConfig):
    backend = "inflight"
    precision = "bf16"
    device = "cuda"
    # samples in flight: few, so each step stays short (a sample's TTFT is its whole latency; configs/llama31)
    gpu_batch_size = 64
    # estimate, a lower bound as Server needs (configs/llama31/__init__.py)
    server_target_qps = 6.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    server_target_qps = 8.0  # estimate, a lower bound (configs/llama31/__init__.py)
