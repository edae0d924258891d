"""GPT-J engines of the inflight backend: what ``generate_engines`` builds once and every FP8 run loads.

An FP8 run (``precision=fp8`` and/or ``kv_cache_dtype=fp8``) needs static scales: the largest magnitude (``Amax``)
of every FP8 GEMM's input and of every layer's keys and values over calibration prompts. Calibrating means a
16-bit forward of GPT-J 6B over the calibration set (the MLPerf list: 1,000 prompts of ~900 tokens), so it is done
once, by ``make generate_engines``, and stored; a run loads the numbers instead of recalibrating.

An engine is a folder ``build/engines/<system>/gptj/<Scenario>/<key>/`` holding one file, ``engine.json``:
format version, the ``EngineSpec``, what the key depends on, the checkpoint's identity, the calibration's source
and count, and the ``Amax`` series. It holds no weights, by decision (documentation/gptj_gpu.md, "Engines"):
per-tensor e4m3 quantization of a weight is a deterministic function of it, estimated well under a second on the
GPU for all 28 layers; the embedding, LayerNorms and LM head stay 16-bit, so a run reads the checkpoint anyway;
and a 6 GB FP8 copy in every scenario's engine folder would cost more disk and load time than it saves.

A run refuses an engine that is missing, of another format, built for another spec, from a changed checkpoint, or
calibrated on another set than the one now present (the MLPerf calibration set appearing after a synthetic build
makes the engine stale), with an ``EngineError`` naming ``make generate_engines``. A build writes the engine into a
temporary folder and renames it into place (``code/mlperf/engine_manifest.py``): a folder holds a whole engine or
none. ``ensure_engine`` (what ``make generate_engines`` calls) reuses an engine that is current, and runs sharing a
folder build it once.

The folder's machinery is every LLM's (``code/llm/calibration_engine.py``); this module is GPT-J's ``Recipe`` for it
(its model, its ``Amax`` and its calibration prompts) and the same functions bound to it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.common.download import file_checksum
from code.common.paths import PREPROCESSED_DATA_DIR
from code.gptj.inflight.layers import Amax, InflightModel
from code.gptj.prompt import (
    CALIBRATION_TOKENIZED_SUBDIR,
    INPUT_IDS_FILE,
    MANIFEST_FILE,
    MAX_INPUT_TOKENS,
    MAX_NEW_TOKENS,
)
from code.llm import calibration_engine
from code.llm.calibration_engine import (  # noqa: F401 - re-exported for callers
    FORMAT_VERSION,
    FP8,
    KEY_DEPENDS_ON,
    RANDOM,
    CalibrationPrompts,
    Recipe,
    engine_key,
)
from code.mlperf.engine_manifest import MANIFEST, EngineError, rebuild_hint  # noqa: F401 - for callers

CALIBRATION_DIR = PREPROCESSED_DATA_DIR / CALIBRATION_TOKENIZED_SUBDIR
SYNTHETIC_CALIBRATION_PROMPTS = 32
SYNTHETIC_SEED_OFFSET = 7919  # synthetic calibration prompts use seed + this, never a run's own samples
AMAX_SERIES = ("gemm_in", "gemm_out", "k", "v")


@dataclass(frozen=True)
class EngineSpec(calibration_engine.EngineSpec):
    """``code.llm.calibration_engine.EngineSpec`` with GPT-J 6B as the default model (a ``GPTJ_CONFIGS`` key)."""

    model_name: str = "6b"


def calibration_source(seed: int, calibration_dir: Path | None = None, max_length: int = MAX_INPUT_TOKENS) -> str:
    """The source a build would calibrate on now, without loading prompts: what a run compares to the manifest."""
    calibration_dir = CALIBRATION_DIR if calibration_dir is None else calibration_dir
    manifest = Path(calibration_dir) / MANIFEST_FILE
    if manifest.is_file():
        # The manifest and the tokens themselves (~8 MB for 1,000 prompts): any other prompt set differs here.
        digest = hashlib.sha256()
        for name in (MANIFEST_FILE, INPUT_IDS_FILE):
            path = Path(calibration_dir) / name
            digest.update(file_checksum(path, "sha256").encode() if path.is_file() else b"missing")
        return f"mlperf:{Path(calibration_dir).resolve()}:sha256={digest.hexdigest()}"
    return (f"synthetic:seed={seed + SYNTHETIC_SEED_OFFSET},count={SYNTHETIC_CALIBRATION_PROMPTS},"
            f"max_length={max_length}")


def calibration_prompts(seed: int, calibration_dir: Path | None = None,
                        max_length: int = MAX_INPUT_TOKENS) -> CalibrationPrompts:
    """The MLPerf calibration prompts (``make download_data preprocess_data BENCHMARKS=gptj``) when preprocessed,
    else synthetic prompts with CNN/DailyMail-like lengths drawn with their own seed."""
    from code.gptj.dataset import GptjSamples

    source = calibration_source(seed, calibration_dir, max_length)
    if not source.startswith("mlperf:"):
        return CalibrationPrompts(synthetic_calibration_prompts(seed, max_length), source)
    samples = GptjSamples.load(CALIBRATION_DIR if calibration_dir is None else calibration_dir)
    return CalibrationPrompts([samples.prompt(i)[:max_length] for i in range(len(samples))], source)


def synthetic_calibration_prompts(seed: int, max_length: int) -> list[np.ndarray]:
    """``SYNTHETIC_CALIBRATION_PROMPTS`` prompts with CNN/DailyMail-like lengths, drawn with the seed offset by
    ``SYNTHETIC_SEED_OFFSET`` so that they are never a run's own samples: what an engine calibrates on without the
    MLPerf set, and what the GPU check scripts calibrate on without an engine."""
    from code.gptj.dataset import GptjSamples

    samples = GptjSamples.synthetic(SYNTHETIC_CALIBRATION_PROMPTS, seed=seed + SYNTHETIC_SEED_OFFSET,
                                    max_length=max_length)
    return [samples.prompt(i)[:max_length] for i in range(len(samples))]


def calibrate_on(model: InflightModel, prompts: list[np.ndarray], batch: int = 8) -> Amax:
    """GEMM-input, key and value magnitudes over ``prompts`` (16-bit forward, ``batch`` prompts per pass)."""
    return calibration_engine.calibrate_on(model, prompts, Amax(), batch)


def longest_prompt(n_positions: int) -> int:
    """The longest prompt a model of ``n_positions`` takes with 128 new tokens (1,919 for GPT-J 6B)."""
    return min(MAX_INPUT_TOKENS, n_positions - MAX_NEW_TOKENS + 1)


def load_model(spec: EngineSpec, device: torch.device, dtype: torch.dtype) -> InflightModel:
    """The spec's weights regrouped for the engine, as the inflight backend loads them."""
    from code.gptj.backends.pytorch import WEIGHTS

    return InflightModel.from_model(WEIGHTS.for_engine(spec, device, dtype), consume=True)


