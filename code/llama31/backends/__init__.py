"""llama3.1-8b backends, looked up by name: ``pytorch``, the eager model with greedy decoding in left-padded batches
(CPU and GPU, the correctness baseline); ``inflight``, the in-flight engine (``code/llm/inflight_engine.py``:
continuous batching of greedy decoding over a paged KV cache, CUDA graphs for the step) driven by the C++ core's
continuous session, as GPT-J's, in 16 bits or with FP8 GEMMs (``precision=fp8``) and/or an FP8 KV cache
(``kv_cache_dtype=fp8``), whose scales come from the engine folder ``make generate_engines`` calibrates
(``backends/inflight_engine.py``), as GPT-J's FP8 engines do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.config.backends import backend_registry
from code.llm.backend_rules import inflight_declaration, pytorch_declaration
from code.mlperf.backend_class import BackendClass


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # a checkpoint folder, or "random"
    engines_dir: Path  # this config's engines (ENGINES_DIR/<system>/llama31/<scenario>)
    max_prompt_length: int = 0  # the longest prompt of the run's samples; 0 where nothing runs


# Beside the protocol, each llama3.1-8b backend class states ``streams_first_tokens``: whether its runs report each
# first token as soon as it is known (LoadGen times llama's first tokens, and a run's provenance says how they came).
LlamaBackendClass = BackendClass[BackendContext, Any]


# What the configuration checks a llama3.1-8b config against (code/config/fields.py); the pytorch backend's configs
# hold the in-flight engine's switches at their defaults.
DECLARATIONS = (
    pytorch_declaration("code.llama31.backends.pytorch:PytorchLlamaBackend"),
    inflight_declaration("code.llama31.backends.inflight:InflightLlamaBackend", "llama3.1-8b",
                         "llama3.1-8b inflight: the same, its scales from the engine folder make generate_engines "
                         "calibrates"),
)
BACKENDS = backend_registry("llama3.1-8b backend", DECLARATIONS)


def backend_class(name: str) -> LlamaBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: LlamaBackendClass = BACKENDS.load(name)
    return loaded
