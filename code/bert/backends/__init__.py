"""BERT backends: what turns a batch of features into start/end logits, looked up by name.

The benchmark depends on this module only: the ``BertBackendClass`` protocol, the declarations and
``backend_class``, never on a concrete backend. A backend owns its options (a frozen dataclass its
``options_from`` builds from the resolved config), its engine (if it has one) and its switches; its declaration
here tells the configuration which precisions it runs and the rules its switches follow. Each backend module is
imported only when asked for, so the oracle runs without torch weights and validating a config imports no backend.

Adding a backend: its module (class + options), one declaration below. Adding a switch: one field in
``code/common/fields.py`` and the line of the backend's ``options_from`` that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from code.common.backends import BackendClass, BackendDeclaration, Origin, Requirement, backend_registry
from code.common.gpu_models import BF16_CAPABILITY, FP8_CAPABILITY, TRITON_CAPABILITY

if TYPE_CHECKING:
    from code.bert.dataset import BertFeatures


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options and engine draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # the weights: a checkpoint path, "random", or "none (...)"
    engines_dir: Path  # this config's engines (ENGINES_DIR/<system>/bert/<scenario>); a backend's go under it
    features: BertFeatures | None = None  # the run's features; None where nothing runs (make info, engines)


class BertBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray,
                  input_mask: np.ndarray) -> np.ndarray:
        """Inputs int32 ``[B, S]`` (S = the batch's longest sequence); returns float32 ``[B, S, 2]`` logits."""
        ...


BertBackendClass = BackendClass[BackendContext, BertBackend]
"""What the benchmark asks of a backend class (``code.common.backends.BackendClass``), with this benchmark's
context and batches."""


QUANTIZED = ("fp8", "int8")  # the precisions with 8-bit GEMMs: calibrated engines, run on the packed GPU path only


def _eight_bit_needs_fast_path(values: Mapping[str, Any], origin: Origin) -> str | None:
    """8-bit GEMMs (fp8, int8) exist only on the packed path; without it such an engine runs 16-bit, not the
    precision recorded."""
    precision = values.get("precision")
    if precision in QUANTIZED and not values.get("fast_path", True):
        return (f"{origin('precision')} = {precision!r} runs {precision.upper()} GEMMs on the packed path only, and "
                f"{origin('fast_path')} is off; turn the packed path on or set --precision=fp16")
    return None


def _pytorch_needs(values: Mapping[str, Any]) -> Requirement | None:
    """What GPU an engine of the pytorch backend needs: FP8 GEMMs need e4m3 tensor cores (Ada and newer); the packed
    path's Triton kernels, INT8 GEMMs among them, Ampere or newer, as does bf16; the eager fp16 model any GPU."""
    precision = values.get("precision")
    if precision == "fp8":
        return FP8_CAPABILITY, "FP8 GEMMs (e4m3 tensor cores)"
    if precision == "int8":
        return TRITON_CAPABILITY, "the INT8 GEMMs (Triton int8 tensor-core kernels)"
    if precision == "bf16":
        return BF16_CAPABILITY, "bf16 tensor cores"
    if values.get("fast_path", True) and precision == "fp16":
        return TRITON_CAPABILITY, "the packed path's Triton kernels (fast_path)"
    return None


DECLARATIONS = (
    BackendDeclaration("pytorch", "code.bert.backends.pytorch:PytorchBertBackend",
                       precisions=("fp32", "fp16", "bf16", "fp8", "int8"), check=_eight_bit_needs_fast_path,
                       needs=_pytorch_needs),
    BackendDeclaration("oracle", "code.bert.backends.oracle:OracleBertBackend", precisions=None),
)
BACKENDS = backend_registry("BERT backend", DECLARATIONS)


def backend_class(name: str) -> BertBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: BertBackendClass = BACKENDS.load(name)
    return loaded


def create_backend(name: str, options: Any) -> BertBackend:
    """The backend registered as ``name``, constructed with its ``options``."""
    return backend_class(name)(options)
