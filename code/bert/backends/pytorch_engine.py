"""BERT engines: what ``generate_engines`` builds once and ``run_harness`` loads for every test.

An engine is a folder:

- ``engine.json``: the manifest. Format version, the ``EngineSpec`` it was built for, the model config, the
  checkpoint's identity (sha256, size, mtime), torch version and creation time. Written last, so a folder without
  it is an unfinished build.
- ``weights.safetensors``: for a real checkpoint, the weights already converted to our names and cast to the
  engine's storage dtype (fp16 for fp8 and int8 engines), so a run loads them without the conversion and strict
  checks.
- for ``precision="fp8"`` and ``"int8"`` (``QUANTIZED``), the manifest's ``calibration``: the max magnitude of every
  8-bit GEMM's input and of every attention's input (read with ``fp8_attention``) over the calibration features (the
  MLPerf calibration list when the real data set is present, else synthetic features: ``source`` says which), from
  which the GPU path derives its static activation scales (``amax / 448`` for e4m3, ``amax / 127`` for int8). Both
  precisions calibrate the same way on the same set, so their magnitudes are the same. Weights are quantized when
  the engine loads (fp8: per tensor; int8: per output channel; deterministic).

For ``checkpoint="random"`` only the manifest is stored and the weights are re-drawn from the seed at load: they
are deterministic, and skipping a 1.3 GB write keeps the embedded CPU default fast.

``ensure_engine`` (what ``make generate_engines`` calls) reuses an engine that is current, and runs that share an
engine folder build it once (``code/mlperf/engine_manifest.py``).

``load_engine`` refuses a stale engine (other spec, old format, changed checkpoint) with an ``EngineError`` that
names the fix, instead of benchmarking something other than what the run asked for.
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

from code.bert.backends import QUANTIZED
from code.bert.model import BERT_CONFIGS, BertConfig, BertQA, empty_model, load_checkpoint, random_weights
from code.bert.squad import MANIFEST_FILE, SQUAD_SUBDIR, TOKENIZED_SUBDIR
from code.common.download import file_checksum
from code.common.faults import reading, writing_folder
from code.common.paths import DATA_DIR, PREPROCESSED_DATA_DIR
from code.mlperf import engine_manifest
from code.mlperf.devices import auto_device
from code.mlperf.engine_manifest import MANIFEST, EngineError, rebuild_hint  # noqa: F401 - MANIFEST: for callers

FORMAT_VERSION = 2  # 2: fp8 engines and their calibration
WEIGHTS = "weights.safetensors"
REDOWNLOAD = 'make download_model BENCHMARKS="bert"'
# precision -> the dtype weights are stored and activations kept in (fp8, int8 engines: fp16 between the 8-bit GEMMs)
PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                                      "fp8": torch.float16, "int8": torch.float16}
RANDOM = "random"
CALIBRATION_LIST = DATA_DIR / SQUAD_SUBDIR / "bert_calibration_features.txt"
CALIBRATION_DATA = PREPROCESSED_DATA_DIR / TOKENIZED_SUBDIR
SYNTHETIC_CALIBRATION_COUNT = 100  # as many as the MLPerf list holds


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is: which model, in which precision, from which weights. Runs compare it to the manifest."""

    model_name: str            # a BERT_CONFIGS key
    precision: str = "fp32"    # "fp32" | "fp16" | "bf16" | "fp8" | "int8" (8-bit GEMMs, fp16 between; GPU only)
    checkpoint: str = RANDOM   # "random" or a checkpoint path (.pytorch/.pt/.bin/.safetensors)
    seed: int = 0              # random weights (and nothing else) depend on it

    def __post_init__(self) -> None:
        BertConfig.from_name(self.model_name)  # raises, listing the names
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")

    @property
    def config(self) -> BertConfig:
        return BERT_CONFIGS[self.model_name]

    @property
    def dtype(self) -> torch.dtype:
        return PRECISIONS[self.precision]

    @property
    def is_random(self) -> bool:
        return self.checkpoint == RANDOM


