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
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass, fields
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
from code.mlperf import engine_manifest
from code.mlperf.engine_manifest import MANIFEST, EngineError, rebuild_hint  # noqa: F401 - MANIFEST: for callers
from code.mlperf.inputs import checkpoint_identity

FORMAT_VERSION = 1
RANDOM = "random"
FP8 = "fp8"
CALIBRATION_DIR = PREPROCESSED_DATA_DIR / CALIBRATION_TOKENIZED_SUBDIR
SYNTHETIC_CALIBRATION_PROMPTS = 32
SYNTHETIC_SEED_OFFSET = 7919  # synthetic calibration prompts use seed + this, never a run's own samples
KEY_DEPENDS_ON = ("model_name", "precision", "kv_cache_dtype", "checkpoint (its path)", "seed")
AMAX_SERIES = ("gemm_in", "gemm_out", "k", "v")


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is built for; a run compares it field by field with the manifest's."""

    model_name: str = "6b"          # a GPTJ_CONFIGS key (a checkpoint brings its own architecture)
    precision: str = "bf16"         # "fp8": FP8 GEMMs; otherwise the model's 16-bit dtype
    kv_cache_dtype: str = "auto"    # "fp8": an e4m3 KV cache
    checkpoint: str = RANDOM        # "random" or a checkpoint folder/file
    seed: int = 0                   # random weights and synthetic calibration prompts depend on it

    @property
    def needs_engine(self) -> bool:
        """Only FP8 has something to build: the calibration's magnitudes."""
        return FP8 in (self.precision, self.kv_cache_dtype)

    @property
    def is_random(self) -> bool:
        return self.checkpoint == RANDOM


def engine_key(spec: EngineSpec) -> str:
    """Short, stable, filesystem-safe name, e.g. ``6b-fp8-kvfp8-random-s0``; a checkpoint is named by its stem and
    a hash of its path (computing the key must not read 24 GB)."""
    head = f"{spec.model_name}-{spec.precision}-kv{spec.kv_cache_dtype}"
    if spec.is_random:
        return f"{head}-random-s{spec.seed}"
    stem = re.sub(r"[^A-Za-z0-9_.]+", "_", Path(spec.checkpoint).name)[:32]
    return f"{head}-{stem}-{hashlib.sha256(spec.checkpoint.encode()).hexdigest()[:8]}-s{spec.seed}"


@dataclass(frozen=True)
class CalibrationPrompts:
    """Prompts an engine is calibrated on, and where they came from (recorded in the manifest)."""

    prompts: list[np.ndarray]
    # "mlperf:<dir>:sha256=<of its manifest's and tokens' sha256>" or "synthetic:seed=<n>,count=<n>,max_length=<n>"
    source: str

    @property
    def is_mlperf(self) -> bool:
        return self.source.startswith("mlperf:")


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
    amax = Amax()
    for start in range(0, len(prompts), batch):
        tensors = [torch.as_tensor(np.asarray(p, dtype=np.int64), device=model.device)
                   for p in prompts[start: start + batch]]
        model.collect_amax(tensors, amax)
    return amax


def longest_prompt(n_positions: int) -> int:
    """The longest prompt a model of ``n_positions`` takes with 128 new tokens (1,919 for GPT-J 6B)."""
    return min(MAX_INPUT_TOKENS, n_positions - MAX_NEW_TOKENS + 1)


def load_model(spec: EngineSpec, device: torch.device, dtype: torch.dtype) -> InflightModel:
    """The spec's weights regrouped for the engine, as the inflight backend loads them."""
    from code.common.faults import reading
    from code.gptj.backends.pytorch import REDOWNLOAD
    from code.gptj.model import GptjConfig, load_checkpoint, random_weights

    if spec.is_random:
        model = random_weights(GptjConfig.from_name(spec.model_name), spec.seed, dtype, device,
                               draw_on_device=device.type == "cuda")
    else:
        with reading(spec.checkpoint, REDOWNLOAD):
            model = load_checkpoint(spec.checkpoint, dtype=dtype, device=device)
    inflight = InflightModel.from_model(model, consume=True)
    del model
    return inflight


def build_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None,
                 model: InflightModel | None = None) -> Path:
    """Calibrate ``spec``'s model and write the engine to ``engine_dir`` (replacing what is there, whole: see
    ``engine_manifest.build_once``).

    ``dtype`` is the 16-bit dtype the FP8 engine runs between its GEMMs (what the run calibrates in); ``model``, if
    given, is used instead of loading the spec's weights (tests, and a caller that already holds them).
    """
    _check_needs_engine(spec)
    engine_manifest.build_once(Path(engine_dir), lambda folder: _write_engine(spec, folder, device, dtype,
                                                                              calibration_dir, model))
    return Path(engine_dir)


def ensure_engine(spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                  dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None) -> bool:
    """``build_engine`` unless the engine at ``engine_dir`` is current for ``spec`` (``load_calibration``
    accepts it); True when it built. Runs sharing the folder build it once: a second waits and reuses it."""
    _check_needs_engine(spec)
    return engine_manifest.build_once(
        Path(engine_dir), lambda folder: _write_engine(spec, folder, device, dtype, calibration_dir, None),
        current=lambda folder: _checked_calibration(folder, spec, calibration_dir, None, None))


