"""llama3.1-8b backends, looked up by name: the PyTorch model with greedy decoding (CPU and GPU, the correctness
baseline). The GPU in-flight engine (GQA decode attention, FP8 GEMMs and KV cache) is to come, as GPT-J's
``code/gptj/backends/inflight.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from code.common.gpu_models import BF16_CAPABILITY
from code.config.backends import BackendDeclaration, Requirement, backend_registry
from code.mlperf.backend_class import BackendClass

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # a checkpoint folder, or "random"
    engines_dir: Path  # this config's engines (ENGINES_DIR/<system>/llama31/<scenario>)
    max_prompt_length: int = 0  # the longest prompt of the run's samples; 0 where nothing runs


LlamaBackendClass = BackendClass[BackendContext, Any]


def _pytorch_needs(values: dict[str, Any]) -> Requirement | None:
    return (BF16_CAPABILITY, "bf16 tensor cores") if values.get("precision") == "bf16" else None


# What the configuration checks a llama3.1-8b config against (code/config/fields.py).
DECLARATIONS = (
    BackendDeclaration("pytorch", "code.llama31.backends.pytorch:PytorchLlamaBackend",
                       precisions=("fp32", "bf16", "fp16"), needs=_pytorch_needs),
)
BACKENDS = backend_registry("llama3.1-8b backend", DECLARATIONS)


def backend_class(name: str) -> LlamaBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: LlamaBackendClass = BACKENDS.load(name)
    return loaded


def no_engine(config: ResolvedConfig) -> EngineReport:
    return {"engine": f"none: the {config['backend']} llama3.1-8b backend in {config['precision']} loads the "
                      "checkpoint or draws random weights at run start"}
