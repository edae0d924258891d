"""llama3.1-8b backends, looked up by name: ``pytorch``, the eager model with greedy decoding in left-padded batches
(CPU and GPU, the correctness baseline); ``inflight``, the in-flight engine (``code/llm/inflight_engine.py``:
continuous batching of greedy decoding over a paged KV cache, CUDA graphs for the step) driven by the C++ core's
continuous session, as GPT-J's, in 16 bits or with FP8 GEMMs (``precision=fp8``) and/or an FP8 KV cache
(``kv_cache_dtype=fp8``), whose scales come from the engine folder ``make generate_engines`` calibrates
(``backends/inflight_engine.py``), as GPT-J's FP8 engines do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from code.common.gpu_models import BF16_CAPABILITY, FP8_CAPABILITY, TRITON_CAPABILITY
from code.config.backends import BackendDeclaration, Given, Requirement, backend_registry, needs_gpu
from code.config.field_spec import Field
from code.mlperf.backend_class import BackendClass
from code.numerics.switches import FP8_FAST_ACCUM, fast_accum_needs_fp8

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


def _pytorch_needs(values: Mapping[str, Any]) -> Requirement | None:
    return (BF16_CAPABILITY, "bf16 tensor cores") if values.get("precision") == "bf16" else None


# GPT-J's inflight backend declares the same switch: one field (code/config/fields.py joins the descriptions), so
# its type, default and choices are GPT-J's.
KV_CACHE_DTYPE = Field("kv_cache_dtype", str, "auto", "llama3.1-8b inflight: the same, its scales from the engine "
                       "folder make generate_engines calibrates", choices=("auto", "fp8"), engine=True)
# The in-flight engine's switches; the pytorch backend's configs hold them at their defaults.
INFLIGHT_SWITCHES = (
    KV_CACHE_DTYPE,
    FP8_FAST_ACCUM,
    Field("cuda_graphs", bool, True, "llama3.1-8b inflight: CUDA graphs, one per decode step"),
)


def _inflight_on_device(values: Mapping[str, Any], device: str, on: str, given: Given) -> str | None:
    """An FP8 KV cache needs e4m3 tensor cores (a CPU run would not be what its label says), and FlashAttention on
    the GPU has no float32."""
    problem = needs_gpu(KV_CACHE_DTYPE.name, values.get(KV_CACHE_DTYPE.name), KV_CACHE_DTYPE.default, device, on,
                        given)
    if problem:
        return problem
    if device != "cpu" and values.get("precision") == "fp32":
        return (f"the inflight backend on {on} runs bf16, fp16 or fp8 (FlashAttention has no float32); "
                "set --precision=bf16")
    return None


def _inflight_needs(values: Mapping[str, Any]) -> Requirement | None:
    """FP8 GEMMs or an FP8 KV cache need e4m3 tensor cores (Ada and newer); the engine's Triton kernels (decode
    attention, the prompt pages' write) Ampere."""
    if values.get("precision") == "fp8" or values.get(KV_CACHE_DTYPE.name) == "fp8":
        return FP8_CAPABILITY, "FP8 GEMMs and KV cache (e4m3 tensor cores)"
    return TRITON_CAPABILITY, "the in-flight engine's Triton kernels"


# What the configuration checks a llama3.1-8b config against (code/config/fields.py).
DECLARATIONS = (
    BackendDeclaration("pytorch", "code.llama31.backends.pytorch:PytorchLlamaBackend",
                       precisions=("fp32", "bf16", "fp16"), needs=_pytorch_needs),
    BackendDeclaration("inflight", "code.llama31.backends.inflight:InflightLlamaBackend",
                       precisions=("fp32", "bf16", "fp16", "fp8"), switches=INFLIGHT_SWITCHES,
                       check=fast_accum_needs_fp8, check_device=_inflight_on_device, needs=_inflight_needs,
                       needs_from=("precision", KV_CACHE_DTYPE.name)),
)
BACKENDS = backend_registry("llama3.1-8b backend", DECLARATIONS)


def backend_class(name: str) -> LlamaBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: LlamaBackendClass = BACKENDS.load(name)
    return loaded


def no_engine(config: ResolvedConfig) -> EngineReport:
    return {"engine": f"none: the {config['backend']} llama3.1-8b backend in {config['precision']} loads the "
                      "checkpoint or draws random weights at run start"}
