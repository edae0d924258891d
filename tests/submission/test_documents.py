"""The documents a staged tree carries: text without folders of this machine, and the calibration write-up of FP8
engines, written from a real engine manifest (FP8 runs need a GPU, so the run's metadata here is a stand-in that
names the engine; the pipeline test covers everything else of staging with real runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.constants import TestMode
from code.common.paths import BUILD_DIR, REPO_ROOT
from code.mlperf.run_record import RunRecord
from code.submission.documents import CALIBRATION_DOC, host_paths, portable, write_calibration
from code.submission.runs import TestRun

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"


def test_paths_of_this_machine_become_relative_or_their_last_part(tmp_path):
    text = (f"inputs: {BUILD_DIR}/preprocessed_data/squad_tokenized; code: {REPO_ROOT}/code/main.py; "
            f"weights: /data/models/bert/model.pytorch; C++/pybind11, N/A, https://github.com/mlcommons/inference")
    assert portable(text) == ("inputs: build/preprocessed_data/squad_tokenized; code: code/main.py; "
                              "weights: model.pytorch; C++/pybind11, N/A, https://github.com/mlcommons/inference")
    (tmp_path / "measurements").mkdir()
    (tmp_path / "measurements" / "README.md").write_text(f"made in {tmp_path}/logs\n")
    (tmp_path / "measurements" / "mlperf_log_detail.txt").write_text(f"{tmp_path}/logs\n")  # LoadGen's: as written
    assert host_paths(tmp_path) == [f"measurements/README.md: {tmp_path}/logs"]


def _fp8_test(engine: Path, folder: Path, fp8_residual: bool = False, fp8_attention: bool = False) -> TestRun:
    """The metadata.json fields the write-up reads, as an FP8 run of bert-99 Offline writes them."""
    metadata = {"round": "v5.0",
                "config": {"benchmark": "bert-99", "fields": {"backend": "pytorch", "precision": "fp8",
                                                              "fp8_gemms": "qkv+wo+w1+w2", "fp8_fast_accum": True,
                                                              "fp8_residual": fp8_residual,
                                                              "fp8_attention": fp8_attention}},
                "provenance": {"engine": str(engine)}, "result": {"complete": True}}
    return TestRun(folder, "H100_SXM_80GBx1", "bert-99", "Offline", TestMode.PerformanceOnly, RunRecord(metadata))


@pytest.mark.parametrize("calibrated_on", ["mlperf", "synthetic"])
def test_calibration_write_up_reads_the_engines_record(tmp_path, calibrated_on):
    import torch

    from code.bert.backends.pytorch_engine import EngineSpec, build_engine, calibration_set

    preprocessed = tmp_path / "preprocessed"
    done = subprocess.run([sys.executable, "-m", "code.bert.preprocess_data", "--squad_json", str(FIXTURE),
                           "--preprocessed_data_dir", str(preprocessed)], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    listed = tmp_path / "bert_calibration_features.txt"
    listed.write_text("\n".join(str(i) for i in range(10)) + "\n")
    calibration = calibration_set(data_dir=preprocessed / "squad_tokenized",
                                  calibration_list=listed if calibrated_on == "mlperf" else tmp_path / "none")
    engine = build_engine(EngineSpec("tiny", "fp8", "random"), tmp_path / "engine", calibration=calibration,
                          device=torch.device("cpu"))
    tree = tmp_path / "tree"
    # one case each way: the e4m3 residual stream and FP8 attention are written up when used
    residual = calibrated_on == "synthetic"
    problems = write_calibration(tree, [_fp8_test(engine, tmp_path / "run", fp8_residual=residual,
                                                  fp8_attention=residual)])
    text = (tree / CALIBRATION_DOC).read_text()
    assert ("The residual stream is stored only in FP8 (`fp8_residual`)" in text) is residual
    assert ("Attention runs in FP8 (`fp8_attention`)" in text) is residual
    manifest = json.loads((engine / "engine.json").read_text())
    assert f"## bert-99 Offline: engine `{manifest['engine_key']}`" in text
    assert "`s = max|W| / 448`" in text and "`s = amax / 448`" in text
    assert "`qkv`, `wo`, `w1`, `w2` of each of the 2 encoder layers" in text and "fast accumulation" in text
    assert f"{len(manifest['calibration']['amax'])} calibrated magnitudes" in text
    if calibrated_on == "mlperf":
        assert problems == [] and "the MLPerf BERT calibration set" in text and "; 10 inputs" in text
    else:
        assert "synthetic inputs (synthetic:seed=0)" in text
        assert problems == ["bert-99 Offline performance: its FP8 engine was calibrated on synthetic data, not the "
                            "MLPerf calibration set (make download_data preprocess_data, then make generate_engines)"]
    assert not host_paths(tree)


def test_a_missing_engine_record_is_a_problem(tmp_path):
    problems = write_calibration(tmp_path / "tree", [_fp8_test(tmp_path / "gone", tmp_path / "run")])
    assert len(problems) == 1
    assert f"its FP8 engine's calibration record ({tmp_path}/gone/engine.json) is not on this machine" in problems[0]


@pytest.mark.parametrize(("precision", "says_fast"), [("fp8", True), ("bf16", False)])
def test_gptj_write_up_names_fast_accumulation_only_with_fp8_gemms(tmp_path, precision, says_fast):
    """GPT-J's FP8 engines: fast accumulation is written up where the GEMMs are FP8, not for an FP8 KV cache beside
    bf16 GEMMs (the manifest is the fields the write-up reads, as ``inflight_engine`` writes them)."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "engine.json").write_text(json.dumps({
        "engine_key": "6b-fp8-kvfp8-random-s0", "config": {"n_layer": 28},
        "calibration": {"source": "synthetic:seed=0", "count": 32, "dtype": "bf16", "device": "cuda",
                        "amax": {"gemm_in": [1.0] * 28, "gemm_out": [1.0] * 28, "k": [1.0] * 28, "v": [1.0] * 28}}}))
    fields = {"backend": "inflight", "precision": precision, "kv_cache_dtype": "fp8", "fp8_fast_accum": True}
    metadata = {"round": "v5.0", "config": {"benchmark": "gptj-99", "fields": fields},
                "provenance": {"engine": str(engine)}, "result": {"complete": True}}
    run = TestRun(tmp_path / "run", "H200_SXM_141GBx1", "gptj-99", "Offline", TestMode.PerformanceOnly,
                  RunRecord(metadata))
    write_calibration(tmp_path / "tree", [run])
    text = (tmp_path / "tree" / CALIBRATION_DOC).read_text()
    assert "KV cache: keys and values stored in e4m3" in text
    assert ("both matrix products of each of the 28 decoder layers" in text) is says_fast
    assert ("cuBLASLt fast accumulation" in text) is says_fast


