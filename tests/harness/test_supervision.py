"""A run's test process never outlives the harness: Ctrl-C and a killed parent, with the real LoadGen.

Each test starts `python -m code.main` on a Server test that would last ten minutes, waits until LoadGen runs,
then stops the harness the way a user or a scheduler would and checks that no test process is left and that the
test's folder says it is incomplete.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from code.common.paths import LIB_DIR, REPO_ROOT
from code.common.supervision import processes_mentioning

pytestmark = pytest.mark.slow
LONG_SERVER_TEST = ["--action=run", "--scenarios=server", "--model_name=tiny", "--precision=fp32", "--device=cpu",
                    "--gpu_batch_size=8", "--input_data=synthetic", "--synthetic_sample_count=64",
                    "--server_target_qps=20", "--min_duration=600000"]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory, harness_built):
    build = tmp_path_factory.mktemp("build")
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    return build


def start_run(build: Path, logs: Path) -> subprocess.Popen:
    """The harness in its own process group, as a shell starts a foreground job; its output goes to a file."""
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    with open(logs.parent / "harness.out", "w") as out:
        return subprocess.Popen([sys.executable, "-m", "code.main", *LONG_SERVER_TEST, f"--log_dir={logs}"],
                                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0)


def wait_for(condition, timeout_s: float, what: str) -> float:
    """Poll until ``condition()`` holds; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.1)
    return time.monotonic() - start


def start_and_wait_for_loadgen(build: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """Start the long test and return once LoadGen runs in exactly one test process."""
    logs = tmp_path / "logs"
    harness = start_run(build, logs)
    output = tmp_path / "harness.out"
    wait_for(lambda: "starting LoadGen" in output.read_text() or harness.poll() is not None, 240, "LoadGen start")
    assert harness.poll() is None, output.read_text()
    test_dir = logs / "CPU" / "bert-99" / "Server"
    assert len(processes_mentioning(str(test_dir / "test_spec.json"))) == 1
    return harness, test_dir


def test_ctrl_c_stops_the_test_and_marks_it_incomplete(build_dir, tmp_path):
    harness, test_dir = start_and_wait_for_loadgen(build_dir, tmp_path)
    os.killpg(harness.pid, signal.SIGINT)  # what Ctrl-C does: every process of the terminal's foreground group
    assert harness.wait(timeout=10) == 128 + signal.SIGINT
    assert not processes_mentioning(str(test_dir))
    output = (tmp_path / "harness.out").read_text()
    stopped = [line for line in output.splitlines() if line.startswith("[run_harness] interrupted by SIGINT")]
    assert stopped == [f"[run_harness] interrupted by SIGINT: stopped bert-99 Server PerformanceOnly and its "
                       f"processes; {test_dir} is marked incomplete"], output
    assert "Traceback" not in output
    result = json.loads((test_dir / "metadata.json").read_text())["result"]
    assert result["complete"] is False and result["valid"] is None
    assert result["invalid_reasons"][0].startswith("interrupted by SIGINT after")
    summary = (test_dir.parents[2] / "summary.txt").read_text()
    assert "Server        PerformanceOnly  INCOMPLETE: interrupted by SIGINT" in summary
    assert "Exit status 130: interrupted by SIGINT" in summary
    assert json.loads((test_dir.parents[2] / "summary.json").read_text())[0]["complete"] is False


def test_sigterm_to_the_parent_alone_stops_the_test(build_dir, tmp_path):
    harness, test_dir = start_and_wait_for_loadgen(build_dir, tmp_path)
    harness.send_signal(signal.SIGTERM)  # a timeout or a job scheduler signals the harness only
    assert harness.wait(timeout=10) == 128 + signal.SIGTERM
    assert not processes_mentioning(str(test_dir))
    result = json.loads((test_dir / "metadata.json").read_text())["result"]
    assert result["complete"] is False and "interrupted by SIGTERM" in result["invalid_reasons"][0]


def test_a_killed_parent_leaves_no_test_running(build_dir, tmp_path):
    harness, test_dir = start_and_wait_for_loadgen(build_dir, tmp_path)
    harness.kill()  # SIGKILL: the parent can clean up nothing; the kernel's parent-death signal ends the child
    harness.wait()
    wait_for(lambda: not processes_mentioning(str(test_dir)), 5, "the test process ending")
    result = json.loads((test_dir / "metadata.json").read_text())["result"]
    assert result["complete"] is False and result["invalid_reasons"][0].startswith("the test has not finished")


def test_a_killed_test_process_is_named_by_its_signal_and_incomplete(build_dir, tmp_path):
    """The out-of-memory killer (or kill -9) ends the test process alone: the harness goes on, and the test says
    which signal ended it and that it is INCOMPLETE, never a bare exit status beside ``complete: true``."""
    harness, test_dir = start_and_wait_for_loadgen(build_dir, tmp_path)
    (pid,) = processes_mentioning(str(test_dir / "test_spec.json"))
    os.kill(pid, signal.SIGKILL)
    assert harness.wait(timeout=60) == 1
    output = (tmp_path / "harness.out").read_text()
    assert "Traceback" not in output and "(exit -9)" not in output
    result = json.loads((test_dir / "metadata.json").read_text())["result"]
    assert result["complete"] is False and result["valid"] is None
    assert result["invalid_reasons"][-1] == (
        "the test process was killed by SIGKILL (the out-of-memory killer, or kill -9); its LoadGen logs are "
        f"partial; see {test_dir / 'stdout.txt'}")
    summary = (test_dir.parents[2] / "summary.txt").read_text()
    assert "Server        PerformanceOnly  INCOMPLETE: the test process was killed by SIGKILL" in summary


def test_a_program_that_cannot_be_run_is_named_not_called_unwritable(tmp_path):
    """exec's EACCES (a file without execute permission, or a folder on its path this user may not enter) means
    the program cannot be run; it once read "cannot write <the venv's python>"."""
    from code.common.supervision import StartError, start_child, start_in_own_group

    program = tmp_path / "python3"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o644)  # no execute bit: refused even to root
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(program)
    for start in (start_in_own_group, start_child):
        with pytest.raises(StartError) as refused:
            start([str(link), "-m", "code.processes.run_single_test"])
        assert str(refused.value) == (
            f"cannot run {link}, which leads to {program} (Permission denied): this user (uid {os.getuid()}) may "
            "not execute it, or not enter a folder on its path; run as the user who set up the environment, or give "
            "this user read and execute access there (chmod o+rx)")
    with pytest.raises(StartError, match=f"cannot run {tmp_path / 'gone'} \\(No such file or directory\\); run make "
                                         "setup"):
        start_in_own_group([str(tmp_path / "gone")])
