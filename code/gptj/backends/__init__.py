"""GPT-J backends: what turns a batch of prompts into generated token ids, looked up by name.

The benchmark depends on the ``GptjBackend`` protocol and ``create_backend`` only; each backend module is imported
when asked for, so the oracle runs without loading a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from code.common.backends import BackendDeclaration, Origin, backend_registry


@dataclass(frozen=True)
class BackendOptions:
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    cpu_threads: int = 0  # on a CPU device: torch's intra-op threads (0: leave torch's default)
    model_name: str = "6b"  # pytorch: GPT-J config of random weights (a checkpoint brings its own)
    checkpoint: str = "random"  # pytorch: a checkpoint folder/file, or "random"
    precision: str = "fp32"  # pytorch: fp32 | bf16 | fp16; inflight also fp8 (FP8 GEMMs, bf16 elsewhere)
    kv_cache_dtype: str = "auto"  # inflight: auto (the model's dtype) | fp8
    seed: int = 0  # pytorch: random weights depend on it
    num_beams: int = 4  # 4: the closed-division rule; 1: greedy
    max_batch_size: int = 1  # pytorch: KV caches are sized for this many prompts; inflight: samples in flight
    max_prompt_length: int = 1919  # pytorch: and for prompts this long
    cuda_graphs: bool = True  # inflight: replay each step as one CUDA graph
    engine_dir: Path | None = None  # inflight FP8: the engine holding the calibration (code/gptj/engine.py)
    engine_spec: Any = None  # inflight FP8: the EngineSpec the run expects of it
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable
    references: list[list[int]] | None = None  # oracle: reference summary tokens per sample
    oracle_drop: int = 0  # oracle: drop this many tokens from the end of every answer (a failing oracle)


class GptjBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        """One int32 prompt per sample in; the int32 generated token ids of each sample out (prompt excluded)."""
        ...


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
# name -> "module:class", imported only when create_backend asks for it
BACKENDS = backend_registry("GPT-J backend", DECLARATIONS)


def create_backend(name: str, options: BackendOptions) -> GptjBackend:
    """The backend registered as ``name``, constructed with ``options``; ValueError listing names if unknown."""
    return BACKENDS.load(name)(options)
