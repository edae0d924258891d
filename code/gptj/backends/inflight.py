"""The in-flight backend: our GPT-J regrouped for inference, with continuous batching of beam search
(code/gptj/inflight): a paged prompt KV cache shared by each sample's beams, Triton decode attention and a CUDA
graph per step on the GPU.

``gpu_batch_size`` is the number of samples in flight (slots). The C++ core drives ``serve`` (samples join and
complete one by one); ``run_batch`` runs a list of prompts through the same loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from code.gptj.backends import BackendOptions
from code.gptj.backends.pytorch import DTYPES
from code.gptj.generation import GenerationConfig
from code.gptj.inflight.engine import EngineOptions, InflightEngine
from code.gptj.inflight.layers import InflightModel
from code.gptj.model import GptjConfig, load_checkpoint, random_weights


class InflightGptjBackend:
    def __init__(self, options: BackendOptions) -> None:
        if options.precision not in DTYPES:
            raise ValueError(f"the inflight GPT-J backend runs in {', '.join(DTYPES)}, not {options.precision!r}")
        device = torch.device(options.device)
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16 or fp16 (FlashAttention has no float32): "
                             "set --precision=bf16")
        if device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/common/cpu_threads.py
        dtype = DTYPES[options.precision]
        if options.checkpoint == "random":
            model = random_weights(GptjConfig.from_name(options.model_name), options.seed, dtype, device,
                                   draw_on_device=device.type == "cuda")
        else:
            model = load_checkpoint(options.checkpoint, dtype=dtype, device=device)
        generation = GenerationConfig(num_beams=options.num_beams)
        longest = min(options.max_prompt_length, model.config.n_positions - generation.max_new_tokens + 1)
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs)
        self.engine = InflightEngine(InflightModel.from_model(model, consume=True), generation, engine_options)

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return self.engine.generate(prompts)

    def serve(self, session, prompt_of: Callable[[int], np.ndarray]) -> None:  # noqa: ANN001 - the core's Session
        """Run the whole LoadGen test: take samples from the C++ core's session, complete each when done."""
        self.engine.serve(session.take, session.complete, prompt_of)
