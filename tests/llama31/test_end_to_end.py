"""llama3.1-8b through `python -m code.main`: RUN_ARGS -> config -> C++ core + LoadGen -> the tiny Llama -> logs ->
ROUGE, on a made data file in the reference's format and a checkpoint folder (tiny random weights in HF's layout,
the tiny tokenizer) in a private build folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from code.common.constants import ExitCode
from code.common.paths import LIB_DIR, REPO_ROOT
from tests.llama31.made_data import reference_records, write_reference_file, write_tiny_tokenizer

pytestmark = pytest.mark.slow
EOS_IDS = {128001, 128008, 128009}
SAMPLES = 8


def _env(build):
    return {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory, harness_built):
    """A private build/ with the compiled core linked in, a preprocessed made set and a tiny checkpoint."""
    from safetensors.torch import save_file

    from code.llama31.architecture import LLAMA_CONFIGS
    from code.llama31.model import hf_config, hf_state, random_weights
    from code.llama31.preprocess_data import preprocess

    build = tmp_path_factory.mktemp("build")
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    checkpoint = write_tiny_tokenizer(build / "models" / "Llama3.1-8B" / "Llama-3.1-8B-Instruct")
    model = random_weights(LLAMA_CONFIGS["tiny"], seed=5)
    save_file({name: t.contiguous() for name, t in hf_state(model).items()}, checkpoint / "model.safetensors")
    (checkpoint / "config.json").write_text(json.dumps(hf_config(LLAMA_CONFIGS["tiny"]).to_dict()))
    source = write_reference_file(build / "data" / "cnn_eval.json", reference_records(checkpoint, SAMPLES))
    preprocess(source, build / "preprocessed" / "datacenter", "datacenter", expected_count=None)
    return build


def accuracy_run(build_dir, logs, *args):
    """An AccuracyOnly Offline run on the made set; each sample's generated tokens by QSL index."""
    done = subprocess.run(
        [sys.executable, "-m", "code.main", "--action=run", "--benchmarks=llama3.1-8b", "--scenarios=offline",
         "--test_mode=AccuracyOnly", "--gpu_batch_size=4", f"--input_data={build_dir / 'preprocessed' / 'datacenter'}",
         f"--weights={build_dir / 'models' / 'Llama3.1-8B' / 'Llama-3.1-8B-Instruct'}", f"--log_dir={logs}", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, env=_env(build_dir), timeout=600)
    assert done.returncode == ExitCode.INVALID, done.stdout + done.stderr
    test_dir = logs / "CPU" / "llama3.1-8b" / "Offline"
    entries = json.loads((test_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.int32) for e in entries}


def test_accuracy_run_scores_the_generated_tokens(build_dir, tmp_path):
    """An AccuracyOnly run on the made set: every sample answered with 1 to 128 int32 token ids, ending at an EOS id
    when shorter, scored into an accuracy.txt the checker reads; random weights miss the targets (exit 3)."""
    logs = tmp_path / "logs"
    outputs = accuracy_run(build_dir, logs)
    assert sorted(outputs) == list(range(SAMPLES))
    assert all(1 <= len(o) <= 128 and (len(o) == 128 or int(o[-1]) in EOS_IDS) for o in outputs.values())
    test_dir = logs / "CPU" / "llama3.1-8b" / "Offline"
    first = (test_dir / "accuracy.txt").read_text().splitlines()[0]
    assert re.match(r".*'rougeLsum':\s([\d.]+).*", first) and f"'gen_num': {SAMPLES}" in first
    assert "FAIL" in (test_dir / "accuracy.txt").read_text()


def test_inflight_backend_answers_as_the_pytorch_backend(build_dir, tmp_path):
    """The inflight backend, driven by the core's continuous session with fewer slots than samples, logs the
    pytorch backend's tokens for every sample, and the run records the engine's counters."""
    eager = accuracy_run(build_dir, tmp_path / "eager")
    inflight = accuracy_run(build_dir, tmp_path / "inflight", "--backend=inflight")
    assert sorted(inflight) == sorted(eager) == list(range(SAMPLES))
    for index, tokens in eager.items():
        np.testing.assert_array_equal(inflight[index], tokens)
    record = json.loads((tmp_path / "inflight" / "CPU" / "llama3.1-8b" / "Offline" / "metadata.json").read_text())
    stats = record["engine_stats"]
    assert stats["completed"] == SAMPLES and stats["generated_tokens"] == sum(len(t) for t in eager.values())


def test_singlestream_times_first_tokens_on_the_cpu(build_dir, tmp_path):
    """SingleStream on the CPU class's engine (the inflight backend): LoadGen gets each first token as the engine
    has it, so the summary holds a first-token p90 under the sample's whole latency and a time per output token,
    and the run is not marked as timing first tokens with whole responses. 64 queries: what early stopping needs."""
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "code.main", "--action=run", "--benchmarks=llama3.1-8b", "--scenarios=singlestream",
         "--test_run", "--min_duration=2000", "--min_query_count=64",
         f"--input_data={build_dir / 'preprocessed' / 'datacenter'}",
         f"--weights={build_dir / 'models' / 'Llama3.1-8B' / 'Llama-3.1-8B-Instruct'}", f"--log_dir={logs}"],
        cwd=REPO_ROOT, capture_output=True, text=True, env=_env(build_dir), timeout=600)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    test_dir = logs / "CPU" / "llama3.1-8b" / "SingleStream"
    summary = (test_dir / "mlperf_log_summary.txt").read_text()
    sample_p90 = int(re.search(r"90\.0th percentile latency \(ns\) : (\d+)", summary).group(1))
    first_p90 = int(re.search(r"90\.0th first token percentile latency \(ns\) : (\d+)", summary).group(1))
    assert 0 < first_p90 < sample_p90
    assert re.search(r"90\.00 percentile time to output token \(ns\)\s+: \d+", summary)
    record = json.loads((test_dir / "metadata.json").read_text())
    assert record["config"]["fields"]["backend"] == "inflight"
    assert not any("whole responses" in reason for reason in record["result"]["not_submittable"])
