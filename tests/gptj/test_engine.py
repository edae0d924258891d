"""GPT-J FP8 engines (code/gptj/backends/inflight_engine.py) on the CPU with the tiny model: a built engine holds
exactly the calibration a fresh pass computes, a run with it generates the same tokens, and whatever makes it
stale (spec, format, checkpoint, calibration set, a damaged calibration) is refused with the command that rebuilds
it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from code.gptj.backends.inflight_engine import (
    MANIFEST,
    SYNTHETIC_CALIBRATION_PROMPTS,
    EngineError,
    EngineSpec,
    build_engine,
    calibrate_on,
    calibration_prompts,
    engine_key,
    load_calibration,
    load_model,
    synthetic_calibration_prompts,
)
from code.gptj.preprocess_data import save_arrays
from code.gptj.prompt import FORMAT_VERSION as DATA_FORMAT
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineOptions, InflightEngine

SPEC = EngineSpec(model_name="tiny", precision="fp8", kv_cache_dtype="fp8", seed=3)
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """An engine calibrated on synthetic prompts (no calibration set in ``absent``)."""
    root = tmp_path_factory.mktemp("engine")
    absent = root / "no-calibration-set"
    return build_engine(SPEC, root / engine_key(SPEC), dtype=torch.float32, calibration_dir=absent), absent


def fake_calibration_set(directory: Path, count: int = 5, seed: int = 0) -> Path:
    """A preprocessed calibration folder of the real layout with made-up tokens (no download)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 60, size=count).astype(np.int32)
    ids = np.full((count, 64), 50256, dtype=np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(0, 50256, size=n)
    save_arrays(directory, ids, lengths, {"format": DATA_FORMAT, "count": count, "max_length": 64,
                                          "pad_token_id": 50256, "dataset": "made up"})
    return directory


def fp8_engine(amax) -> InflightEngine:  # noqa: ANN001 - an Amax
    model = load_model(SPEC, CPU, torch.float32)
    model.use_fp8_gemms(amax)
    options = EngineOptions(slots=2, max_prompt_length=64, page_size=16, kv_dtype=torch.float8_e4m3fn)
    return InflightEngine(model, GenerationConfig(), options, kv_amax=amax)


def test_engine_holds_the_fresh_calibration_and_generates_the_same_tokens(built):
    engine_dir, absent = built
    manifest = json.loads((engine_dir / MANIFEST).read_text())
    assert manifest["engine_key"] == "tiny-fp8-kvfp8-random-s3" == engine_dir.name
    assert manifest["calibration"]["source"].startswith("synthetic:seed=7922,count=32")
    assert manifest["calibration"]["count"] == 32 and manifest["checkpoint"] is None
    assert "seed" in manifest["key_depends_on"] and manifest["spec"]["kv_cache_dtype"] == "fp8"

    loaded = load_calibration(engine_dir, SPEC, calibration_dir=absent)
    fresh = calibrate_on(load_model(SPEC, CPU, torch.float32), calibration_prompts(SPEC.seed, absent).prompts)
    assert loaded.as_dict() == fresh.as_dict()  # JSON keeps every float exactly
    assert len(loaded.gemm_in) == 2 and min(loaded.k) > 0

    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, 50256, size=n).astype(np.int32) for n in (9, 30, 17)]
    got, want = fp8_engine(loaded).generate(prompts), fp8_engine(fresh).generate(prompts)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert all(31 <= len(g) <= 128 for g in got)


def test_a_missing_or_stale_engine_is_refused_with_the_rebuild_command(built, tmp_path):
    engine_dir, absent = built
    with pytest.raises(EngineError, match="make generate_engines"):
        load_calibration(tmp_path / "nothing", SPEC, calibration_dir=absent)
    for other in (EngineSpec("tiny", "bf16", "fp8", seed=3), EngineSpec("tiny", "fp8", "auto", seed=3),
                  EngineSpec("tiny", "fp8", "fp8", seed=4)):
        with pytest.raises(EngineError, match="another spec(.|\n)*make generate_engines"):
            load_calibration(engine_dir, other, calibration_dir=absent)
    manifest = json.loads((engine_dir / MANIFEST).read_text())
    for change, message in ((lambda m: m.update(format_version=0), "format version 0"),
                            (lambda m: m["calibration"]["amax"]["k"].pop(), "incomplete calibration"),
                            (lambda m: m["calibration"]["amax"]["v"].__setitem__(0, 0.0), "incomplete calibration")):
        copy = tmp_path / "copy"
        copy.mkdir(exist_ok=True)
        edited = json.loads(json.dumps(manifest))
        change(edited)
        (copy / MANIFEST).write_text(json.dumps(edited))
        with pytest.raises(EngineError, match=message):
            load_calibration(copy, SPEC, calibration_dir=absent)
    # The MLPerf calibration set appearing makes a synthetic engine stale.
    present = fake_calibration_set(tmp_path / "calibration")
    with pytest.raises(EngineError, match="calibrated on 'synthetic(.|\n)*mlperf:"):
        load_calibration(engine_dir, SPEC, calibration_dir=present)


