"""``make clean_logs`` beside a run: it deletes the folders of finished (or killed) runs and keeps a live run's,
saying so, so the run goes on writing its logs."""

from __future__ import annotations

import os
import subprocess
import sys

from code.common.paths import REPO_ROOT

# A run as far as its log folder goes: it creates its run root the way every run does, says where, and waits.
RUN = """
import sys
from code.mlperf.run_logs import new_run_root
print(new_run_root(), flush=True)
sys.stdin.read()
"""


def clean_logs(build) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "clean_logs", f"BUILD_DIR={build}", f"PY={sys.executable}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_clean_logs_keeps_a_live_run_and_deletes_the_others(tmp_path):
    build = tmp_path / "build"
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build)}
    finished = subprocess.run([sys.executable, "-c", RUN], cwd=REPO_ROOT, env=env, input="", capture_output=True,
                              text=True, timeout=120).stdout.strip()
    (build / "logs" / "2026.01.01-00.00.00").mkdir()  # a run of a harness that marked no folder live
    live = subprocess.Popen([sys.executable, "-c", RUN], cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout is not None
        live_root = live.stdout.readline().strip()
        (build / "logs" / live_root.rsplit("/", 1)[-1] / "stdout.txt").write_text("a run's log\n")
        done = clean_logs(build)
    finally:
        live.communicate("", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (build / "logs").iterdir()) == [live_root.rsplit("/", 1)[-1]]
    assert (build / "logs" / live_root.rsplit("/", 1)[-1] / "stdout.txt").read_text() == "a run's log\n"
    assert f"kept {live_root} (a run is writing it" in done.stdout
    assert f"deleted 2 run folders in {build / 'logs'}" in done.stdout, done.stdout
    assert f"kept {finished} " not in done.stdout  # an ended run holds no lock
    again = clean_logs(build)  # the run has ended: now its folder goes too
    assert not (build / "logs").exists(), again.stdout
    assert f"[clean_logs] deleted {build / 'logs'} (1 run folder)" in again.stdout


def test_clean_logs_without_logs_says_so(tmp_path):
    done = clean_logs(tmp_path / "build")
    assert done.returncode == 0 and "nothing to delete" in done.stdout, done.stdout + done.stderr
