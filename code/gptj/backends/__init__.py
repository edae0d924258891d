"""GPT-J backends: what turns a batch of prompts into generated token ids, looked up by name.

The benchmark depends on this module only: the protocols, the declarations and ``backend_class``. A backend builds
its own frozen options from the resolved config (``options_from``) and says which engine a config loads
(``engine_dir``, ``generate_engine``: the inflight backend's FP8 calibration); its declaration here tells the
configuration which precisions it runs and the rules its switches follow. Each backend module is imported when
asked for, so the oracle runs without loading a model.
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
    from code.common.benchmarks import EngineReport
    from code.common.config import ResolvedConfig


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options and engine draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # a checkpoint folder/file, "random", or "none (...)"
    engines_dir: Path  # this config's engines (ENGINES_DIR/<system>/gptj/<scenario>); a backend's go under it
    max_prompt_length: int = 0  # the longest prompt of the run's samples; 0 where nothing runs (make info, engines)
    references_text: list[str] | None = None  # the reference summary of each sample, where the run has them
    tokenizer: Any = None  # GPT-J's tokenizer, where the run has references


class GptjBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        """One int32 prompt per sample in; the int32 generated token ids of each sample out (prompt excluded)."""
        ...


GptjBackendClass = BackendClass[BackendContext, GptjBackend]
"""What the benchmark asks of a backend class (``code.common.backends.BackendClass``), with this benchmark's
context and batches."""


def _inflight_options_refused(values: Mapping[str, Any], origin: Origin) -> str | None:
    """The inflight engine's own switches mean nothing to the other backends: refused, not ignored."""
    for field, value in (("synthetic_output_lengths", "forced"), ("kv_cache_dtype", "fp8")):
        if values.get(field) == value:
            return (f"--{field}={value} is an option of the inflight backend, not of {values.get('backend')}: "
                    f"set --backend=inflight or leave --{field} out")
    return None


def no_engine(config: ResolvedConfig) -> EngineReport:
    """What ``make generate_engines`` says of a config whose backend loads no engine."""
    return {"engine": f"none: the {config['backend']} GPT-J backend in {config['precision']} loads the checkpoint "
                      "or draws random weights at run start"}


class WithoutEngine:
    """The engine side of a backend that loads no engine: its model is loaded or drawn when a run starts."""

    @staticmethod
    def engine_dir(config: ResolvedConfig, context: BackendContext) -> None:
        return None

    @staticmethod
    def generate_engine(config: ResolvedConfig, context: BackendContext) -> EngineReport:
        return no_engine(config)


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


def _inflight_needs(values: Mapping[str, Any]) -> Requirement | None:
    """FP8 GEMMs or an FP8 KV cache need e4m3 tensor cores (Ada and newer); the engine's Triton kernels Ampere."""
    if values.get("precision") == "fp8" or values.get("kv_cache_dtype") == "fp8":
        return FP8_CAPABILITY, "FP8 GEMMs and KV cache (e4m3 tensor cores)"
    return TRITON_CAPABILITY, "the in-flight engine's Triton kernels"


def _pytorch_needs(values: Mapping[str, Any]) -> Requirement | None:
    return (BF16_CAPABILITY, "bf16 tensor cores") if values.get("precision") == "bf16" else None


# What the configuration checks a GPT-J config against (code/common/fields.py); the order is the error's.
DECLARATIONS = (
    BackendDeclaration("pytorch", "code.gptj.backends.pytorch:PytorchGptjBackend", precisions=("fp32", "bf16", "fp16"),
                       check=_inflight_options_refused, needs=_pytorch_needs),
    BackendDeclaration("inflight", "code.gptj.backends.inflight:InflightGptjBackend",
                       precisions=("fp32", "bf16", "fp16", "fp8"), check=_inflight_runs_beam_search,
                       check_device=_inflight_on_gpu, needs=_inflight_needs),
    BackendDeclaration("oracle", "code.gptj.backends.oracle:OracleGptjBackend", precisions=None,
                       check=_inflight_options_refused),
)
# name -> "module:class", imported only when backend_class asks for it
BACKENDS = backend_registry("GPT-J backend", DECLARATIONS)


def backend_class(name: str) -> GptjBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: GptjBackendClass = BACKENDS.load(name)
    return loaded