def test_one_synthetic_calibration_serves_engines_and_the_gpu_checks(tmp_path):
    """Without the MLPerf set an engine calibrates on the same synthetic prompts as ``inflight.calibrate``."""
    from code.gptj.backends import inflight

    calibration = calibration_prompts(3, tmp_path / "absent", max_length=40)
    synthetic = synthetic_calibration_prompts(3, 40)
    assert len(synthetic) == SYNTHETIC_CALIBRATION_PROMPTS and max(len(p) for p in synthetic) <= 40
    assert [p.tolist() for p in calibration.prompts] == [p.tolist() for p in synthetic]
    assert calibration.source == f"synthetic:seed=7922,count={SYNTHETIC_CALIBRATION_PROMPTS},max_length=40"
    assert inflight.synthetic_calibration_prompts is synthetic_calibration_prompts


def test_the_mlperf_calibration_set_is_used_when_present_and_tracked(tmp_path):
    present = fake_calibration_set(tmp_path / "calibration", count=5)
    engine_dir = build_engine(SPEC, tmp_path / "e", dtype=torch.float32, calibration_dir=present)
    calibration = json.loads((engine_dir / MANIFEST).read_text())["calibration"]
    assert calibration["source"].startswith(f"mlperf:{present.resolve()}:sha256=") and calibration["count"] == 5
    prompts = calibration_prompts(SPEC.seed, present).prompts
    assert [len(p) for p in prompts] == np.load(present / "input_lengths.npy").tolist()
    loaded = load_calibration(engine_dir, SPEC, calibration_dir=present)
    assert loaded.as_dict() == calibrate_on(load_model(SPEC, CPU, torch.float32), prompts).as_dict()
    fake_calibration_set(present, count=5, seed=1)  # other prompts: another manifest, so another source
    with pytest.raises(EngineError, match="calibrated on"):
        load_calibration(engine_dir, SPEC, calibration_dir=present)


def test_a_changed_checkpoint_makes_the_engine_stale_and_a_failed_build_leaves_it_as_it_was(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "shard.bin").write_bytes(b"0" * 100)
    spec = EngineSpec("tiny", "fp8", "auto", checkpoint=str(folder), seed=0)
    assert engine_key(spec).startswith("tiny-fp8-kvauto-checkpoint-")
    absent = tmp_path / "none"
    model = load_model(EngineSpec("tiny", seed=0), CPU, torch.float32)  # stands in for the checkpoint's weights
    engine_dir = build_engine(spec, tmp_path / "e", dtype=torch.float32, calibration_dir=absent, model=model)
    assert [f["file"] for f in json.loads((engine_dir / MANIFEST).read_text())["checkpoint"]] == \
        ["config.json", "shard.bin"]
    load_calibration(engine_dir, spec, calibration_dir=absent)
    os.utime(folder / "shard.bin", ns=(1, 1))
    with pytest.raises(EngineError, match="changed since(.|\n)*make generate_engines"):
        load_calibration(engine_dir, spec, calibration_dir=absent)

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError):
        build_engine(spec, engine_dir, dtype=torch.float32, calibration_dir=broken, model=model)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".e.lock", "broken", "checkpoint", "e"]  # no temporary
    with pytest.raises(EngineError, match="changed since"):
        load_calibration(engine_dir, spec, calibration_dir=absent)  # the earlier engine, still refused as stale
    with pytest.raises(ValueError, match="nothing to calibrate"):
        build_engine(EngineSpec("tiny"), tmp_path / "bf16")