def engine_key(spec: EngineSpec) -> str:
    """Short, stable, filesystem-safe name, e.g. ``large-fp16-random-s0`` or ``large-fp16-model-1a2b3c4d``.

    A checkpoint is named by its file stem plus a hash of its path (not its contents: computing the key must be free).
    """
    if spec.is_random:
        return f"{spec.model_name}-{spec.precision}-random-s{spec.seed}"
    stem = re.sub(r"[^A-Za-z0-9_.]+", "_", Path(spec.checkpoint).stem)[:32]
    digest = hashlib.sha256(spec.checkpoint.encode()).hexdigest()[:8]
    return f"{spec.model_name}-{spec.precision}-{stem}-{digest}"


def _checkpoint_identity(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"sha256": file_checksum(path, "sha256"), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass(frozen=True)
class CalibrationSet:
    """Features an 8-bit engine (fp8, int8) is calibrated on, and where they came from (recorded in the manifest)."""

    input_ids: np.ndarray
    segment_ids: np.ndarray
    input_mask: np.ndarray
    source: str  # "mlperf:<list path>" or "synthetic:seed=<n>"


def calibration_set(seed: int = 0, data_dir: Path = CALIBRATION_DATA,
                    calibration_list: Path = CALIBRATION_LIST) -> CalibrationSet:
    """The MLPerf calibration features (the list's indices into the preprocessed SQuAD features) when both are
    present, else ``SYNTHETIC_CALIBRATION_COUNT`` synthetic features with SQuAD-like lengths."""
    from code.bert.dataset import BertFeatures

    if calibration_list.is_file() and (data_dir / MANIFEST_FILE).is_file():
        features = BertFeatures.load(data_dir)
        idx = np.array([int(line) for line in calibration_list.read_text().split()], dtype=np.int64)
        if idx.size and idx.max() < len(features):
            return CalibrationSet(features.input_ids[idx], features.segment_ids[idx], features.input_mask[idx],
                                  f"mlperf:{calibration_list}")
    features = BertFeatures.synthetic(SYNTHETIC_CALIBRATION_COUNT, seed=seed)
    return CalibrationSet(features.input_ids, features.segment_ids, features.input_mask, f"synthetic:seed={seed}")


def calibrate(model: BertQA, calibration: CalibrationSet, device: str | torch.device | None = None) -> dict[str, Any]:
    """The manifest's ``calibration`` entry: GEMM-input magnitudes of ``model`` (float32, CPU) over the set.

    Runs the packed 16-bit model on a GPU when there is one (fp16, as the engine will run), else in float32 on the
    CPU; either way the same function of the weights up to rounding.
    """
    from code.bert.packed.packed_model import collect_amax

    device = torch.device(device or auto_device())
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    amax = collect_amax(model, calibration.input_ids, calibration.segment_ids, calibration.input_mask, device, dtype)
    return {"source": calibration.source, "count": int(len(calibration.input_ids)), "device": device.type,
            "dtype": str(dtype).removeprefix("torch."), "amax": amax}


def build_engine(spec: EngineSpec, engine_dir: Path, *, calibration: CalibrationSet | None = None,
                 device: str | torch.device | None = None) -> Path:
    """Build the engine for ``spec`` at ``engine_dir`` (replacing what is there) and return ``engine_dir``.

    The engine is written into a temporary folder beside ``engine_dir`` and renamed into place when whole
    (``engine_manifest.build_once``): an interrupted build (Ctrl-C, a full disk, a killed ``make generate_engines``)
    leaves the earlier engine as it was, and a run loading it meanwhile reads it whole.

    A real checkpoint is loaded strictly (``load_checkpoint``), so a build fails rather than freezing a partly
    untrained model into an engine. An fp8 or int8 engine is calibrated on ``calibration`` (default:
    ``calibration_set``) on ``device`` (default: the GPU if there is one).
    """
    engine_manifest.build_once(Path(engine_dir), lambda folder: _write_engine(spec, folder, calibration, device))
    return Path(engine_dir)


def ensure_engine(spec: EngineSpec, engine_dir: Path) -> bool:
    """Build the engine for ``spec`` at ``engine_dir`` unless the one there is current for it; True when it built.

    Runs sharing the folder build it once: a second waits for the first's build and reuses it. An fp8 or int8 engine
    is current only if calibrated on the set a build would use now (the MLPerf list, once it is there)."""

    def current(folder: Path) -> None:
        manifest = check_engine(folder, spec)
        if spec.precision in QUANTIZED:
            now = calibration_set(spec.seed).source
            if (manifest.get("calibration") or {}).get("source") != now:
                raise EngineError(f"engine {folder} was calibrated on another set than {now}")

    return engine_manifest.build_once(Path(engine_dir), lambda folder: _write_engine(spec, folder, None, None),
                                      current=current)


def _write_engine(spec: EngineSpec, engine_dir: Path, calibration: CalibrationSet | None,
                  device: str | torch.device | None) -> None:
    """The engine's files in the empty folder ``engine_dir``, the manifest last."""
    checkpoint: dict[str, Any] | None = None
    model: BertQA | None = None
    if not spec.is_random:
        path = Path(spec.checkpoint)
        if not path.is_file():
            raise EngineError(f"checkpoint {path} not found; download it first: {REDOWNLOAD}")
        checkpoint = _checkpoint_identity(path)
        with reading(path, f"re-download it: {REDOWNLOAD}"):
            model = load_checkpoint(path, spec.config)
        from safetensors.torch import save_file

        weights = {k: v.to(spec.dtype).contiguous() for k, v in model.state_dict().items()}
        needed = sum(tensor.numel() * tensor.element_size() for tensor in weights.values())
        with writing_folder(engine_dir.parent, "the engine's weights", needed):
            save_file(weights, str(engine_dir / WEIGHTS), metadata={"engine_key": engine_key(spec)})
        del weights
    calibrated = None
    if spec.precision in QUANTIZED:
        if model is None:
            model = random_weights(spec.config, spec.seed)
        # Calibrate what the engine will hold: weights rounded to the storage dtype.
        model = model.to(spec.dtype).float()
        calibrated = calibrate(model, calibration or calibration_set(spec.seed), device)
    del model

    manifest = {
        "format_version": FORMAT_VERSION,
        "engine_key": engine_key(spec),
        "spec": asdict(spec),
        "config": spec.config.to_dict(),
        "checkpoint": checkpoint,
        "weights": None if spec.is_random else WEIGHTS,
        # The weights' size: a truncated or replaced file makes the engine stale, so a rebuild replaces it.
        "weights_bytes": None if spec.is_random else (engine_dir / WEIGHTS).stat().st_size,
        "calibration": calibrated,
        "torch_version": torch.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    engine_manifest.write_manifest(engine_dir, manifest)


def read_manifest(engine_dir: Path, run_args: str | None = None) -> dict[str, Any]:
    return engine_manifest.read_manifest(engine_dir, "BERT", run_args)


def check_engine(engine_dir: Path, expected: EngineSpec, run_args: str | None = None) -> dict[str, Any]:
    """The manifest, if the engine is current for ``expected``; otherwise ``EngineError`` saying what differs.

    The checkpoint is compared by size and mtime first (free); only if those changed is its sha256 recomputed, so
    a copied or touched but identical file is still accepted and an edited one is not, without hashing 1.3 GB on
    every run.
    """
    manifest = read_manifest(engine_dir, run_args)
    hint = rebuild_hint(run_args)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise EngineError(f"engine {engine_dir} has format version {manifest.get('format_version')}, this harness "
                          f"reads {FORMAT_VERSION}. {hint}")
    built = manifest.get("spec", {})
    diffs = [f"{f.name}: engine has {built.get(f.name)!r}, run expects {getattr(expected, f.name)!r}"
             for f in fields(expected) if built.get(f.name) != getattr(expected, f.name)]
    if diffs:
        raise EngineError(f"engine {engine_dir} was built for another spec:\n  " + "\n  ".join(diffs) + f"\n{hint}")
    if manifest.get("config") != expected.config.to_dict():
        raise EngineError(f"engine {engine_dir} was built with another {expected.model_name!r} config "
                          f"({manifest.get('config')} != {expected.config.to_dict()}). {hint}")
    if not expected.is_random:
        path, recorded = Path(expected.checkpoint), manifest.get("checkpoint") or {}
        if not path.is_file():
            raise EngineError(f"checkpoint {path} of engine {engine_dir} is gone; cannot tell whether the engine is "
                              f"current. {hint}")
        st = path.stat()
        unchanged = (st.st_size, st.st_mtime_ns) == (recorded.get("size"), recorded.get("mtime_ns"))
        if not unchanged and file_checksum(path, "sha256") != recorded.get("sha256"):
            raise EngineError(f"checkpoint {path} changed since engine {engine_dir} was built. {hint}")
        weights = Path(engine_dir) / WEIGHTS
        if not weights.is_file():
            raise EngineError(f"engine {engine_dir} lacks {WEIGHTS}. {hint}")
        recorded_bytes = manifest.get("weights_bytes")
        if recorded_bytes is not None and weights.stat().st_size != recorded_bytes:
            raise EngineError(f"engine {engine_dir}'s {WEIGHTS} is {weights.stat().st_size} bytes, not the "
                              f"{recorded_bytes} it was built with (damaged or replaced). {hint}")
    if expected.precision in QUANTIZED:
        _check_calibration(engine_dir, manifest.get("calibration"), expected, hint)
    return manifest


def _check_calibration(engine_dir: Path, calibration: Any, spec: EngineSpec, hint: str) -> None:
    """An fp8 or int8 engine must hold a finite, positive magnitude for every calibration point of the model (each
    8-bit GEMM's input, each attention's input). One built by a harness that recorded fewer points is refused with
    the same rebuild hint: ``make run`` and ``make generate_engines`` rebuild it themselves."""
    from code.bert.packed.packed_model import calibration_names

    config, precision = spec.config, spec.precision
    if not isinstance(calibration, dict) or not isinstance(calibration.get("amax"), dict):
        raise EngineError(f"{precision} engine {engine_dir} lacks calibrated activation scales. {hint}")
    amax = calibration["amax"]
    names = calibration_names(config.num_layers)
    missing = [n for n in names if n not in amax]
    bad = [n for n in names if n in amax and not (isinstance(amax[n], int | float) and 0 < amax[n] < float("inf"))]
    if missing and not bad and all(n.endswith(".attn") for n in missing):
        raise EngineError(f"{precision} engine {engine_dir} was calibrated by an earlier version of this harness, "
                          f"which did not record the attention inputs' magnitudes ({missing[0]}, ...): rebuild it. "
                          f"{hint}")
    if missing or bad:
        raise EngineError(f"{precision} engine {engine_dir} has an incomplete calibration (missing {missing[:4]}, not "
                          f"positive and finite {bad[:4]}). {hint}")


def load_engine(engine_dir: Path, expected: EngineSpec, device: str | torch.device = "cpu", *,
                run_args: str | None = None) -> BertQA:
    """The engine's model, in eval mode, on ``device``, in the spec's dtype; ``EngineError`` if missing or stale.

    ``run_args`` (optional) makes the error's rebuild command copy-pasteable. An fp8 or int8 engine's model is its
    fp16 weights; ``load_engine_manifest`` also returns the calibration the 8-bit GEMMs need.
    """
    return load_engine_manifest(engine_dir, expected, device, run_args=run_args)[0]


def load_engine_manifest(engine_dir: Path, expected: EngineSpec, device: str | torch.device = "cpu", *,
                         run_args: str | None = None) -> tuple[BertQA, dict[str, Any]]:
    """``load_engine`` plus the engine's (checked) manifest. The engine is read under its shared lock, so no build
    replaces it meanwhile."""
    with engine_manifest.engine_lock(engine_dir, shared=True):
        manifest = check_engine(engine_dir, expected, run_args)
        if not expected.is_random:
            from safetensors.torch import load_file

            with reading(Path(engine_dir) / WEIGHTS, rebuild_hint(run_args)):
                state = load_file(str(Path(engine_dir) / WEIGHTS), device="cpu")
    if expected.is_random:
        model = random_weights(expected.config, expected.seed)
    else:
        model = empty_model(expected.config)
        model.load_state_dict(state, strict=True, assign=True)  # our names, already checked at build time
    return model.to(device=device, dtype=expected.dtype).eval(), manifest
