"""The PyTorch backend: our GPT-J (code/gptj/model.py) with beam search (code/gptj/generation.py).

Eager, batched: each batch's prompts share one KV cache of batch x beams rows, sized once for the largest batch
and longest prompt. The correctness baseline and the embedded CPU default; GPU speed work builds on it.
"""

from __future__ import annotations

import numpy as np
import torch

from code.common.faults import reading
from code.gptj.backends import BackendOptions
from code.gptj.generation import GenerationConfig, cache_shape, generate
from code.gptj.model import GptjConfig, load_checkpoint, random_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
REDOWNLOAD = 're-download it: make download_model BENCHMARKS="gptj"'


class PytorchGptjBackend:
    def __init__(self, options: BackendOptions) -> None:
        if options.precision not in DTYPES:
            raise ValueError(f"GPT-J runs in {', '.join(DTYPES)}, not {options.precision!r}")
        dtype = DTYPES[options.precision]
        self.device = torch.device(options.device)
        if self.device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/common/devices.py
        if options.checkpoint == "random":
            self.model = random_weights(GptjConfig.from_name(options.model_name), options.seed, dtype, self.device)
        else:
            with reading(options.checkpoint, REDOWNLOAD):
                self.model = load_checkpoint(options.checkpoint, dtype=dtype, device=self.device).eval()
        self.generation = GenerationConfig(num_beams=options.num_beams)
        longest = min(options.max_prompt_length, self.model.config.n_positions - self.generation.max_new_tokens + 1)
        rows, columns = cache_shape([longest] * options.max_batch_size, self.generation)
        self.model.setup_caches(rows, columns)

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return generate(self.model, prompts, self.generation)
