"""What a backend declares to the configuration: its name, where its code is, the precisions it runs, its own
switches and the rules they follow.

Each benchmark lists its backends' declarations in ``code/<bench>/backends/__init__.py``, a module that imports no
backend, so the configuration builds its field table from them and validates a resolved config against them
(``code/config/fields.py``) without loading torch or naming a backend itself. A backend's code (its options, engine
and batches) stays in its own module, imported only when a run uses it.

What a benchmark asks of a backend class is ``code.mlperf.backend_class.BackendClass``: it names resolved configs and
engine reports, which this module must not know, as the configuration is built from its declarations.
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
# field name -> how an error names where its value came from ("--precision", "precision (set by <config>)")
Origin = Callable[[str], str]
# field name -> how an error names its value and where it came from ("--precision=fp8",
# "precision=fp8 (set by <config>)")
Given = Callable[[str], str]


@dataclass(frozen=True)
class BackendDeclaration:
    """One backend as the configuration sees it. A rule returns the error's text, or None when the values pass."""

    name: str  # the ``backend`` field's value that selects it
    target: str  # "package.module:Class", imported only when a run uses the backend
    precisions: tuple[str, ...] | None  # the precisions it runs; None: it runs no model, so precision and device
    # mean nothing to it
    # The switches only it reads (one declared by several backends is one field, code/config/fields.py): each joins
    # the field table with its name, type, default and help, applies to the benchmark, and is refused when given in
    # RUN_ARGS for a run on another backend.
    switches: tuple[Field, ...] = ()
    check: Callable[[Mapping[str, Any], Origin], str | None] | None = None  # rules between its own switches
    # (values, device, "on --device=cpu", given): rules between its values and the device
    check_device: Callable[[Mapping[str, Any], str, str, Given], str | None] | None = None
    # The GPU an engine of these values needs: (the lowest compute capability, what needs it), None where any GPU
    # PyTorch runs on will do. Engine ladders skip a rung the system's GPU cannot run, and a run refuses such an
    # engine before it loads anything (code/config/capabilities.py).
    needs: Callable[[Mapping[str, Any]], Requirement | None] | None = None
    needs_from: tuple[str, ...] = ("precision",)  # the fields ``needs`` reads, which a refusal names

    @property
    def runs_model(self) -> bool:
        return self.precisions is not None


def needs_gpu(name: str, value: Any, default: Any, device: str, on: str, given: Given) -> str | None:
    """The refusal of an 8-bit value of ``name`` (fp8: e4m3 tensor cores; int8: the INT8 GEMMs) on the CPU, which
    would otherwise run something else than its label says; None when the value or the device is fine."""
    if value not in ("fp8", "int8") or device != "cpu":
        return None
    where = ("FP8 needs compute capability 8.9: Ada, Hopper, Blackwell" if value == "fp8"
             else "INT8 GEMMs run on the packed CUDA path, compute capability 8.0 or newer")
    return f"{given(name)} needs a GPU ({where}) and this run is on {on}; set --{name}={default}, or run on a GPU"


def backend_registry(kind: str, declarations: tuple[BackendDeclaration, ...]) -> LazyRegistry[str]:
    """The lazy ``{name: target}`` registry a benchmark creates its backends from, in declaration order."""
    return LazyRegistry(kind, {declared.name: declared.target for declared in declarations})


# Benchmark -> its backends' declarations, imported when a config of that benchmark is validated.
DECLARATIONS: LazyRegistry[Benchmark] = LazyRegistry("benchmark", {
    Benchmark.BERT: "code.bert.backends:DECLARATIONS",
    Benchmark.GPTJ: "code.gptj.backends:DECLARATIONS",
    Benchmark.LLAMA31: "code.llama31.backends:DECLARATIONS",
})


def declarations(benchmark: Benchmark) -> tuple[BackendDeclaration, ...]:
    """The benchmark's backends, in the order its registry lists them."""
    declared: tuple[BackendDeclaration, ...] = DECLARATIONS.load(benchmark)
    return declared


def declaration(benchmark: Benchmark, name: str) -> BackendDeclaration | None:
    """The benchmark's backend called ``name``; None if it has none of that name."""
    return next((declared for declared in declarations(benchmark) if declared.name == name), None)


def runs_model(benchmark: Benchmark, name: str) -> bool:
    """Whether the benchmark's backend ``name`` runs a model (and so reads weights, precision and device)."""
    declared = declaration(benchmark, name)
    return declared is None or declared.runs_model
