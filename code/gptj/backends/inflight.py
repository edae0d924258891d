"""The in-flight backend: our GPT-J regrouped for inference, with continuous batching of beam search
(code/gptj/inflight): a paged prompt KV cache shared by each sample's beams, Triton decode attention and a CUDA
graph per step on the GPU.

``gpu_batch_size`` is the number of samples in flight (slots). The C++ core drives ``serve`` (samples join and
complete one by one); ``run_batch`` runs a list of prompts through the same loop.

``precision=fp8`` runs both GEMMs of every layer in FP8 (bf16 elsewhere; ``fp8_fast_accum``: with cuBLASLt's fast
accumulation); ``kv_cache_dtype=fp8`` stores keys and values in FP8. Both take static scales from the engine
``make generate_engines`` built (``inflight_engine.py``): the calibration's magnitudes over the MLPerf calibration
prompts, or synthetic ones when that set is absent. A run never recalibrates: a missing or stale engine stops it
with the command that rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from code.gptj.backends import no_engine
from code.gptj.backends.inflight_engine import (
    EngineSpec,
    calibrate_on,
    engine_key,
    ensure_engine,
    load_calibration,
    load_model,
    synthetic_calibration_prompts,
)
from code.gptj.backends.pytorch import DTYPES, PytorchOptions
from code.gptj.inflight.layers import Amax, InflightModel
from code.gptj.memory_plan import KV_CACHE_DTYPES, PRECISIONS
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineBackend, EngineOptions, InflightEngine
from code.mlperf.devices import usable_gpu_bytes
from code.numerics.fp8 import E4M3

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.gptj.backends import BackendContext
    from code.mlperf.benchmarks import EngineReport


@dataclass(frozen=True)
class InflightOptions(PytorchOptions):
    """The model's options (``max_batch_size``: samples in flight; precision also fp8) and the engine's."""

    kv_cache_dtype: str = "auto"  # auto (the model's dtype) | fp8
    fp8_fast_accum: bool = False  # precision fp8: cuBLASLt fast accumulation in the FP8 GEMMs
    cuda_graphs: bool = True  # replay each step as one CUDA graph
    engine_dir: Path | None = None  # FP8: the engine holding the calibration (code/gptj/backends/inflight_engine.py)
    engine_spec: Any = None  # FP8: the EngineSpec the run expects of it
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable


class InflightGptjBackend(EngineBackend):
    @staticmethod
    def engine_spec(config: ResolvedConfig, context: BackendContext) -> EngineSpec:
        return EngineSpec(model_name=config["model_name"], precision=config["precision"],
                          kv_cache_dtype=config["kv_cache_dtype"], checkpoint=context.checkpoint, seed=config["seed"])

    @classmethod
    def engine_dir(cls, config: ResolvedConfig, context: BackendContext) -> Path | None:
        """``<engines_dir>/<key>/`` when the config needs an engine (FP8 GEMMs or cache), else None."""
        spec = cls.engine_spec(config, context)
        return context.engines_dir / engine_key(spec) if spec.needs_engine else None

    @classmethod
    def generate_engine(cls, config: ResolvedConfig, context: BackendContext) -> EngineReport:
        spec = cls.engine_spec(config, context)
        path = cls.engine_dir(config, context)
        if path is None:
            return no_engine(config)
        dtype = torch.bfloat16 if spec.precision == "fp8" else DTYPES[spec.precision]
        built = ensure_engine(spec, path, device=torch.device(context.device), dtype=dtype)
        return {"engine": str(path), "built": "yes" if built else "no: reused, its manifest matches this run",
                "weights": context.checkpoint, "precision": spec.precision,
                "kv_cache_dtype": spec.kv_cache_dtype}

    @classmethod
    def options_from(cls, config: ResolvedConfig, context: BackendContext) -> InflightOptions:
        path = cls.engine_dir(config, context)
        return InflightOptions(**PytorchOptions.model_fields(config, context), kv_cache_dtype=config["kv_cache_dtype"],
                               fp8_fast_accum=config["fp8_fast_accum"], cuda_graphs=config["cuda_graphs"],
                               engine_dir=path, engine_spec=cls.engine_spec(config, context) if path else None,
                               run_args=config.run_args())

    def __init__(self, options: InflightOptions) -> None:
        if options.precision not in PRECISIONS:
            raise ValueError(f"the inflight GPT-J backend runs in {', '.join(PRECISIONS)}, not "
                             f"{options.precision!r}")
        if options.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not "
                             f"{options.kv_cache_dtype!r}")
        device = torch.device(options.device)
        fp8 = options.precision == "fp8" or options.kv_cache_dtype == "fp8"
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16, fp16 or fp8 (FlashAttention has no float32): "
                             "set --precision=bf16")
        # What GPU each engine needs is checked before a run loads anything (code/config/capabilities.py, from this
        # backend's declaration); FP8 off a GPU is refused by the fields' device rules.
        if device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/mlperf/devices.py
        dtype = torch.bfloat16 if options.precision == "fp8" else DTYPES[options.precision]
        generation = GenerationConfig(num_beams=options.num_beams)
        inflight = load_model(EngineSpec(options.model_name, options.precision, options.kv_cache_dtype,
                                         options.checkpoint, options.seed), device, dtype)
        longest = min(options.max_prompt_length, inflight.config.n_positions - generation.max_new_tokens + 1)
        amax = None
        if fp8:
            if options.engine_dir is None or options.engine_spec is None:
                raise ValueError("an FP8 inflight run needs InflightOptions.engine_dir and engine_spec (the engine "
                                 "holds the calibration): build it with make generate_engines")
            amax = load_calibration(options.engine_dir, options.engine_spec,
                                    n_positions=inflight.config.n_positions, run_args=options.run_args)
        if options.precision == "fp8":
            inflight.use_fp8_gemms(amax, fast_accum=options.fp8_fast_accum)
        if fp8:
            torch.cuda.empty_cache()  # the freed 16-bit weights' blocks back to the driver before the KV pool
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs,
                                       kv_dtype=E4M3 if options.kv_cache_dtype == "fp8" else None,
                                       memory_bytes=usable_gpu_bytes(device) if device.type == "cuda" else 0)
        self.engine = InflightEngine(inflight, generation, engine_options, kv_amax=amax)


def calibrate(model: InflightModel, seed: int, max_prompt_length: int) -> Amax:
    """GEMM-input, key and value magnitudes over synthetic calibration prompts (16-bit forward); the GPU check
    scripts' calibration, which needs no engine. Runs load theirs from the engine."""
    return calibrate_on(model, synthetic_calibration_prompts(seed, max_prompt_length))


__all__ = ["InflightGptjBackend", "calibrate", "calibrate_on"]