def test_ensure_engine_reuses_a_current_engine_and_rebuilds_a_stale_one(tmp_path):
    """``make generate_engines`` (and so ``make run``) calibrates once: an engine whose manifest matches is kept."""
    from code.gptj.backends.inflight_engine import ensure_engine

    absent, engine_dir = tmp_path / "none", tmp_path / engine_key(SPEC)
    assert ensure_engine(SPEC, engine_dir, dtype=torch.float32, calibration_dir=absent)
    assert not ensure_engine(SPEC, engine_dir, dtype=torch.float32, calibration_dir=absent)
    present = fake_calibration_set(tmp_path / "calibration")
    assert ensure_engine(SPEC, engine_dir, dtype=torch.float32, calibration_dir=present)  # another set: stale
    assert json.loads((engine_dir / MANIFEST).read_text())["calibration"]["source"].startswith("mlperf:")
    load_calibration(engine_dir, SPEC, calibration_dir=present)


def test_generate_engines_builds_what_the_run_expects_and_labels_the_calibration(tmp_path, monkeypatch):
    """The orchestration seam: ``generate_engine`` writes ``<engines>/<system>/gptj/<Scenario>/<key>/``, the run's
    description points at that folder, and the not-submittable reason tracks the calibration set. FP8 needs a GPU,
    so the device check is stood in for (the engine itself builds on the CPU)."""
    from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario, TestMode
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting
    from code.gptj import benchmark
    from code.gptj.backends import inflight_engine as engine

    monkeypatch.setattr(benchmark, "resolve_devices", lambda config: ["cpu"])
    monkeypatch.setattr(benchmark, "ENGINES_DIR", tmp_path / "engines")
    monkeypatch.setattr(engine, "CALIBRATION_DIR", tmp_path / "absent")
    workload = WorkloadSetting(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    config = resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", workload,
                            {"backend": "inflight", "precision": "fp32", "kv_cache_dtype": "fp8", "model_name": "tiny",
                             "input_data": "synthetic", "weights": "random", "seed": 3})
    synthetic = "FP8 scales calibrated on synthetic prompts, not the MLPerf calibration list"
    described = benchmark.describe_inputs(config, TestMode.PerformanceOnly)
    assert synthetic in described["invalid_because"]
    expected_dir = tmp_path / "engines" / config.system / "gptj" / "Offline" / "tiny-fp32-kvfp8-random-s3"
    assert described["engine"] == str(expected_dir)
    report = benchmark.generate_engine(config)
    assert report["engine"] == str(expected_dir) and (expected_dir / MANIFEST).is_file()
    spec = EngineSpec("tiny", "fp32", "fp8", seed=3)
    assert json.loads((expected_dir / MANIFEST).read_text())["calibration"]["dtype"] == "float32"
    load_calibration(expected_dir, spec)

    monkeypatch.setattr(engine, "CALIBRATION_DIR", fake_calibration_set(tmp_path / "calibration"))
    assert synthetic not in benchmark.describe_inputs(config, TestMode.PerformanceOnly)["invalid_because"]
    with pytest.raises(EngineError, match="calibrated on"):
        load_calibration(expected_dir, spec)  # built before the set arrived: rebuild
    bf16 = resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", workload,
                          {"backend": "inflight", "precision": "fp32", "model_name": "tiny", "input_data": "synthetic",
                           "weights": "random"})
    assert benchmark.generate_engine(bf16)["engine"].startswith("none")


def test_the_backend_options_carry_fast_accumulation_from_the_chosen_engine(tmp_path):
    """The ladder's first GPT-J engine runs FP8 GEMMs with fast accumulation; naming the FP8 options alone picks the
    `fp8` engine, whose GEMMs accumulate in float32 (what InflightGptjBackend passes to use_fp8_gemms)."""
    from code.common.constants import AccuracyTarget, Benchmark, Scenario
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting
    from code.gptj.backends import BackendContext
    from code.gptj.backends.inflight import InflightGptjBackend

    context = BackendContext(device="cuda", cpu_threads=0, checkpoint="random", engines_dir=tmp_path)

    def options(overrides: dict) -> object:
        config = resolve_config(Benchmark.GPTJ, Scenario.Offline, "H200_SXM_141GBx1",
                                WorkloadSetting(accuracy_target=AccuracyTarget.k_99), overrides)
        return InflightGptjBackend.options_from(config, context)

    first = options({})
    assert (first.precision, first.kv_cache_dtype, first.fp8_fast_accum) == ("fp8", "fp8", True)
    named = options({"precision": "fp8", "kv_cache_dtype": "fp8"})
    assert (named.precision, named.fp8_fast_accum) == ("fp8", False)
    assert first.engine_dir == named.engine_dir  # one calibration serves both accumulations
