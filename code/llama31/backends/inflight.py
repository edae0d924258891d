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

from code.llama31.backends.inflight_engine import RECIPE
from code.llama31.backends.pytorch import PytorchOptions, generation_config
from code.llama31.inflight_model import InflightLlama
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import CalibratedBackend, CalibratedFields


@dataclass(frozen=True)
class InflightOptions(CalibratedFields, PytorchOptions):
    """The model's options (``max_batch_size``: samples in flight; precision also fp8) and the engine's."""


class InflightLlamaBackend(CalibratedBackend):
    recipe = RECIPE
    options_type = InflightOptions
    # greedy decoding: the engine knows each first token after the prompt's pass and reports it then
    streams_first_tokens = True

    def generation(self, options: InflightOptions, model: InflightLlama) -> GenerationConfig:
        """The reference's greedy decoding, ending at any of the checkpoint's EOS ids."""
        return generation_config(model.config)
