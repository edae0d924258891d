"""A config for any NVIDIA GPU that has no class of its own, derived from what the GPU is.

A system whose model no class names (``A100_SXM4_40GBx8``, ``L4x1``, a GPU never seen here) still runs: the registry
falls back to the class derived here from the reference GPU's (the H100 SXM's, every engine of which was measured)
and the model's facts (code/common/gpu_models.py: a datasheet row, or NVML), by the benchmark's rules
(``configs/<bench>/any_gpu.py``): the reference's ladder, rungs the GPU cannot run skipped at resolution; batch
sizes from the GPU's memory; rates the reference's times the model's published per-GPU result over the H100 SXM's,
else an estimate from SM count and architecture, each saying so until a probe or ``make find_performance`` measures
it. A class written for the model wins over the derived one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.gpu_models import GpuModel, reference
from code.config.classes import BenchmarkConfiguration, validate_config_class
from code.config.fields import FIELDS
from code.config.ladder import Rung
from code.config.resolved import WorkloadSetting

LATENCY_FIELD = "single_stream_expected_latency_ns"
# Each architecture's tensor throughput per SM over the H100's (dense fp16/8-bit, NVIDIA's datasheets: A100 312
# TFLOP/s on 108 SMs, A10 125 on 72, L40S 362 on 142, H100 SXM 989 on 132, B200 2,250 on 148).
PER_SM_VS_HOPPER = {(7, 0): 0.15, (7, 5): 0.15, (8, 0): 0.39, (8, 6): 0.23, (8, 9): 0.34, (9, 0): 1.0, (10, 0): 2.0}


@dataclass(frozen=True)
class Factor:
    """A GPU's rate over the reference's, and where the number comes from (shown beside each estimated value)."""

    value: float
    why: str
    published: bool = False  # a published result's ratio: it already holds the GPU's own batch sizes and limits


@dataclass
class Derivation:
    """What a benchmark's rules derive for one GPU."""

    ladder: tuple[Rung, ...]
    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # field -> "derived: ..." or "estimate: ..."
    skipped: tuple[tuple[str, str], ...] = ()  # the reference's rungs left out, each with why (GPT-J's memory)


def per_sm_factor(gpu: GpuModel) -> float:
    """The GPU's tensor throughput over the H100 SXM's; 1.0 for an unknown SM count (an Offline query sized too
    large runs longer, one too small is INVALID)."""
    known = [cap for cap in PER_SM_VS_HOPPER if cap <= gpu.capability]
    per_sm = PER_SM_VS_HOPPER[max(known)] if known else PER_SM_VS_HOPPER[min(PER_SM_VS_HOPPER)]
    return per_sm * gpu.sm_count / reference().sm_count if gpu.sm_count else 1.0


def published_or(gpu: GpuModel, workload: str, estimate: Factor) -> Factor:
    """The published per-GPU result over the H100 SXM's for ``workload`` (``bert-99 Offline``), else ``estimate``."""
    ratio = gpu.published.get(workload)
    if ratio is None:
        return estimate
    return Factor(ratio, f"x {ratio:g}, the published {gpu.name}/H100 SXM per-GPU ratio of {workload}",
                  published=True)


def is_rate(name: str) -> bool:
    """A throughput, or SingleStream's expected latency: what a GPU's speed sets."""
    return FIELDS[name].system_rate or name == LATENCY_FIELD


def own_rates(config: type[BenchmarkConfiguration]) -> dict[str, Any]:
    """The class's own rates (its ladder's last engine's), which a derived class scales."""
    return {name: value for name, value in config.fields().items() if is_rate(name)}


def scaled(values: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """``values`` with the rates multiplied by ``factor`` and the expected latency divided by it."""
    return {name: max(0.01, round(value * factor, 2)) if FIELDS[name].system_rate
            else int(value / factor) if name == LATENCY_FIELD else value for name, value in values.items()}


def scaled_rung(rung: Rung, factor: float, **values: Any) -> Rung:
    """The rung with its rates scaled, and ``values`` (this GPU's batch sizes) over its own."""
    return Rung(rung.name, rung.why, **{**scaled(rung.values, factor), **values})


def rate_notes(reference: type[BenchmarkConfiguration], factor: Factor) -> dict[str, str]:
    note = f"estimate: {reference.__name__}'s measured rate {factor.why}"
    return {name: note for name in FIELDS if is_rate(name)}


_DERIVED: dict[tuple[Benchmark, Scenario, str, WorkloadSetting], type[BenchmarkConfiguration]] = {}


def derived_class(reference: type[BenchmarkConfiguration], benchmark: Benchmark, scenario: Scenario,
                  workload: WorkloadSetting, gpu: GpuModel) -> type[BenchmarkConfiguration]:
    """``gpu``'s class, derived by ``configs/<bench>/any_gpu.py``'s ``derive``; made once per process, so it compares
    equal to itself. ``ConfigError`` where the benchmark does not fit the GPU."""
    key = (benchmark, scenario, gpu.name, workload)
    if key not in _DERIVED:
        rules = importlib.import_module(f"configs.{benchmark.package}.any_gpu")
        derivation: Derivation = rules.derive(reference, gpu, scenario, workload)
        suffix = "_HighAccuracy" if workload.accuracy_target is AccuracyTarget.k_99_9 else ""
        namespace = {
            "__doc__": f"{gpu.name}, derived from {reference.__name__} and the GPU ({gpu.describe()}; "
                       f"{gpu.source}).",
            "__module__": f"configs.{benchmark.package}.any_gpu",
            "engine_ladder": derivation.ladder,
            "value_notes": derivation.notes,
            "skipped_rungs": derivation.skipped,
            "gpu_model": gpu,
            **derivation.values,
        }
        config = type(reference)(f"{gpu.name}{suffix}", (reference,), namespace)
        validate_config_class(config)
        _DERIVED[key] = config
    return _DERIVED[key]
