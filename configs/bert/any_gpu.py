"""BERT's rules for a GPU without a class of its own (code/config/any_gpu.py derives the class with them).

- Engines: the H100 SXM class's ladder; resolution skips the rungs the GPU cannot run (FP8 below compute capability
  8.9, the packed path's Triton kernels below 8.0), so an A100 runs INT8 then fp16, as NVIDIA's bert-99 does there.
  Below 8.0 (T4, V100) a last rung runs the padded fp16 model, which needs no Triton kernel.
- Batches: the H100's, capped by memory: BERT-large's weights are ~0.7 GB, and a batch's activations grow with its
  tokens (512 samples of ~166 tokens: ~85k tokens, a few GB with the FFN's 4,096-wide intermediate).
- Rates: the H100's measured rates times the model's published bert-99 ratio, else an estimate: the lower of its
  tensor throughput (SMs x architecture) and its power limit over the H100's 700 W, since BERT Offline runs at the
  power limit on Hopper; SingleStream's latency by tensor throughput alone (one sample does not reach the limit).
"""

from __future__ import annotations

from code.common.constants import Scenario
from code.common.gpu_models import TRITON_CAPABILITY, GpuModel, reference
from code.config.any_gpu import (
    Derivation,
    Factor,
    own_rates,
    per_sm_factor,
    published_or,
    rate_notes,
    scaled,
    scaled_rung,
)
from code.config.ladder import Rung
from code.config.resolved import WorkloadSetting
from configs.configuration import BenchmarkConfiguration

EAGER_RUNG = Rung("fp16-eager", "the padded fp16 model (no packed path): GPUs older than Ampere, which our Triton "
                  "kernels do not target", precision="fp16", fast_path=False)


def rate_factor(gpu: GpuModel, scenario: Scenario) -> Factor:
    """This GPU's BERT rate over the H100 SXM's (one published ratio serves both accuracy targets)."""
    compute = per_sm_factor(gpu)
    if scenario is Scenario.SingleStream:
        return Factor(compute, f"x {compute:.3g}, its tensor throughput over the H100 SXM's (SMs x architecture)")
    power = gpu.power_w / reference().power_w if gpu.power_w else compute
    estimate = Factor(min(compute, power), f"x {min(compute, power):.3g}, the lower of its tensor throughput "
                                           f"({compute:.3g}) and power limit ({power:.3g}) over the H100 SXM's")
    return published_or(gpu, f"bert-99 {scenario.value}", estimate)


def batch_cap(gpu: GpuModel, scenario: Scenario) -> int:
    """The largest batch this GPU's memory takes for BERT in this scenario."""
    if scenario is Scenario.SingleStream:
        return 1
    if gpu.memory_gib >= 32:
        return 512
    return 256 if gpu.memory_gib >= 12 else 128


def derive(reference: type[BenchmarkConfiguration], gpu: GpuModel, scenario: Scenario,
           workload: WorkloadSetting) -> Derivation:
    factor = rate_factor(gpu, scenario)
    cap = batch_cap(gpu, scenario)
    ladder = tuple(scaled_rung(rung, factor.value, **({"gpu_batch_size": min(cap, rung.values["gpu_batch_size"])}
                                                     if "gpu_batch_size" in rung.values else {}))
                   for rung in reference.engine_ladder)
    if gpu.capability < TRITON_CAPABILITY:
        ladder += (EAGER_RUNG,)
    values = {**scaled(own_rates(reference), factor.value),
              "gpu_batch_size": min(cap, reference.fields()["gpu_batch_size"])}
    notes = {**rate_notes(reference, factor), "gpu_batch_size": f"derived: {reference.__name__}'s, at most {cap} "
                                                                f"for {round(gpu.memory_gib)} GB"}
    return Derivation(ladder, values, notes)
