"""The in-flight backend: our Llama 3.1 regrouped for inference (``code/llama31/inflight_model.py``) in the shared
in-flight engine (``code/llm/inflight_engine.py``): continuous batching of the reference's greedy decoding (1 to
128 new tokens, ending at any of the checkpoint's EOS ids) over a paged KV cache of the 8 key/value heads,
FlashAttention-2 for prompt passes and Triton decode attention and a CUDA graph per step on the GPU.

``gpu_batch_size`` is the number of samples in flight (slots; ``code/llama31/memory_plan.py`` says how many fit).
The C++ core drives ``serve`` (samples join and complete one by one); ``run_batch`` runs a list of prompts through
the same loop. bf16 or fp16 on a GPU, float32 on the CPU (tests); FP8 GEMMs and an FP8 KV cache are to come (the
engine takes an FP8 cache already, given the calibration's magnitudes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from code.common.faults import reading
from code.llama31.backends import no_engine
from code.llama31.backends.pytorch import DTYPES, MAX_NEW_TOKENS, REDOWNLOAD, PytorchOptions, generation_config
from code.llama31.inflight_model import InflightLlama
from code.llama31.memory_plan import PRECISIONS
from code.llama31.model import LlamaConfig, load_checkpoint, random_weights
from code.llm.inflight_engine import EngineBackend, EngineOptions, InflightEngine
from code.mlperf.devices import usable_gpu_bytes

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.llama31.backends import BackendContext
    from code.mlperf.benchmarks import EngineReport


@dataclass(frozen=True)
class InflightOptions(PytorchOptions):
    """The model's options (``max_batch_size``: samples in flight) and the engine's."""

    cuda_graphs: bool = True  # replay each step as one CUDA graph


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
    def options_from(config: ResolvedConfig, context: BackendContext) -> InflightOptions:
        return InflightOptions(device=context.device, cpu_threads=context.cpu_threads,
                               model_name=config["model_name"], checkpoint=context.checkpoint,
                               precision=config["precision"], seed=config["seed"],
                               max_batch_size=config["gpu_batch_size"], max_prompt_length=context.max_prompt_length,
                               cuda_graphs=config["cuda_graphs"])

    @staticmethod
    def engine_dir(config: ResolvedConfig, context: BackendContext) -> Path | None:
        return None

    @staticmethod
    def generate_engine(config: ResolvedConfig, context: BackendContext) -> EngineReport:
        return no_engine(config)

    def __init__(self, options: InflightOptions) -> None:
        if options.precision not in PRECISIONS:
            raise ValueError(f"the inflight llama3.1-8b backend runs in {', '.join(PRECISIONS)}, not "
                             f"{options.precision!r}: set --precision=bf16")
        device = torch.device(options.device)
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16 or fp16 (FlashAttention has no float32): "
                             "set --precision=bf16")
        if device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/mlperf/devices.py
        inflight = load_model(options, device)
        generation = generation_config(inflight.config)
        longest = min(max(1, options.max_prompt_length), inflight.config.n_positions - MAX_NEW_TOKENS + 1)
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs,
                                       memory_bytes=usable_gpu_bytes(device) if device.type == "cuda" else 0)
        self.engine = InflightEngine(inflight, generation, engine_options)