def _check_needs_engine(spec: EngineSpec) -> None:
    if not spec.needs_engine:
        raise ValueError(f"a {spec.precision} GPT-J engine with a {spec.kv_cache_dtype} KV cache has nothing to "
                         "calibrate: only FP8 (precision or kv_cache_dtype) builds an engine")


def _write_engine(spec: EngineSpec, engine_dir: Path, device: str | torch.device, dtype: torch.dtype,
                  calibration_dir: Path | None, model: InflightModel | None) -> None:
    """The engine's manifest in the empty folder ``engine_dir``."""
    checkpoint = None
    if not spec.is_random:
        if not Path(spec.checkpoint).exists():
            raise EngineError(f"checkpoint {spec.checkpoint} not found; download it first: "
                              'make download_model BENCHMARKS="gptj"')
        checkpoint = checkpoint_identity(Path(spec.checkpoint))
    device = torch.device(device)
    if model is None:
        model = load_model(spec, device, dtype)
    calibration = calibration_prompts(spec.seed, calibration_dir, longest_prompt(model.config.n_positions))
    start = time.monotonic()
    amax = calibrate_on(model, calibration.prompts)
    manifest = {
        "format_version": FORMAT_VERSION,
        "engine_key": engine_key(spec),
        "spec": asdict(spec),
        "key_depends_on": list(KEY_DEPENDS_ON),
        "config": asdict(model.config),
        "checkpoint": checkpoint,
        "weights": "none: quantized from the checkpoint (or the seed's random weights) when a run loads",
        "calibration": {"source": calibration.source, "count": len(calibration.prompts), "device": device.type,
                        "dtype": str(dtype).removeprefix("torch."), "seconds": round(time.monotonic() - start, 3),
                        "amax": amax.as_dict()},
        "torch_version": torch.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    engine_manifest.write_manifest(engine_dir, manifest)


def read_manifest(engine_dir: Path, run_args: str | None = None) -> dict[str, Any]:
    return engine_manifest.read_manifest(engine_dir, "GPT-J", run_args)


def load_calibration(engine_dir: Path, expected: EngineSpec, *, calibration_dir: Path | None = None,
                     n_positions: int | None = None, run_args: str | None = None) -> Amax:
    """The engine's ``Amax`` if the engine is current for ``expected``; otherwise ``EngineError`` saying what
    differs and naming ``make generate_engines``. ``n_positions`` (the model's context) fixes the synthetic
    calibration source's prompt length; None takes it from the manifest's config. The manifest is read under the
    engine's shared lock, so no build replaces it meanwhile."""
    with engine_manifest.engine_lock(engine_dir, shared=True):
        return _checked_calibration(engine_dir, expected, calibration_dir, n_positions, run_args)


def _checked_calibration(engine_dir: Path, expected: EngineSpec, calibration_dir: Path | None,
                         n_positions: int | None, run_args: str | None) -> Amax:
    """``load_calibration`` without the lock (a build holds it already)."""
    manifest = read_manifest(engine_dir, run_args)
    hint = rebuild_hint(run_args)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise EngineError(f"engine {engine_dir} has format version {manifest.get('format_version')}, this harness "
                          f"reads {FORMAT_VERSION}. {hint}")
    built = manifest.get("spec") or {}
    diffs = [f"{f.name}: engine has {built.get(f.name)!r}, run expects {getattr(expected, f.name)!r}"
             for f in fields(expected) if built.get(f.name) != getattr(expected, f.name)]
    if diffs:
        raise EngineError(f"engine {engine_dir} was built for another spec:\n  " + "\n  ".join(diffs) + f"\n{hint}")
    if not expected.is_random:
        path = Path(expected.checkpoint)
        if not path.exists():
            raise EngineError(f"checkpoint {path} of engine {engine_dir} is gone. {hint}")
        if checkpoint_identity(path) != manifest.get("checkpoint"):
            raise EngineError(f"checkpoint {path} changed since engine {engine_dir} was built (a file's size or "
                              f"mtime differs). {hint}")
    calibration = manifest.get("calibration") or {}
    positions = n_positions or int((manifest.get("config") or {}).get("n_positions", 2048))
    now = calibration_source(expected.seed, calibration_dir, longest_prompt(positions))
    if calibration.get("source") != now:
        raise EngineError(f"engine {engine_dir} was calibrated on {calibration.get('source')!r}, but a build now "
                          f"would calibrate on {now!r}. {hint}")
    series = calibration.get("amax") or {}
    lengths = {len(series.get(name) or []) for name in AMAX_SERIES}
    values = [v for name in AMAX_SERIES for v in series.get(name) or []]
    if len(lengths) != 1 or 0 in lengths or not all(isinstance(v, int | float) and 0 < v < float("inf")
                                                     for v in values):
        raise EngineError(f"engine {engine_dir} has an incomplete calibration (every layer needs a positive, "
                          f"finite magnitude for {', '.join(AMAX_SERIES)}). {hint}")
    return Amax(**{name: [float(v) for v in series[name]] for name in AMAX_SERIES})
