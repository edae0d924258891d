"""Which engines a GPU can run: an engine's needs (its backend's declaration) against the GPU's compute capability.

On a GPU without FP8 (below 8.9) or older than our Triton kernels (below 8.0) the ladder's rungs it cannot run are
skipped, each with its reason, so one ladder serves an A100 and an H100 and a run never reaches a kernel its GPU
lacks. A run that names such an engine itself (RUN_ARGS) is refused before anything loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from code.common.constants import Benchmark
from code.common.gpu_models import Capability, GpuModel, capability_text
from code.config.backends import Requirement, declaration
from code.config.fields import FIELDS, FieldError, given_of
from code.config.ladder import Ladder


def engine_needs(benchmark: Benchmark, values: Mapping[str, Any]) -> Requirement | None:
    """What GPU an engine of these values (a missing field at its default) needs; None: any GPU, or no model."""
    values = {name: fld.default for name, fld in FIELDS.items()} | dict(values)
    declared = declaration(benchmark, values["backend"])
    if declared is None or declared.needs is None:
        return None
    return declared.needs(values)


def missing(benchmark: Benchmark, values: Mapping[str, Any], capability: Capability) -> str | None:
    """Why a GPU of ``capability`` cannot run the engine of ``values``, None when it can."""
    needs = engine_needs(benchmark, values)
    if needs is None or capability >= needs[0]:
        return None
    return f"{needs[1]} need compute capability {capability_text(needs[0])}, the GPU has {capability_text(capability)}"


def runnable_rungs(benchmark: Benchmark, ladder: Ladder, below: Mapping[str, Any],
                   capability: Capability) -> tuple[Ladder, tuple[tuple[str, str], ...]]:
    """The rungs (over ``below``, the class's values) a GPU of ``capability`` runs, and the others with why not."""
    why = {rung.name: missing(benchmark, {**below, **rung.values}, capability) for rung in ladder}
    return (tuple(rung for rung in ladder if why[rung.name] is None),
            tuple((name, reason) for name, reason in why.items() if reason is not None))


def check_runs_on(benchmark: Benchmark, values: Mapping[str, Any], sources: Mapping[str, str], gpu: GpuModel,
                  device: str) -> None:
    """Refuse, before anything loads, an engine the run's GPU cannot run: a missing kernel crashes mid-run."""
    why = missing(benchmark, values, gpu.capability)
    if why is None:
        return
    declared = declaration(benchmark, values["backend"])
    given = given_of(values, sources)
    chosen = ", ".join(given(name) for name in (declared.needs_from if declared else ()) if name in values)
    raise FieldError(f"this engine ({chosen}) cannot run on {device}, {gpu.name} ({gpu.describe()}): {why}; leave "
                     "the engine fields out so the config's engine ladder picks one this GPU runs (make info lists "
                     "them), or name one of those")
