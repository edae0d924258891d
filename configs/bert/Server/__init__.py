"""BERT Server: Poisson arrivals at server_target_qps; p99 latency must stay under 130 ms.

GPU classes run the packed path (documentation/bert_gpu.md): batches of up to 128 samples (~21k tokens) gathered
for at most 2 ms, two workers so one batch is packed while the other runs; batches up to 16k tokens replay a CUDA
graph. A GPU class is a GPU model: each engine of its ladder (``engine_ladder``, configs/bert/__init__.py) targets a
little under the highest VALID rate measured on one such GPU with that engine, and a system ``<model>x<count>``
targets the count times it; every other value is the class's (code/config/resolve.py), whose own values are its
last engine's. Each number cites the measurement journal's entry (documentation/notes/journal/) by its id:
``# measured: <id>``. On a CPU, BERT-large cannot meet 130 ms per query; the CPU class exists so the flow runs
everywhere (its result is INVALID, and says why).
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


class ServerBaseConfig(BertBaseConfig):
    scenario = Scenario.Server
    num_workers = 1
    batch_timeout_us = 0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class CPU(ServerBaseConfig):
    precision = BestCpuPrecision()  # bf16 where the CPU has bf16 arithmetic, else fp32
    device = "cpu"
    gpu_batch_size = 4
    server_target_qps = 1.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_cpu
class CPU_HighAccuracy(CPU):
    server_target_qps = 0.5


# FP8's shorter batches leave Server latency to spare, so its fastest engines batch more
# (measured: bert-server-2026-11-28)
FP8_BATCHING = {"gpu_batch_size": 256, "batch_timeout_us": 4000}


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
@on_gpu
class H100_SXM_80GB(ServerBaseConfig):
    # Each engine a little under its highest VALID rate, with p99 margin (measured: bert-server-2026-11-28); the e4m3
    # residual without FP8 attention is not measured here: no rung.
    engine_ladder = bert_99_ladder(fp8={"server_target_qps": 7000.0}, fp16={"server_target_qps": 4400.0},
                                   int8={"server_target_qps": 5000.0, **FP8_BATCHING},
                                   fp8_attention={"server_target_qps": 7600.0, **FP8_BATCHING})
    gpu_batch_size = 128
    num_workers = 2
    batch_timeout_us = 2000
    server_target_qps = 4400.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H100_SXM_80GB_HighAccuracy(H100_SXM_80GB):
    # both under the highest VALID rate (measured: bert-server-2026-11-28)
    engine_ladder = bert_99_9_ladder(fp8={"server_target_qps": 6200.0}, fp16={"server_target_qps": 4000.0})
    server_target_qps = 4000.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class H200_SXM_141GB(H100_SXM_80GB):
    # under the highest VALID rates (measured: bert-server-2026-11-28)
    engine_ladder = bert_99_ladder(fp8={"server_target_qps": 7100.0, **FP8_BATCHING},
                                   fp16={"server_target_qps": 4700.0},
                                   int8={"server_target_qps": 5000.0, **FP8_BATCHING},
                                   fp8_residual={"server_target_qps": 7800.0, **FP8_BATCHING},
                                   fp8_attention={"server_target_qps": 8000.0, **FP8_BATCHING})
    server_target_qps = 4700.0


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
@high_accuracy_on_gpu
class H200_SXM_141GB_HighAccuracy(H200_SXM_141GB):
    # under the highest VALID rates (measured: bert-server-2026-11-28)
    engine_ladder = bert_99_9_ladder(fp8={"server_target_qps": 6500.0, **FP8_BATCHING},
                                     fp16={"server_target_qps": 4400.0})
    server_target_qps = 4400.0


# Every other GPU model's classes (A100_SXM4_40GB, L4, ...; code/common/gpu_models.py) are derived from the H100 SXM's
# and the GPU (code/config/any_gpu.py), and named here as if written: configs.bert.Server.A100_SXM4_40GB.
__getattr__ = gpu_model_classes(Benchmark.BERT, Scenario.Server)
