"""An LLM's FP8 engine folder: the calibration that ``make generate_engines`` builds once and every FP8 run loads,
whatever the model (GPT-J: ``code/gptj/backends/inflight_engine.py``; Llama 3.1 to follow).

An FP8 in-flight run (``precision=fp8`` and/or ``kv_cache_dtype=fp8``) needs static scales: the largest magnitude
(a ``code.llm.amax.LayerAmax``) of every FP8 GEMM's input and of every layer's keys and values over calibration
prompts. The folder holds one file, ``engine.json``: format version, the ``EngineSpec``, what the key depends on, the
checkpoint's identity, the calibration's source and count, and the amax series; no weights (per-tensor e4m3
quantization of a weight is a deterministic function of it, done when a run loads).

A run refuses an engine that is missing, of another format, built for another spec, from a changed checkpoint, or
calibrated on another set than a build would use now, with an ``EngineError`` naming ``make generate_engines``.
What differs between models (how to load one, its amax series, where its calibration prompts come from) is a
``Recipe``; a benchmark's engine module builds one and wraps these functions with it.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.llm.amax import LayerAmax
from code.llm.checkpoint import RANDOM
from code.mlperf import engine_manifest
from code.mlperf.engine_manifest import EngineError, rebuild_hint
from code.mlperf.inputs import checkpoint_identity

FORMAT_VERSION = 1
FP8 = "fp8"
KEY_DEPENDS_ON = ("model_name", "precision", "kv_cache_dtype", "checkpoint (its path)", "seed")


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is built for; a run compares it field by field with the manifest's."""

    model_name: str = ""            # the model's config name (a checkpoint brings its own architecture)
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
    a hash of its path (computing the key must not read the checkpoint)."""
    head = f"{spec.model_name}-{spec.precision}-kv{spec.kv_cache_dtype}"
    if spec.is_random:
        return f"{head}-random-s{spec.seed}"
    stem = re.sub(r"[^A-Za-z0-9_.]+", "_", Path(spec.checkpoint).name)[:32]
    return f"{head}-{stem}-{hashlib.sha256(spec.checkpoint.encode()).hexdigest()[:8]}-s{spec.seed}"


@dataclass(frozen=True)
class CalibrationPrompts:
    """Prompts an engine is calibrated on, and where they came from (recorded in the manifest)."""

    prompts: list[np.ndarray]
    # e.g. "mlperf:<dir>:sha256=<...>" or "synthetic:seed=<n>,count=<n>,max_length=<n>"
    source: str

    @property
    def is_mlperf(self) -> bool:
        return self.source.startswith("mlperf:")


@dataclass(frozen=True)
class Recipe:
    """What an engine of one model needs: ``load_model(spec, device, dtype)`` (the in-flight model, with
    ``collect_amax(prompts, amax)``), its ``amax`` class, ``calibration_source(seed, calibration_dir, max_length)``
    (the source a build would use now, without loading prompts), ``calibration_prompts`` (same arguments: the
    prompts and that source) and ``longest_prompt(n_positions)``."""

    benchmark: str  # as errors name it: "GPT-J"
    download_hint: str  # the command that downloads a missing checkpoint
    spec_type: type[EngineSpec]  # the benchmark's EngineSpec (its default model): what a run and a build construct
    amax: type[LayerAmax]
    load_model: Callable[[EngineSpec, torch.device, torch.dtype], Any]
    calibration_source: Callable[[int, Path | None, int], str]
    calibration_prompts: Callable[[int, Path | None, int], CalibrationPrompts]
    longest_prompt: Callable[[int], int]
    default_positions: int = 2048  # n_positions when a manifest has no config

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.amax))


def calibrate_on(model: Any, prompts: list[np.ndarray], amax: LayerAmax, batch: int = 8) -> LayerAmax:  # noqa: ANN401
    """GEMM-input, key and value magnitudes over ``prompts`` into ``amax`` (16-bit forward, ``batch`` prompts a
    pass)."""
    for start in range(0, len(prompts), batch):
        tensors = [torch.as_tensor(np.asarray(p, dtype=np.int64), device=model.device)
                   for p in prompts[start: start + batch]]
        model.collect_amax(tensors, amax)
    return amax


def build_engine(recipe: Recipe, spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None,
                 model: Any = None) -> Path:  # noqa: ANN401
    """Calibrate ``spec``'s model and write the engine to ``engine_dir`` (replacing what is there, whole).
    ``dtype``: the 16-bit dtype the FP8 engine runs between its GEMMs; ``model``, if given, is used instead of
    loading the spec's weights."""
    _check_needs_engine(recipe, spec)
    engine_manifest.build_once(Path(engine_dir), lambda folder: _write_engine(recipe, spec, folder, device, dtype,
                                                                              calibration_dir, model))
    return Path(engine_dir)


