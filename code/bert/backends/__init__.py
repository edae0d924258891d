"""BERT backends: what turns a batch of features into start/end logits, looked up by name.

The benchmark depends on this module only: the ``BertBackendClass`` protocol, the declarations and
``backend_class``, never on a concrete backend. A backend owns its options (a frozen dataclass its
``options_from`` builds from the resolved config), its engine (if it has one) and its switches; its declaration
here tells the configuration which precisions it runs, which switches it reads (the configuration's field table
takes them from here) and the rules they follow. Each backend module is imported only when asked for, so the oracle
runs without torch weights and validating a config imports no backend.

Adding a backend: its module (class + options), one declaration below. Adding a switch of the packed path: its
``Field`` and ``PackedKernels`` attribute in ``code/bert/packed/spec.py`` and the kernel that reads it; of the
backend itself: its ``Field`` below and the line of its ``options_from`` that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from code.bert.packed.spec import KERNEL_SWITCHES, QUANTIZED, kernel_rules
from code.common.gpu_models import BF16_CAPABILITY, FP8_CAPABILITY, TRITON_CAPABILITY
from code.config.backends import BackendDeclaration, Origin, Requirement, backend_registry
from code.config.field_spec import Field, Range
from code.mlperf.backend_class import BackendClass

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
"""What the benchmark asks of a backend class (``code.mlperf.backend_class.BackendClass``), with this benchmark's
context and batches."""


# The pytorch backend's own switches; the packed path's kernels add theirs (code/bert/packed/spec.py).
PYTORCH_SWITCHES = (
    Field("fast_path", bool, True, "BERT on CUDA: the packed path (fused kernels, varlen attention, 8-bit GEMMs, "
          "CUDA graphs) for fp16/bf16/fp8/int8 engines; off: the eager padded model", engine=True),
    Field("cuda_graphs", bool, True, "BERT packed path: CUDA graphs, one per token bucket for small batches (alias "
          "--use_graphs, NVIDIA's name)"),
    Field("graph_max_tokens", int, 16384, "BERT packed path: largest token bucket with a CUDA graph (larger batches "
          "run eagerly; 0: none)", range=Range(0, 1_048_576)),
    *KERNEL_SWITCHES,
)
ORACLE_SWITCHES = (
    Field("oracle_shift", int, 0, "oracle backend, a deliberately failing oracle: move the gold answer by this many "
          "tokens", range=Range(0, 1024), engine=True),
    Field("oracle_batch_ms", float, 0.0, "oracle backend: each batch takes at least this long, a throughput set by "
          "the batch size rather than by the machine's load, for pipeline checks that compare two runs' performance "
          "(a TEST01 audit with its reference run, a full-length pipeline run)", range=Range(0.0, 10_000.0)),
)


def _pytorch_rules(values: Mapping[str, Any], origin: Origin) -> str | None:
    """8-bit GEMMs (fp8, int8) exist only on the packed path; without it such an engine runs 16-bit, not the
    precision recorded. Then the packed path's own rules (``kernel_rules``)."""
    precision = values.get("precision")
    if precision in QUANTIZED and not values.get("fast_path", True):
        return (f"{origin('precision')} = {precision!r} runs {precision.upper()} GEMMs on the packed path only, and "
                f"{origin('fast_path')} is off; turn the packed path on or set --precision=fp16")
    return kernel_rules(values, origin)


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
                       precisions=("fp32", "fp16", "bf16", "fp8", "int8"), switches=PYTORCH_SWITCHES,
                       check=_pytorch_rules, needs=_pytorch_needs, needs_from=("precision", "fast_path")),
    BackendDeclaration("oracle", "code.bert.backends.oracle:OracleBertBackend", precisions=None,
                       switches=ORACLE_SWITCHES),
)
BACKENDS = backend_registry("BERT backend", DECLARATIONS)


def backend_class(name: str) -> BertBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: BertBackendClass = BACKENDS.load(name)
    return loaded


def create_backend(name: str, options: Any) -> BertBackend:
    """The backend registered as ``name``, constructed with its ``options``."""
    return backend_class(name)(options)
