"""GPT-J backends: what turns a batch of prompts into generated token ids, looked up by name.

The benchmark depends on this module only: the protocols, the declarations and ``backend_class``. A backend builds
its own frozen options from the resolved config (``options_from``); its declaration here tells the configuration
which precisions it runs and the rules its switches follow. Each backend module is imported when asked for, so
the oracle runs without loading a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from code.common.backends import BackendDeclaration, Origin, backend_registry

if TYPE_CHECKING:
    from code.common.config import ResolvedConfig


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # a checkpoint folder/file, "random", or "none (...)"
    max_prompt_length: int  # the longest prompt of the run's samples
    engine_dir: Path | None = None  # inflight FP8: the engine holding the calibration (code/gptj/engine.py)
    engine_spec: Any = None  # inflight FP8: the EngineSpec the run expects of it
    references_text: list[str] | None = None  # the reference summary of each sample, where the run has them
    tokenizer: Any = None  # GPT-J's tokenizer, where the run has references


class GptjBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        """One int32 prompt per sample in; the int32 generated token ids of each sample out (prompt excluded)."""
        ...


class GptjBackendClass(Protocol):
    """What the benchmark asks of a backend before one exists: its options, then an instance."""

    def options_from(self, config: ResolvedConfig, context: BackendContext) -> Any:
        """The backend's own frozen options, read from the resolved config and the context."""
        ...

    def __call__(self, options: Any) -> GptjBackend: ...


def _inflight_runs_beam_search(values: Mapping[str, Any], origin: Origin) -> str | None:
    if values.get("num_beams", 2) < 2:
        return (f"{origin('num_beams')} = {values['num_beams']}: the inflight backend runs beam search "
                "(num_beams >= 2); for greedy search (num_beams=1) use --backend=pytorch")
    return None


def _inflight_on_gpu(values: Mapping[str, Any], device: str, on: str) -> str | None:
    if device != "cpu" and values.get("precision") == "fp32":
        return (f"the inflight backend on {on} runs bf16, fp16 or fp8 (FlashAttention has no float32); "
                "set --precision=bf16")
    return None


# What the configuration checks a GPT-J config against (code/common/fields.py); the order is the error's.
DECLARATIONS = (
    BackendDeclaration("pytorch", "code.gptj.backends.pytorch:PytorchGptjBackend", precisions=("fp32", "bf16", "fp16")),
    BackendDeclaration("inflight", "code.gptj.backends.inflight:InflightGptjBackend",
                       precisions=("fp32", "bf16", "fp16", "fp8"), check=_inflight_runs_beam_search,
                       check_device=_inflight_on_gpu),
    BackendDeclaration("oracle", "code.gptj.backends.oracle:OracleGptjBackend", precisions=None),
)
# name -> "module:class", imported only when backend_class asks for it
BACKENDS = backend_registry("GPT-J backend", DECLARATIONS)


def backend_class(name: str) -> GptjBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: GptjBackendClass = BACKENDS.load(name)
    return loaded