def test_int8_write_up_states_int8_rules_and_the_engines_record(tmp_path):
    """An INT8 engine's write-up: INT8's rules (per-channel weights, amax / 127) and not FP8's, its GEMMs, its
    calibration record; beside an FP8 test both formats' rules."""
    import torch

    from code.bert.backends.pytorch_engine import EngineSpec, build_engine

    engine = build_engine(EngineSpec("tiny", "int8", "random"), tmp_path / "engine", device=torch.device("cpu"))
    run = _fp8_test(engine, tmp_path / "run")
    run.record.fields.update(precision="int8", fp8_gemms="w1+w2", fp8_fast_accum=False)
    problems = write_calibration(tmp_path / "tree", [run])
    text = (tmp_path / "tree" / CALIBRATION_DOC).read_text()
    assert "`s[n] = max|W[n]| / 127`" in text and "`s = amax / 127`" in text and "`s = amax / 448`" not in text
    assert "- INT8 tensors (symmetric, -127..127): the input and the weight of the matrix products `w1`, `w2`" in text
    assert "fast accumulation" not in text.split("## ")[1]
    assert problems == ["bert-99 Offline performance: its INT8 engine was calibrated on synthetic data, not the "
                        "MLPerf calibration set (make download_data preprocess_data, then make generate_engines)"]
    fp8 = _fp8_test(engine, tmp_path / "fp8-run")
    write_calibration(tmp_path / "both", [run, fp8])
    both = (tmp_path / "both" / CALIBRATION_DOC).read_text()
    assert "`s = amax / 448`" in both and "`s = amax / 127`" in both
