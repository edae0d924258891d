"""What a backend declares to the configuration: its name, where its code is, the precisions it runs, its own
switches and the rules they follow.

Each benchmark lists its declarations in ``code/<bench>/backends/__init__.py``, a module that imports no backend, so
the configuration builds its field table and validates against them without loading torch or naming a backend. What
a benchmark asks of a backend class is ``code.mlperf.backend_class.BackendClass``, which this module must not know.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from code.common.constants import Benchmark
from code.common.registry import LazyRegistry
from code.config.field_spec import Field

# (the lowest compute capability, what needs it): ((8, 9), "FP8 tensor cores")
Requirement = tuple[tuple[int, int], str]
# field name -> where its value came from, for an error: "--precision", "precision (set by <config>)"
Origin = Callable[[str], str]
# field name -> its value and where it came from, for an error: "--precision=fp8", "precision=fp8 (set by <config>)"
Given = Callable[[str], str]


@dataclass(frozen=True)
class BackendDeclaration:
    """One backend as the configuration sees it. A rule returns the error's text, or None when the values pass."""

    name: str  # the ``backend`` field's value that selects it
    target: str  # "package.module:Class", imported only when a run uses the backend
    precisions: tuple[str, ...] | None  # None: it runs no model, so precision and device mean nothing to it
    # The switches only it reads: each joins the field table and is refused in RUN_ARGS for a run on another backend.
    switches: tuple[Field, ...] = ()
    check: Callable[[Mapping[str, Any], Origin], str | None] | None = None  # rules between its own switches
    # (values, device, "on --device=cpu", given): rules between its values and the device
    check_device: Callable[[Mapping[str, Any], str, str, Given], str | None] | None = None
    # The lowest compute capability an engine of these values needs, and what needs it; None: any GPU will do.
    # Ladders skip a rung the GPU cannot run, and a run refuses such an engine before it loads anything.
    needs: Callable[[Mapping[str, Any]], Requirement | None] | None = None
    needs_from: tuple[str, ...] = ("precision",)  # the fields ``needs`` reads, which a refusal names

    @property
    def runs_model(self) -> bool:
        return self.precisions is not None


def needs_gpu(name: str, value: Any, default: Any, device: str, on: str, given: Given) -> str | None:
    """The refusal of an 8-bit value of ``name`` on the CPU, which would run something else than its label says."""
    if value not in ("fp8", "int8") or device != "cpu":
        return None
    where = ("FP8 needs compute capability 8.9: Ada, Hopper, Blackwell" if value == "fp8"
             else "INT8 GEMMs run on the packed CUDA path, compute capability 8.0 or newer")
    return f"{given(name)} needs a GPU ({where}) and this run is on {on}; set --{name}={default}, or run on a GPU"


def backend_registry(kind: str, declarations: tuple[BackendDeclaration, ...]) -> LazyRegistry[str]:
    """The lazy ``{name: target}`` registry a benchmark creates its backends from."""
    return LazyRegistry(kind, {declared.name: declared.target for declared in declarations})


# Benchmark -> its backends' declarations, imported when a config of that benchmark is validated.
DECLARATIONS: LazyRegistry[Benchmark] = LazyRegistry("benchmark", {
    Benchmark.BERT: "code.bert.backends:DECLARATIONS",
    Benchmark.GPTJ: "code.gptj.backends:DECLARATIONS",
    Benchmark.LLAMA31: "code.llama31.backends:DECLARATIONS",
})


def declarations(benchmark: Benchmark) -> tuple[BackendDeclaration, ...]:
    return DECLARATIONS.load(benchmark)


def declaration(benchmark: Benchmark, name: str) -> BackendDeclaration | None:
    return next((declared for declared in declarations(benchmark) if declared.name == name), None)


def runs_model(benchmark: Benchmark, name: str) -> bool:
    """Whether the backend ``name`` runs a model (and so reads weights, precision and device)."""
    declared = declaration(benchmark, name)
    return declared is None or declared.runs_model
