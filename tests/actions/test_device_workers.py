"""Worker processes, one per device, through the whole product: ``python -m code.main`` with ``--cpu_workers=2``.

Two CPU workers are real processes running the real backends (BERT and GPT-J tiny models, the GPT-J one the
continuous in-flight engine) against the real LoadGen, exactly as a GPU run's workers do; only the device is the
CPU. The accuracy log of two workers must equal the one-device run's, byte for byte; a worker killed mid-test ends
the test with its device named and its end said; Ctrl-C or a kill of the run leaves no worker behind; a worker
that cannot start names its device and the fix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from code.common.constants import ExitCode
from code.common.paths import LIB_DIR, REPO_ROOT
from code.common.supervision import processes_mentioning

pytestmark = pytest.mark.slow
SQUAD = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"
CNN = REPO_ROOT / "tests" / "fixtures" / "cnn_tiny.json"
# fp32 on one thread per worker: the same batches give the same bytes, whichever process runs them.
BERT = ["--benchmarks=bert", "--model_name=tiny", "--precision=fp32", "--device=cpu", "--cpu_threads=1",
        "--gpu_batch_size=4", "--weights=random"]
GPTJ = ["--benchmarks=gptj", "--model_name=tiny", "--precision=fp32", "--device=cpu", "--cpu_threads=1",
        "--gpu_batch_size=4", "--weights=random", "--backend=inflight"]
# A performance test that runs long enough to be interrupted, on synthetic inputs.
LONG = ["--input_data=synthetic", "--min_duration=120000", "--offline_expected_qps=2000"]


def _env(build: Path) -> dict[str, str]:
    return {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory, harness_built: Path) -> Path:
    """A private build/ with the compiled core linked in and both fixtures preprocessed."""
    build = tmp_path_factory.mktemp("build")
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    for module, flag, fixture in (("code.bert.preprocess_data", "--squad_json", SQUAD),
                                  ("code.gptj.preprocess_data", "--eval_json", CNN)):
        done = subprocess.run([sys.executable, "-m", module, flag, str(fixture), "--preprocessed_data_dir",
                               str(build / "preprocessed_data")], cwd=REPO_ROOT, capture_output=True, text=True,
                              env=_env(build))
        assert done.returncode == 0, done.stdout + done.stderr
    return build


def run_main(build: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "code.main", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=_env(build), timeout=timeout)


def accuracy_log(test_dir: Path) -> dict[int, str]:
    """QSL index -> response (hex), every entry of LoadGen's accuracy log; an index twice fails the test."""
    seen: dict[int, str] = {}
    for entry in json.loads((test_dir / "mlperf_log_accuracy.json").read_text()):
        assert entry["qsl_idx"] not in seen, f"sample {entry['qsl_idx']} completed twice"
        seen[entry["qsl_idx"]] = entry["data"]
    return seen


@pytest.mark.parametrize("benchmark", ["bert", "gptj"])
def test_two_workers_answer_as_one_device_does(build_dir: Path, tmp_path: Path, benchmark: str) -> None:
    prompts = build_dir / "preprocessed_data" / "cnn_dailymail_tokenized_gptj"
    args = BERT if benchmark == "bert" else [*GPTJ, f"--input_data={prompts}"]
    logs = {}
    for workers in (1, 2):
        logs[workers] = tmp_path / f"workers{workers}"
        done = run_main(build_dir, "--action=run", *args, "--test_mode=AccuracyOnly", f"--cpu_workers={workers}",
                        f"--log_dir={logs[workers]}")
        assert done.returncode == ExitCode.INVALID, done.stdout + done.stderr  # random weights FAIL
    (one,), (two,) = (list((logs[w] / "CPU").glob("*/Offline")) for w in (1, 2))
    single, split = accuracy_log(one), accuracy_log(two)
    assert len(single) == {"bert": 53, "gptj": 6}[benchmark], "every question or prompt of the fixture, once"
    assert split == single, "two workers answer every sample exactly as one device does"
    devices = json.loads((two / "metadata.json").read_text())["devices"]
    assert devices["used"] == ["cpu:0", "cpu:1"]
    assert [worker["device"] for worker in devices["workers"]] == ["cpu:0", "cpu:1"]
    assert all(worker["pid"] != os.getpid() and worker["host"]["cpu_s"] >= 0 for worker in devices["workers"])
    assert sum(row["samples"] for row in devices["completed"]) == len(single)
    assert all(row["samples"] > 0 for row in devices["completed"]), "both workers got work"
    if benchmark == "gptj":
        stats = json.loads((two / "metadata.json").read_text())["engine_stats"]
        assert len(stats["per_device"]) == 2, "each worker's engine counters, and their sum"


