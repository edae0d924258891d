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

from code.gptj.backends.inflight_engine import (
    RECIPE,
    calibrate_on,
    synthetic_calibration_prompts,
)
from code.gptj.backends.pytorch import PytorchOptions
from code.gptj.inflight.layers import Amax, InflightModel
from code.gptj.memory_plan import PRECISIONS  # noqa: F401 - for callers
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import CalibratedBackend, CalibratedFields


@dataclass(frozen=True)
class InflightOptions(CalibratedFields, PytorchOptions):
    """The model's options (``max_batch_size``: samples in flight; precision also fp8) and the engine's."""


class InflightGptjBackend(CalibratedBackend):
    recipe = RECIPE
    options_type = InflightOptions

    def generation(self, options: InflightOptions, model: InflightModel) -> GenerationConfig:
        """Beam search of ``num_beams`` (4: the closed division's)."""
        return GenerationConfig(num_beams=options.num_beams)


def calibrate(model: InflightModel, seed: int, max_prompt_length: int) -> Amax:
    """GEMM-input, key and value magnitudes over synthetic calibration prompts (16-bit forward); the GPU check
    scripts' calibration, which needs no engine. Runs load theirs from the engine."""
    return calibrate_on(model, synthetic_calibration_prompts(seed, max_prompt_length))


__all__ = ["InflightGptjBackend", "calibrate", "calibrate_on"]
