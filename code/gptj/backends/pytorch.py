"""The PyTorch backend: our GPT-J (code/gptj/model.py) with beam search (code/llm/generation.py).

Eager, batched: each batch's prompts share one KV cache of batch x beams rows, sized once for the largest batch
and longest prompt. The correctness baseline and the embedded CPU default; GPU speed work builds on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from code.gptj.backends import WithoutEngine
from code.gptj.model import GptjConfig, load_checkpoint, random_weights
from code.llm.backend_rules import model_fields
from code.llm.checkpoint import DTYPES, WeightsSource
from code.llm.generation import GenerationConfig, cache_shape, generate
from code.mlperf.devices import placed_on

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.gptj.backends import BackendContext

WEIGHTS = WeightsSource(GptjConfig.from_name, random_weights, load_checkpoint,
                        redownload='re-download it: make download_model BENCHMARKS="gptj"')


@dataclass(frozen=True)
class PytorchOptions:
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    cpu_threads: int = 0  # on a CPU device: torch's intra-op threads (0: leave torch's default)
    model_name: str = "6b"  # GPT-J config of random weights (a checkpoint brings its own)
    checkpoint: str = "random"  # a checkpoint folder/file, or "random"
    precision: str = "fp32"  # fp32 | bf16 | fp16
    seed: int = 0  # random weights depend on it
    num_beams: int = 4  # 4: the closed-division rule; 1: greedy
    max_batch_size: int = 1  # KV caches are sized for this many prompts
    max_prompt_length: int = 1919  # and for prompts this long

    @classmethod
    def model_fields(cls, config: ResolvedConfig, context: BackendContext) -> dict[str, object]:
        """The fields every GPT-J model backend reads, from the config and the context."""
        return {**model_fields(config, context), "num_beams": config["num_beams"]}


class PytorchGptjBackend(WithoutEngine):
    @staticmethod
    def options_from(config: ResolvedConfig, context: BackendContext) -> PytorchOptions:
        return PytorchOptions(**PytorchOptions.model_fields(config, context))

    def __init__(self, options: PytorchOptions) -> None:
        if options.precision not in DTYPES:
            raise ValueError(f"GPT-J runs in {', '.join(DTYPES)}, not {options.precision!r}")
        self.device = placed_on(options.device, options.cpu_threads)
        self.model = WEIGHTS.load(options.checkpoint, options.model_name, options.seed, DTYPES[options.precision],
                                  self.device)
        self.generation = GenerationConfig(num_beams=options.num_beams)
        longest = min(options.max_prompt_length, self.model.config.n_positions - self.generation.max_new_tokens + 1)
        rows, columns = cache_shape([longest] * options.max_batch_size, self.generation)
        self.model.setup_caches(rows, columns)

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return generate(self.model, prompts, self.generation)
