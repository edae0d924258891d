"""Which engines a GPU can run: an engine's needs (its backend's declaration) against the GPU's compute capability.

An engine ladder lists engines fastest first for the GPUs that run them all; on a GPU without FP8 (compute capability
below 8.9) or older than our Triton kernels (below 8.0) the rungs it cannot run are skipped, each with its reason,
so the same ladder serves an A100 and an H100 and a run never reaches a kernel its GPU has not got. A run that names
such an engine itself (RUN_ARGS) is refused before anything loads, with the engines that would run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from code.common.constants import Benchmark
from code.common.gpu_models import Capability, GpuModel, capability_text
from code.config.backends import Requirement, declaration
from code.config.fields import FIELDS, FieldError
from code.config.ladder import Ladder, Rung


def engine_needs(benchmark: Benchmark, values: Mapping[str, Any]) -> Requirement | None:
    """What GPU an engine of these values needs (its backend's ``needs``; a field the values lack is at its default);
    None: any GPU, or no model at all."""
    values = {name: fld.default for name, fld in FIELDS.items()} | dict(values)
    declared = declaration(benchmark, values["backend"])
    if declared is None or declared.needs is None:
        return None
    return declared.needs(values)


def missing(benchmark: Benchmark, values: Mapping[str, Any], capability: Capability) -> str | None:
    """Why a GPU of ``capability`` cannot run the engine of ``values`` (None when it can): ``FP8 GEMMs (e4m3 tensor
    cores) need compute capability 8.9, the GPU has 8.0``."""
    needs = engine_needs(benchmark, values)
    if needs is None or capability >= needs[0]:
        return None
    return f"{needs[1]} need compute capability {capability_text(needs[0])}, the GPU has {capability_text(capability)}"


def runnable_rungs(benchmark: Benchmark, ladder: Ladder, below: Mapping[str, Any],
                   capability: Capability) -> tuple[Ladder, tuple[tuple[str, str], ...]]:
    """The rungs a GPU of ``capability`` runs, in order, and the others with the reason each is skipped. ``below``:
    the config class's values (and defaults) a rung's own values go over."""
    kept: list[Rung] = []
    skipped: list[tuple[str, str]] = []
    for rung in ladder:
        why = missing(benchmark, {**below, **rung.values}, capability)
        if why is None:
            kept.append(rung)
        else:
            skipped.append((rung.name, why))
    return tuple(kept), tuple(skipped)


def check_runs_on(benchmark: Benchmark, values: Mapping[str, Any], sources: Mapping[str, str], gpu: GpuModel,
                  device: str) -> None:
    """Refuse, before anything loads, an engine the run's GPU cannot run, naming the field that chose it and the fix:
    a kernel that is not there is a crash in the middle of a run."""
    why = missing(benchmark, values, gpu.capability)
    if why is None:
        return
    declared = declaration(benchmark, values["backend"])
    chosen = [name for name in (declared.needs_from if declared else ()) if name in values]
    given = ", ".join(f"--{name}={values[name]}" if sources.get(name) == "RUN_ARGS"
                      else f"{name}={values[name]} (set by {sources.get(name, 'default')})" for name in chosen)
    raise FieldError(f"this engine ({given}) cannot run on {device}, {gpu.name} ({gpu.describe()}): {why}; leave "
                     "the engine fields out so the config's engine ladder picks one this GPU runs (make info lists "
                     "them), or name one of those")