def _start(build: Path, log_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "code.main", "--action=run", *BERT, *LONG, "--cpu_workers=2",
                             f"--log_dir={log_dir}", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env(build))


def _read_until(process: subprocess.Popen, text: str, timeout_s: float = 240.0) -> str:
    """The process's output up to the first line holding ``text``."""
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout_s
    for line in process.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
        assert time.monotonic() < deadline, f"{text!r} not seen in time:\n{''.join(seen)}"
    raise AssertionError(f"{text!r} never came:\n{''.join(seen)}")


def _workers_of(log_dir: Path) -> list[int]:
    return [pid for pid in processes_mentioning(str(log_dir)) if _cmdline(pid).count("device_worker")]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _gone(log_dir: Path, timeout_s: float = 20.0) -> list[int]:
    """The processes of the run that are still there once ``timeout_s`` has passed (none, if all ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = processes_mentioning(str(log_dir))
        if not left:
            return []
        time.sleep(0.2)
    return processes_mentioning(str(log_dir))


def test_a_killed_worker_ends_the_test_with_its_device_named(build_dir: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    process = _start(build_dir, log_dir)
    try:
        before = _read_until(process, "starting LoadGen")
        time.sleep(2.0)
        victim = [pid for pid in _workers_of(log_dir) if "--device=cpu:1" in _cmdline(pid)]
        assert len(victim) == 1, before
        os.kill(victim[0], signal.SIGKILL)
        rest, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    output = before + rest
    assert process.returncode == ExitCode.TEST_FAILED, output
    error = next(line for line in output.splitlines() if line.startswith("ERROR:"))
    # The kill reaches the core as an end of file, or as a reset when the core was writing a batch to it.
    assert "run_batch on cpu:1 (device 2 of 2)" in error, error
    assert "closed its connection" in error or "the connection to the worker process broke" in error, error
    assert f"the worker of cpu:1 (pid {victim[0]}) was killed by SIGKILL" in error, error
    assert "not valid" in error
    test_dir = log_dir / "CPU" / "bert-99" / "Offline"
    assert (test_dir / "mlperf_log_detail.txt").is_file(), "LoadGen's logs are kept"
    assert json.loads((test_dir / "metadata.json").read_text())["result"]["valid"] is not True
    assert _gone(log_dir) == [], "no worker outlives the test"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_stopping_the_run_leaves_no_worker_behind(build_dir: Path, tmp_path: Path, how: signal.Signals) -> None:
    log_dir = tmp_path / "logs"
    process = _start(build_dir, log_dir)
    try:
        _read_until(process, "starting LoadGen")
        assert len(_workers_of(log_dir)) == 2
        process.send_signal(how)  # Ctrl-C at a terminal reaches the harness, not its test's process group
        process.communicate(timeout=60)
    finally:
        process.kill()
    if how == signal.SIGINT:
        assert process.returncode == 128 + signal.SIGINT
    assert _gone(log_dir) == [], "the test process and both workers end with the run"


def test_a_worker_that_cannot_start_names_its_device_and_the_fix(build_dir: Path, tmp_path: Path) -> None:
    # run_harness without generate_engines: each worker finds no engine to load, before LoadGen starts.
    done = run_main(build_dir, "--action=run_harness", *BERT, "--seed=4242", "--cpu_workers=2",
                    "--input_data=synthetic", f"--log_dir={tmp_path / 'logs'}")
    assert done.returncode == ExitCode.TEST_FAILED, done.stdout + done.stderr
    error = next(line for line in done.stdout.splitlines() if line.startswith("ERROR:"))
    assert "the worker of cpu:" in error and "could not start: no BERT engine" in error, error
    assert "make generate_engines" in error
    assert not (tmp_path / "logs" / "CPU" / "bert-99" / "Offline" / "mlperf_log_detail.txt").exists(), \
        "LoadGen never started"
    assert _gone(tmp_path / "logs") == []
