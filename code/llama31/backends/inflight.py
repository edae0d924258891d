"""The in-flight backend: our Llama 3.1 regrouped for inference (``code/llama31/inflight_model.py``) in the shared
in-flight engine (``code/llm/inflight_engine.py``): continuous batching of the reference's greedy decoding (1 to
128 new tokens, ending at any of the checkpoint's EOS ids) over a paged KV cache of the 8 key/value heads,
FlashAttention-2 for prompt passes and Triton decode attention and a CUDA graph per step on the GPU.

``gpu_batch_size`` is the number of samples in flight (slots; ``code/llama31/memory_plan.py`` says how many fit).
The C++ core drives ``serve`` (samples join and complete one by one); ``run_batch`` runs a list of prompts through
the same loop. bf16 or fp16 on a GPU, float32 on the CPU (tests).

``precision=fp8`` runs the four GEMMs of every layer in FP8 (bf16 elsewhere; ``fp8_fast_accum``: with cuBLASLt's
fast accumulation); ``kv_cache_dtype=fp8`` stores keys and values in FP8. Both take static scales from the engine
``make generate_engines`` built (``inflight_engine.py``: the calibration's magnitudes over synthetic prompts), as
GPT-J's inflight backend does; a run never recalibrates: a missing or stale engine stops it with the command that
rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from code.common.faults import reading
from code.llama31.backends import no_engine
from code.llama31.backends.inflight_engine import EngineSpec, engine_key, ensure_engine, load_calibration
from code.llama31.backends.inflight_engine import load_model as load_spec_model
from code.llama31.backends.pytorch import DTYPES, MAX_NEW_TOKENS, REDOWNLOAD, PytorchOptions, generation_config
from code.llama31.inflight_model import InflightLlama
from code.llama31.memory_plan import KV_CACHE_DTYPES, PRECISIONS
from code.llama31.model import LlamaConfig, load_checkpoint, random_weights
from code.llm.inflight_engine import EngineBackend, EngineOptions, InflightEngine
from code.mlperf.devices import usable_gpu_bytes
from code.numerics.fp8 import E4M3

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.llama31.backends import BackendContext
    from code.mlperf.benchmarks import EngineReport


@dataclass(frozen=True)
class InflightOptions(PytorchOptions):
    """The model's options (``max_batch_size``: samples in flight; precision also fp8) and the engine's."""

    cuda_graphs: bool = True  # replay each step as one CUDA graph
    kv_cache_dtype: str = "auto"  # auto (the model's dtype) | fp8
    fp8_fast_accum: bool = False  # precision fp8: cuBLASLt fast accumulation in the FP8 GEMMs
    engine_dir: Path | None = None  # FP8: the engine holding the calibration (inflight_engine.py)
    engine_spec: EngineSpec | None = None  # FP8: the EngineSpec the run expects of it
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable


def load_model(options: PytorchOptions, device: torch.device) -> InflightLlama:
    """The options' weights (a checkpoint's, or random ones drawn on the GPU there) regrouped for the engine."""
    dtype = DTYPES[options.precision]
    if options.checkpoint == "random":
        model = random_weights(LlamaConfig.from_name(options.model_name), options.seed, dtype, device,
                               draw_on_device=device.type == "cuda")
    else:
        with reading(options.checkpoint, REDOWNLOAD):
            model = load_checkpoint(options.checkpoint, dtype=dtype, device=device)
    inflight = InflightLlama.from_model(model, consume=True)
    del model
    return inflight


class InflightLlamaBackend(EngineBackend):
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
        """Calibrate an FP8 config's engine (reused while its manifest matches); a 16-bit config builds nothing."""
        spec = cls.engine_spec(config, context)
        path = cls.engine_dir(config, context)
        if path is None:
            return no_engine(config)
        dtype = torch.bfloat16 if spec.precision == "fp8" else DTYPES[spec.precision]
        built = ensure_engine(spec, path, device=torch.device(context.device), dtype=dtype)
        return {"engine": str(path), "built": "yes" if built else "no: reused, its manifest matches this run",
                "weights": context.checkpoint, "precision": spec.precision, "kv_cache_dtype": spec.kv_cache_dtype}

    @classmethod
    def options_from(cls, config: ResolvedConfig, context: BackendContext) -> InflightOptions:
        path = cls.engine_dir(config, context)
        return InflightOptions(device=context.device, cpu_threads=context.cpu_threads,
                               model_name=config["model_name"], checkpoint=context.checkpoint,
                               precision=config["precision"], seed=config["seed"],
                               max_batch_size=config["gpu_batch_size"], max_prompt_length=context.max_prompt_length,
                               cuda_graphs=config["cuda_graphs"], kv_cache_dtype=config["kv_cache_dtype"],
                               fp8_fast_accum=config["fp8_fast_accum"], engine_dir=path,
                               engine_spec=cls.engine_spec(config, context) if path else None,
                               run_args=config.run_args())

    def __init__(self, options: InflightOptions) -> None:
        if options.precision not in PRECISIONS:
            raise ValueError(f"the inflight llama3.1-8b backend runs in {', '.join(PRECISIONS)}, not "
                             f"{options.precision!r}: set --precision=bf16")
        if options.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not "
                             f"{options.kv_cache_dtype!r}")
        device = torch.device(options.device)
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16, fp16 or fp8 (FlashAttention has no float32): "
                             "set --precision=bf16")
        if device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/mlperf/devices.py
        fp8 = options.precision == "fp8" or options.kv_cache_dtype == "fp8"
        amax = None
        if fp8:
            if options.engine_dir is None or options.engine_spec is None:
                raise ValueError("an FP8 inflight run needs InflightOptions.engine_dir and engine_spec (the engine "
                                 "holds the calibration): build it with make generate_engines")
            dtype = torch.bfloat16 if options.precision == "fp8" else DTYPES[options.precision]  # between the GEMMs
            inflight = load_spec_model(EngineSpec(options.model_name, options.precision, options.kv_cache_dtype,
                                                  options.checkpoint, options.seed), device, dtype)
            amax = load_calibration(options.engine_dir, options.engine_spec,
                                    n_positions=inflight.config.n_positions, run_args=options.run_args)
            if options.precision == "fp8":
                inflight.use_fp8_gemms(amax, fast_accum=options.fp8_fast_accum)
                torch.cuda.empty_cache()  # the freed 16-bit weights' blocks back to the driver before the KV pool
        else:
            inflight = load_model(options, device)
        generation = generation_config(inflight.config)
        longest = min(max(1, options.max_prompt_length), inflight.config.n_positions - MAX_NEW_TOKENS + 1)
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs,
                                       kv_dtype=E4M3 if options.kv_cache_dtype == "fp8" else None,
                                       memory_bytes=usable_gpu_bytes(device) if device.type == "cuda" else 0)
        self.engine = InflightEngine(inflight, generation, engine_options, kv_amax=amax)
