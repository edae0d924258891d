"""What an LLM's backends share without torch (each benchmark's ``backends/__init__.py``, which the configuration's
field table reads): the declarations of the eager pytorch and the in-flight backends (their precisions, the engine's
switches, the rules of the device and the GPU they follow), and the model options every one of them reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from code.common.gpu_models import BF16_CAPABILITY, FP8_CAPABILITY, TRITON_CAPABILITY
from code.config.backends import BackendDeclaration, Given, Requirement, needs_gpu
from code.config.field_spec import Field
from code.numerics.switches import FP8_FAST_ACCUM, fast_accum_needs_fp8

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport

KV_CACHE_DTYPE = "kv_cache_dtype"
PYTORCH_PRECISIONS = ("fp32", "bf16", "fp16")
KV_CACHE_DEFAULT = "auto"


def no_engine(config: ResolvedConfig, benchmark: str) -> EngineReport:
    """What ``make generate_engines`` says of a config whose backend loads no engine (``benchmark`` as the report
    names it: ``Recipe.benchmark``): its model is loaded or drawn when a run starts."""
    return {"engine": f"none: the {config['backend']} {benchmark} backend in {config['precision']} loads the "
                      "checkpoint or draws random weights at run start"}


def kv_cache_dtype_field(description: str) -> Field:
    """The in-flight engine's KV cache switch: one field whatever the benchmark (code/config/fields.py joins the
    descriptions), so its type, default and choices are stated here once."""
    return Field(KV_CACHE_DTYPE, str, KV_CACHE_DEFAULT, description, choices=(KV_CACHE_DEFAULT, "fp8"), engine=True)


def inflight_on_device(values: Mapping[str, Any], device: str, on: str, given: Given) -> str | None:
    """An FP8 KV cache needs e4m3 tensor cores (a CPU run would not be what its label says), and FlashAttention on
    the GPU has no float32."""
    problem = needs_gpu(KV_CACHE_DTYPE, values.get(KV_CACHE_DTYPE), KV_CACHE_DEFAULT, device, on, given)
    if problem:
        return problem
    if device != "cpu" and values.get("precision") == "fp32":
        return (f"the inflight backend on {on} runs bf16, fp16 or fp8 (FlashAttention has no float32); "
                "set --precision=bf16")
    return None


def inflight_needs(values: Mapping[str, Any]) -> Requirement | None:
    """FP8 GEMMs or an FP8 KV cache need e4m3 tensor cores (Ada and newer); the engine's Triton kernels (decode
    attention, the prompt pages' write) Ampere."""
    if values.get("precision") == "fp8" or values.get(KV_CACHE_DTYPE) == "fp8":
        return FP8_CAPABILITY, "FP8 GEMMs and KV cache (e4m3 tensor cores)"
    return TRITON_CAPABILITY, "the in-flight engine's Triton kernels"


def pytorch_needs(values: Mapping[str, Any]) -> Requirement | None:
    """bf16 needs bf16 tensor cores (Ampere and newer)."""
    return (BF16_CAPABILITY, "bf16 tensor cores") if values.get("precision") == "bf16" else None


def pytorch_declaration(backend: str) -> BackendDeclaration:
    """The eager pytorch backend ``backend`` ("module:class"): 16 or 32 bits, bf16 on bf16 tensor cores."""
    return BackendDeclaration("pytorch", backend, precisions=PYTORCH_PRECISIONS, needs=pytorch_needs)


def inflight_declaration(backend: str, label: str, kv_cache_description: str,
                         more_switches: tuple[Field, ...] = ()) -> BackendDeclaration:
    """The in-flight backend ``backend`` ("module:class") of the benchmark ``label`` names in its switches'
    descriptions: the engine's switches (KV cache, fast accumulation, CUDA graphs; ``more_switches`` after them)
    and the rules ``inflight_on_device`` and ``inflight_needs`` state."""
    switches = (
        kv_cache_dtype_field(kv_cache_description),
        FP8_FAST_ACCUM,
        Field("cuda_graphs", bool, True, f"{label} inflight: CUDA graphs, one per decode step"),
        *more_switches,
    )
    return BackendDeclaration("inflight", backend, precisions=(*PYTORCH_PRECISIONS, "fp8"), switches=switches,
                              check=fast_accum_needs_fp8, check_device=inflight_on_device, needs=inflight_needs,
                              needs_from=("precision", KV_CACHE_DTYPE))


def model_fields(config: ResolvedConfig, context: Any) -> dict[str, Any]:  # noqa: ANN401 - a BackendContext
    """The model options every LLM backend reads (a benchmark's ``PytorchOptions``), from the config and the
    context."""
    return {"device": context.device, "cpu_threads": context.cpu_threads, "model_name": config["model_name"],
            "checkpoint": context.checkpoint, "precision": config["precision"], "seed": config["seed"],
            "max_batch_size": config["gpu_batch_size"], "max_prompt_length": context.max_prompt_length}
