"""A run over the nodes of a Ray cluster: ``python -m code.main --cluster=<address>`` against a real local cluster.

Two Ray nodes on 127.0.0.1 (``ray.cluster_utils.Cluster``: a head and one more, each its own raylet with its own
environment), one CPU worker each, running the real backends against the real LoadGen. The accuracy log of the
two-node run must equal the one-device run's, byte for byte (every sample exactly once); a node without the
preprocessed data is refused before LoadGen starts, naming the node and the fix; a node removed mid-test ends the
test with its name, LoadGen's logs kept. Nothing listens on other than 127.0.0.1: Ray's own addresses are forced to
the loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray use 127.0.0.1 for this machine) and the workers
connect to ``--cluster_host=127.0.0.1``.

Ray is an optional install (make setup_cluster). Without it these tests are skipped, loudly, except in CI (the
environment variable CI set), where they must run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from code.common.constants import ExitCode
from code.common.paths import REPO_ROOT
from scripts.local_cluster import LOOPBACK_ENV
from scripts.local_cluster import local_cluster as one_machine_cluster
from tests.actions.test_device_workers import BERT, GPTJ, LONG, _gone, _read_until, accuracy_log, build_dir

__all__ = ["build_dir"]  # the fixture, shared with the one-machine worker tests

pytestmark = pytest.mark.slow

try:
    import ray  # noqa: F401
except ImportError:
    if os.environ.get("CI"):
        raise  # CI installs Ray for these tests (make setup_cluster): a missing Ray there is a broken CI
    pytest.skip("SKIPPED: Ray is not installed (make setup_cluster); the cluster tests did not run",
                allow_module_level=True)

CLUSTER = ["--cluster_host=127.0.0.1", "--cluster_ready_timeout_s=300"]


def _env(build: Path) -> dict[str, str]:
    return {**os.environ, **LOOPBACK_ENV, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}


def local_cluster(builds: list[Path]) -> AbstractContextManager[tuple[Any, list[Any]]]:
    """A Ray cluster of one node per build folder (each node's MLPERF_BUILD_DIR: its own disk), on 127.0.0.1."""
    return one_machine_cluster([{"MLPERF_BUILD_DIR": str(build)} for build in builds], num_cpus=1, num_gpus=0)


def node_name(node: Any) -> str:
    """How the run names a node of this one-machine cluster: the host's name and the node id's first characters."""
    return f"{socket.gethostname()}-{node.node_id[:6]}"


def run_main(build: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "code.main", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=_env(build), timeout=timeout)


def start_long_run(build: Path, address: str, log_dir: Path) -> subprocess.Popen:
    """A BERT run on the cluster long enough to be interrupted, its output read as it comes."""
    return subprocess.Popen([sys.executable, "-m", "code.main", "--action=run", *BERT, *LONG, f"--cluster={address}",
                             *CLUSTER, f"--log_dir={log_dir}"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env(build))


def _error_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("ERROR:"))


@pytest.mark.parametrize("benchmark", ["bert", "gptj"])
def test_two_nodes_answer_as_one_machine_does(build_dir: Path, tmp_path: Path, benchmark: str) -> None:
    prompts = build_dir / "preprocessed_data" / "cnn_dailymail_tokenized_gptj"
    args = BERT if benchmark == "bert" else [*GPTJ, f"--input_data={prompts}"]
    one_machine = tmp_path / "one"
    done = run_main(build_dir, "--action=run", *args, "--test_mode=AccuracyOnly", f"--log_dir={one_machine}")
    assert done.returncode == ExitCode.INVALID, done.stdout + done.stderr  # random weights FAIL
    with local_cluster([build_dir, build_dir]) as (cluster, nodes):
        two_nodes = tmp_path / "cluster"
        done = run_main(build_dir, "--action=run", *args, "--test_mode=AccuracyOnly", f"--cluster={cluster.address}",
                        *CLUSTER, f"--log_dir={two_nodes}")
    assert done.returncode == ExitCode.INVALID, done.stdout + done.stderr
    (one,), (two,) = (list((logs / "CPU").glob("*/Offline")) for logs in (one_machine, two_nodes))
    single, split = accuracy_log(one), accuracy_log(two)
    assert len(single) == {"bert": 53, "gptj": 6}[benchmark], "every question or prompt of the fixture, once"
    assert split == single, "two nodes answer every sample exactly as one machine does"
    devices = json.loads((two / "metadata.json").read_text())["devices"]
    expected = sorted(f"cpu:0@{node_name(node)}" for node in nodes)
    assert devices["used"] == expected, devices["used"]
    assert [worker["device"] for worker in devices["workers"]] == expected
    assert sum(row["samples"] for row in devices["completed"]) == len(single)
    assert all(row["samples"] > 0 for row in devices["completed"]), "both nodes got work"


@pytest.mark.parametrize("missing", ["data", "engine"])
def test_a_node_without_the_data_or_the_engine_is_refused_before_loadgen(build_dir: Path, tmp_path: Path,
                                                                         missing: str) -> None:
    other = tmp_path / "other_build"  # the second node's disk: the compiled core, and the data unless it is missing
    other.mkdir()
    (other / "lib").symlink_to(build_dir / "lib", target_is_directory=True)
    if missing == "engine":
        (other / "preprocessed_data").symlink_to(build_dir / "preprocessed_data", target_is_directory=True)
    log_dir = tmp_path / "logs"
    mode = "AccuracyOnly" if missing == "data" else "PerformanceOnly"
    with local_cluster([build_dir, other]) as (cluster, nodes):
        done = run_main(build_dir, "--action=run", *BERT, f"--test_mode={mode}", "--input_data=synthetic"
                        if missing == "engine" else "--seed=0", f"--cluster={cluster.address}", *CLUSTER,
                        f"--log_dir={log_dir}")
    output = done.stdout + done.stderr
    assert done.returncode == ExitCode.TEST_FAILED, output
    error = _error_line(done.stdout)
    assert f"the worker of cpu:0@{node_name(nodes[1])} could not start" in error, error
    if missing == "data":
        assert f"not in {other}" in error and "preprocess_data" in error, error
    else:
        assert "no BERT engine" in error and "make generate_engines" in error, error
    assert not list(log_dir.glob("CPU/*/Offline/mlperf_log_detail.txt")), "LoadGen never started"


def test_a_node_that_leaves_ends_the_test_with_its_name(build_dir: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    with local_cluster([build_dir, build_dir]) as (cluster, nodes):
        process = start_long_run(build_dir, cluster.address, log_dir)
        try:
            before = _read_until(process, "starting LoadGen")
            time.sleep(2.0)
            started = time.monotonic()
            cluster.remove_node(nodes[1], allow_graceful=False)  # its raylet and every process of it, killed
            rest, _ = process.communicate(timeout=120)
            ended_s = time.monotonic() - started
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
    output = before + rest
    assert process.returncode == ExitCode.TEST_FAILED, output
    error = _error_line(output)
    assert f"@{node_name(nodes[1])}" in error and "not valid" in error, error
    assert ended_s < 60, f"the test took {ended_s:.0f} s to end after the node left"
    test_dir = log_dir / "CPU" / "bert-99" / "Offline"
    assert (test_dir / "mlperf_log_detail.txt").is_file(), "LoadGen's logs are kept"
    assert json.loads((test_dir / "metadata.json").read_text())["result"]["valid"] is not True
    assert _gone(log_dir) == [], "the test process ends"
    assert _cluster_workers() == [], "no worker outlives the test"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_stopping_the_run_leaves_no_worker_on_any_node(build_dir: Path, tmp_path: Path, how: signal.Signals) -> None:
    log_dir = tmp_path / "logs"
    with local_cluster([build_dir, build_dir]) as (cluster, _):
        process = start_long_run(build_dir, cluster.address, log_dir)
        try:
            _read_until(process, "starting LoadGen")
            assert len(_cluster_workers()) == 2, "one worker on each node"
            process.send_signal(how)
            process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        deadline = time.monotonic() + 30.0  # Ray notices its driver is gone and ends the driver's tasks
        while _cluster_workers() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _cluster_workers() == [], "the workers end with the run, on every node"
    assert _gone(log_dir) == []


def _cluster_workers() -> list[int]:
    """The cluster workers of this machine that run still (a test's workers connect to 127.0.0.1)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "code.processes.device_worker" in command and "--connect=127.0.0.1:" in command:
            found.append(int(entry.name))
    return found


def test_a_local_cluster_leaves_this_process_environment_as_it_was(tmp_path: Path) -> None:
    # Each node's environment is set here while the node starts (its raylet inherits it), then taken back.
    before = dict(os.environ)
    with local_cluster([tmp_path / "a", tmp_path / "b"]) as (_, nodes):
        assert len(nodes) == 2 and os.environ.get("MLPERF_BUILD_DIR") == before.get("MLPERF_BUILD_DIR")
        assert all(os.environ.get(name) == value for name, value in LOOPBACK_ENV.items())
    assert dict(os.environ) == before