def ensure_engine(recipe: Recipe, spec: EngineSpec, engine_dir: Path, *, device: str | torch.device = "cpu",
                  dtype: torch.dtype = torch.bfloat16, calibration_dir: Path | None = None) -> bool:
    """``build_engine`` unless the engine at ``engine_dir`` is current for ``spec``; True when it built. Runs
    sharing the folder build it once: a second waits and reuses it."""
    _check_needs_engine(recipe, spec)
    return engine_manifest.build_once(
        Path(engine_dir), lambda folder: _write_engine(recipe, spec, folder, device, dtype, calibration_dir, None),
        current=lambda folder: _checked_calibration(recipe, folder, spec, calibration_dir, None, None))


def _check_needs_engine(recipe: Recipe, spec: EngineSpec) -> None:
    if not spec.needs_engine:
        raise ValueError(f"a {spec.precision} {recipe.benchmark} engine with a {spec.kv_cache_dtype} KV cache has "
                         "nothing to calibrate: only FP8 (precision or kv_cache_dtype) builds an engine")


def _write_engine(recipe: Recipe, spec: EngineSpec, engine_dir: Path, device: str | torch.device,
                  dtype: torch.dtype, calibration_dir: Path | None, model: Any) -> None:  # noqa: ANN401
    """The engine's manifest in the empty folder ``engine_dir``."""
    checkpoint = None
    if not spec.is_random:
        if not Path(spec.checkpoint).exists():
            raise EngineError(f"checkpoint {spec.checkpoint} not found; download it first: {recipe.download_hint}")
        checkpoint = checkpoint_identity(Path(spec.checkpoint))
    device = torch.device(device)
    if model is None:
        model = recipe.load_model(spec, device, dtype)
    calibration = recipe.calibration_prompts(spec.seed, calibration_dir,
                                             recipe.longest_prompt(model.config.n_positions))
    start = time.monotonic()
    amax = calibrate_on(model, calibration.prompts, recipe.amax())
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


def read_manifest(recipe: Recipe, engine_dir: Path, run_args: str | None = None) -> dict[str, Any]:
    return engine_manifest.read_manifest(engine_dir, recipe.benchmark, run_args)


def load_calibration(recipe: Recipe, engine_dir: Path, expected: EngineSpec, *, calibration_dir: Path | None = None,
                     n_positions: int | None = None, run_args: str | None = None) -> LayerAmax:
    """The engine's amax if the engine is current for ``expected``; otherwise ``EngineError`` saying what differs
    and naming ``make generate_engines``. ``n_positions`` (the model's context) fixes the synthetic calibration
    source's prompt length; None takes it from the manifest's config. Read under the engine's shared lock."""
    with engine_manifest.engine_lock(engine_dir, shared=True):
        return _checked_calibration(recipe, engine_dir, expected, calibration_dir, n_positions, run_args)


def _checked_calibration(recipe: Recipe, engine_dir: Path, expected: EngineSpec, calibration_dir: Path | None,
                         n_positions: int | None, run_args: str | None) -> LayerAmax:
    """``load_calibration`` without the lock (a build holds it already)."""
    manifest = read_manifest(recipe, engine_dir, run_args)
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
    positions = n_positions or int((manifest.get("config") or {}).get("n_positions", recipe.default_positions))
    now = recipe.calibration_source(expected.seed, calibration_dir, recipe.longest_prompt(positions))
    if calibration.get("source") != now:
        raise EngineError(f"engine {engine_dir} was calibrated on {calibration.get('source')!r}, but a build now "
                          f"would calibrate on {now!r}. {hint}")
    series = calibration.get("amax") or {}
    names = recipe.series
    lengths = {len(series.get(name) or []) for name in names}
    values = [v for name in names for v in series.get(name) or []]
    if len(lengths) != 1 or 0 in lengths or not all(isinstance(v, int | float) and 0 < v < float("inf")
                                                     for v in values):
        raise EngineError(f"engine {engine_dir} has an incomplete calibration (every layer needs a positive, "
                          f"finite magnitude for {', '.join(names)}). {hint}")
    return recipe.amax(**{name: [float(v) for v in series[name]] for name in names})
