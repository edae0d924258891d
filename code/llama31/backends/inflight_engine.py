"""Llama 3.1 engines of the inflight backend: what ``make generate_engines`` builds once and every FP8 run loads.

The folder and its checks are every LLM's (``code/llm/calibration_engine.py``: one ``engine.json`` holding the
spec, the checkpoint's identity, the calibration's source and the ``Amax`` series of
``code/llama31/inflight_model.py``: the four GEMMs' inputs, keys and values per layer; no weights). This module is
Llama's ``Recipe`` for it and the same functions bound to it.

Calibration prompts: synthetic ones for now (``SYNTHETIC_CALIBRATION_PROMPTS`` prompts of the data set's estimated
lengths, ``LlamaSamples.synthetic``, drawn with the seed offset so they are never a run's own samples). MLCommons'
llama3.1-8b calibration set (1,000 CNN/DailyMail train articles, ``cnn_dailymail_calibration.json``) is not
preprocessed by this harness yet; when it is, ``calibration_source`` and ``calibration_prompts`` take it as GPT-J's
do, and engines calibrated on synthetic prompts turn stale by themselves (their source differs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.llama31.backends.pytorch import WEIGHTS
from code.llama31.dataset import LlamaSamples
from code.llama31.inflight_model import Amax, InflightLlama
from code.llama31.memory_plan import MAX_PROMPT_TOKENS
from code.llm import calibration_engine
from code.llm.calibration_engine import CalibrationPrompts, Recipe, engine_key  # noqa: F401 - engine_key: callers

SYNTHETIC_CALIBRATION_PROMPTS = 32
SYNTHETIC_SEED_OFFSET = 7919  # synthetic calibration prompts use seed + this, never a run's own samples
MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class EngineSpec(calibration_engine.EngineSpec):
    """``code.llm.calibration_engine.EngineSpec`` with Llama 3.1 8B as the default model (a ``LLAMA_CONFIGS`` key)."""

    model_name: str = "8b"


def longest_prompt(n_positions: int) -> int:
    """The longest prompt a model of ``n_positions`` takes with 128 new tokens (``MAX_PROMPT_TOKENS`` for the 8B)."""
    return min(MAX_PROMPT_TOKENS, n_positions - MAX_NEW_TOKENS + 1)


def calibration_source(seed: int, calibration_dir: Path | None = None, max_length: int = MAX_PROMPT_TOKENS) -> str:
    """The source a build would calibrate on now (synthetic only: the module docstring)."""
    return (f"synthetic:seed={seed + SYNTHETIC_SEED_OFFSET},count={SYNTHETIC_CALIBRATION_PROMPTS},"
            f"max_length={max_length}")


def synthetic_calibration_prompts(seed: int, max_length: int) -> list[np.ndarray]:
    """``SYNTHETIC_CALIBRATION_PROMPTS`` prompts of the data set's estimated lengths, cut to ``max_length``."""
    samples = LlamaSamples.synthetic(SYNTHETIC_CALIBRATION_PROMPTS, seed=seed + SYNTHETIC_SEED_OFFSET)
    return [samples.prompt(i)[:max_length] for i in range(len(samples))]


def calibration_prompts(seed: int, calibration_dir: Path | None = None,
                        max_length: int = MAX_PROMPT_TOKENS) -> CalibrationPrompts:
    return CalibrationPrompts(synthetic_calibration_prompts(seed, max_length),
                              calibration_source(seed, calibration_dir, max_length))


def calibrate_on(model: InflightLlama, prompts: list[np.ndarray], batch: int = 8) -> Amax:
    """GEMM-input, key and value magnitudes over ``prompts`` (16-bit forward, ``batch`` prompts per pass)."""
    return calibration_engine.calibrate_on(model, prompts, Amax(), batch)


def load_model(spec: EngineSpec, device: torch.device, dtype: torch.dtype) -> InflightLlama:
    """The spec's weights regrouped for the engine, in ``dtype`` (the 16-bit dtype an FP8 engine runs between its
    GEMMs)."""
    return InflightLlama.from_model(WEIGHTS.for_engine(spec, device, dtype), consume=True)


# Through lambdas, so that what a test patches in this module is what a build uses.
RECIPE = Recipe(benchmark="llama3.1-8b", download_hint='make download_model BENCHMARKS="llama3.1-8b"',
                spec_type=EngineSpec, amax=Amax,
                load_model=lambda *args: load_model(*args),
                calibration_source=lambda *args: calibration_source(*args),
                calibration_prompts=lambda *args: calibration_prompts(*args),
                longest_prompt=lambda n_positions: longest_prompt(n_positions),
                default_positions=131072)


def build_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.bfloat16, model: InflightLlama | None = None) -> Path:
    """Calibrate ``spec``'s model (or ``model``) and write the engine to ``engine_dir``, whole."""
    return calibration_engine.build_engine(RECIPE, spec, engine_dir, device=device, dtype=dtype, model=model)


def ensure_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                  dtype: torch.dtype = torch.bfloat16) -> bool:
    """``build_engine`` unless the engine at ``engine_dir`` is current for ``spec``; True when it built."""
    return calibration_engine.ensure_engine(RECIPE, spec, engine_dir, device=device, dtype=dtype)


def read_manifest(engine_dir: Path, run_args: str | None = None) -> dict[str, Any]:
    return calibration_engine.read_manifest(RECIPE, engine_dir, run_args)


def load_calibration(engine_dir: Path, expected: EngineSpec, *, n_positions: int | None = None,
                     run_args: str | None = None) -> Amax:
    """The engine's ``Amax`` if it is current for ``expected``; otherwise ``EngineError`` naming
    ``make generate_engines``."""
    return calibration_engine.load_calibration(RECIPE, engine_dir, expected, n_positions=n_positions,
                                               run_args=run_args)
