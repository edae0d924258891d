"""The PyTorch backend: our Llama (code/llama31/model.py) with the reference's greedy decoding.

The reference (``SUT_VLLM.py``, v5.1) asks vLLM for ``temperature=0`` (greedy), ``max_tokens=128`` and
``min_tokens=1``, stopping at the checkpoint's EOS tokens (generation_config.json: ``<|end_of_text|>``,
``<|eom_id|>``, ``<|eot_id|>``); the response is every generated token, the final EOS included. Eager and batched:
one KV cache of batch rows, sized once for the largest batch and longest prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from code.llama31.model import LlamaConfig, load_checkpoint, random_weights
from code.llm.backend_rules import model_fields, no_engine
from code.llm.checkpoint import DTYPES, WeightsSource
from code.llm.generation import GenerationConfig, cache_shape, generate
from code.mlperf.devices import placed_on

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.llama31.backends import BackendContext
    from code.mlperf.benchmarks import EngineReport

MAX_NEW_TOKENS = 128
MIN_NEW_TOKENS = 1
WEIGHTS = WeightsSource(LlamaConfig.from_name, random_weights, load_checkpoint,
                        redownload="re-download it: make download_model BENCHMARKS=llama31")


def generation_config(model: LlamaConfig) -> GenerationConfig:
    """Greedy, 1 to 128 new tokens, stopping at any of the model's EOS ids (padding with the first)."""
    first, *more = model.eos_token_ids
    return GenerationConfig(num_beams=1, min_new_tokens=MIN_NEW_TOKENS, max_new_tokens=MAX_NEW_TOKENS,
                            eos_token_id=first, pad_token_id=first, more_eos_token_ids=tuple(more))


@dataclass(frozen=True)
class PytorchOptions:
    device: str = "cpu"
    cpu_threads: int = 0  # on a CPU device: torch's intra-op threads (0: leave torch's default)
    model_name: str = "8b"  # architecture of random weights (a checkpoint brings its own)
    checkpoint: str = "random"
    precision: str = "bf16"
    seed: int = 0
    max_batch_size: int = 1  # KV caches are sized for this many prompts
    max_prompt_length: int = 2048  # and for prompts this long

    @classmethod
    def model_fields(cls, config: ResolvedConfig, context: BackendContext) -> dict[str, object]:
        """The fields every llama3.1-8b model backend reads: the ones every LLM's do."""
        return model_fields(config, context)


class PytorchLlamaBackend:
    # batch by batch: a sample's first token reaches LoadGen with its whole response
    streams_first_tokens = False

    @staticmethod
    def options_from(config: ResolvedConfig, context: BackendContext) -> PytorchOptions:
        return PytorchOptions(**PytorchOptions.model_fields(config, context))

    @staticmethod
    def engine_dir(config: ResolvedConfig, context: BackendContext) -> Path | None:
        return None

    @staticmethod
    def generate_engine(config: ResolvedConfig, context: BackendContext) -> EngineReport:
        return no_engine(config, "llama3.1-8b")

    def __init__(self, options: PytorchOptions) -> None:
        self.device = placed_on(options.device, options.cpu_threads)
        self.model = WEIGHTS.load(options.checkpoint, options.model_name, options.seed, DTYPES[options.precision],
                                  self.device)
        self.generation = generation_config(self.model.config)
        rows, columns = cache_shape([max(1, options.max_prompt_length)] * options.max_batch_size, self.generation)
        self.model.setup_caches(rows, columns)

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return generate(self.model, prompts, self.generation)
