"""A config for any NVIDIA GPU that has no class of its own, derived from what the GPU is.

A system ``<model>x<count>`` whose model no class names (``A100_SXM4_40GBx8``, ``L4x1``, a GPU this harness has never
seen) still runs: ``ConfigRegistry.get`` falls back to the class derived here from the reference GPU's class (the
H100 SXM's, every engine of which was measured here) and the facts of the model (code/common/gpu_models.py: a
datasheet row, or NVML on the machine itself):

- the engine ladder is the reference's, with the rungs the GPU cannot run skipped at resolution by its compute
  capability (code/config/capabilities.py; ``make info`` names each and why) and, where a benchmark's rules add them,
  rungs for older GPUs (``configs/<bench>/any_gpu.py``);
- batch sizes and GPT-J's samples in flight follow the GPU's memory (the benchmark's rules);
- rates are the reference's measured ones times a factor: the model's published per-GPU MLPerf result over the H100
  SXM's where one exists, else an estimate from its SM count, architecture, power limit and memory bandwidth. Each is
  an estimate and says so; the first ``--test_run``'s probe, or ``make find_performance``, measures the real one.

A class written for the model (in a scenario file, or ``custom.py`` by ``make add_system``) wins over the derived
one, as any class of a system's own name does.
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
# How much of the H100's rate per SM and clock each architecture's tensor cores give (dense fp16/8-bit, from
# NVIDIA's datasheets: A100 312 TFLOP/s on 108 SMs, A10 125 on 72, L40S 362 on 142, H100 SXM 989 on 132, B200 2,250
# on 148), for a GPU whose published result is not known.
PER_SM_VS_HOPPER = {(7, 0): 0.15, (7, 5): 0.15, (8, 0): 0.39, (8, 6): 0.23, (8, 9): 0.34, (9, 0): 1.0, (10, 0): 2.0}


@dataclass(frozen=True)
class Factor:
    """A GPU's rate over the reference's, and where the number comes from (shown beside every estimated value)."""

    value: float
    why: str
    published: bool = False  # a published result's ratio: it already holds the GPU's own batch sizes and limits


@dataclass
class Derivation:
    """What a benchmark's rules derive for one GPU: the ladder, the class's own values, and each value's note."""

    ladder: tuple[Rung, ...]
    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # field -> "derived: ..." or "estimate: ..."
    skipped: tuple[tuple[str, str], ...] = ()  # the reference's rungs left out, each with why (GPT-J's memory)


def per_sm_factor(gpu: GpuModel) -> float:
    """The GPU's tensor throughput over the H100 SXM's, from its SM count and architecture (1.0 when the SM count
    is unknown: an Offline query sized too large runs longer, one sized too small is INVALID)."""
    known = [cap for cap in PER_SM_VS_HOPPER if cap <= gpu.capability]
    per_sm = PER_SM_VS_HOPPER[max(known)] if known else PER_SM_VS_HOPPER[min(PER_SM_VS_HOPPER)]
    return per_sm * gpu.sm_count / reference().sm_count if gpu.sm_count else 1.0


def published_or(gpu: GpuModel, workload: str, estimate: Factor) -> Factor:
    """The model's published per-GPU result over the H100 SXM's for ``workload`` (``bert-99 Offline``) where one is
    known, else ``estimate``."""
    ratio = gpu.published.get(workload)
    if ratio is None:
        return estimate
    return Factor(ratio, f"x {ratio:g}, the published {gpu.name}/H100 SXM per-GPU ratio of {workload}",
                  published=True)


def is_rate(name: str) -> bool:
    """Whether field ``name`` is one a GPU's speed sets: a throughput, or SingleStream's expected latency."""
    return FIELDS[name].system_rate or name == LATENCY_FIELD


def own_rates(config: type[BenchmarkConfiguration]) -> dict[str, Any]:
    """The rates a config class holds itself (its ladder's last engine's), which a derived class scales."""
    return {name: value for name, value in config.fields().items() if is_rate(name)}


def scaled(values: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """``values`` with the rates multiplied by ``factor`` and the expected latency divided by it."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if FIELDS[name].system_rate:
            out[name] = max(0.01, round(value * factor, 2))
        elif name == LATENCY_FIELD:
            out[name] = int(value / factor)
        else:
            out[name] = value
    return out


def scaled_rung(rung: Rung, factor: float, **values: Any) -> Rung:
    """The rung with its rates scaled, and ``values`` (batch sizes for this GPU) over its own."""
    return Rung(rung.name, rung.why, **{**scaled(rung.values, factor), **values})


def rate_notes(reference: type[BenchmarkConfiguration], factor: Factor) -> dict[str, str]:
    """The note beside each rate field of a derived class."""
    note = f"estimate: {reference.__name__}'s measured rate {factor.why}"
    return {name: note for name in FIELDS if is_rate(name)}


_DERIVED: dict[tuple[Benchmark, Scenario, str, WorkloadSetting], type[BenchmarkConfiguration]] = {}


def derived_class(reference: type[BenchmarkConfiguration], benchmark: Benchmark, scenario: Scenario,
                  workload: WorkloadSetting, gpu: GpuModel) -> type[BenchmarkConfiguration]:
    """The config class of ``gpu`` for this benchmark, scenario and workload, derived from the reference's class by
    the benchmark's rules (``configs/<bench>/any_gpu.py``: ``derive``); made once per process and kept, so a class
    compares equal to itself. Raises ``ConfigError`` where the benchmark does not fit the GPU, saying why."""
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