# Through lambdas, so that what a test patches in this module (CALIBRATION_DIR, a function) is what a build uses.
RECIPE = Recipe(benchmark="GPT-J", download_hint='make download_model BENCHMARKS="gptj"', spec_type=EngineSpec,
                amax=Amax,
                load_model=lambda *args: load_model(*args),
                calibration_source=lambda *args: calibration_source(*args),
                calibration_prompts=lambda *args: calibration_prompts(*args),
                longest_prompt=lambda n_positions: longest_prompt(n_positions))


def build_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None,
                 model: InflightModel | None = None) -> Path:
    """Calibrate ``spec``'s model and write the engine to ``engine_dir`` (replacing what is there, whole: see
    ``engine_manifest.build_once``).

    ``dtype`` is the 16-bit dtype the FP8 engine runs between its GEMMs (what the run calibrates in); ``model``, if
    given, is used instead of loading the spec's weights (tests, and a caller that already holds them).
    """
    return calibration_engine.build_engine(RECIPE, spec, engine_dir, device=device, dtype=dtype,
                                           calibration_dir=calibration_dir, model=model)


def ensure_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                  dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None) -> bool:
    """``build_engine`` unless the engine at ``engine_dir`` is current for ``spec`` (``load_calibration``
    accepts it); True when it built. Runs sharing the folder build it once: a second waits and reuses it."""
    return calibration_engine.ensure_engine(RECIPE, spec, engine_dir, device=device, dtype=dtype,
                                            calibration_dir=calibration_dir)


def read_manifest(engine_dir: Path, run_args: str | None = None) -> dict[str, Any]:
    return calibration_engine.read_manifest(RECIPE, engine_dir, run_args)


def load_calibration(engine_dir: Path, expected: EngineSpec, *, calibration_dir: Path | None = None,
                     n_positions: int | None = None, run_args: str | None = None) -> Amax:
    """The engine's ``Amax`` if the engine is current for ``expected``; otherwise ``EngineError`` saying what
    differs and naming ``make generate_engines``. ``n_positions`` (the model's context) fixes the synthetic
    calibration source's prompt length; None takes it from the manifest's config. The manifest is read under the
    engine's shared lock, so no build replaces it meanwhile."""
    return calibration_engine.load_calibration(RECIPE, engine_dir, expected, calibration_dir=calibration_dir,
                                               n_positions=n_positions, run_args=run_args)
