"""Live progress: the line per scenario, the reporter thread, the parent's redraw on a terminal, and a real run
whose transcript holds the lines and whose folder holds the core's per-sample times and the run report."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from code.common.paths import LIB_DIR, REPO_ROOT
from code.harness.core import SAMPLE_TIMES_FILE, SampleTimes
from code.harness.progress import (
    PREFIX,
    PROGRESS_TTY_ENV,
    ProgressReporter,
    ProgressScreen,
    ProgressShape,
    format_duration,
    min_duration_s,
    progress_line,
)


def test_offline_line_has_bar_share_rate_and_eta() -> None:
    line = progress_line({"issued": 1000, "completed": 250, "late": 0, "elapsed_s": 50.0},
                         ProgressShape("Offline", 600.0))
    assert line.startswith(PREFIX + "Offline")
    assert "[######..................]" in line and " 25% 250/1,000 samples" in line
    assert "5.0 samples/s" in line and "elapsed 50s" in line
    assert "ETA 2m30s" in line  # 750 left at 5 samples/s


def test_server_line_counts_late_samples_and_minimum_duration_left() -> None:
    shape = ProgressShape("Server", 600.0, latency_bound_s=0.13)
    line = progress_line({"issued": 130, "completed": 120, "late": 3, "elapsed_s": 60.0}, shape)
    assert "120 samples done, 10 in flight" in line and "2.0 samples/s" in line
    assert "min duration left 9m00s" in line and "3 late (> 0.13 s)" in line
    done = progress_line({"issued": 5000, "completed": 5000, "late": 0, "elapsed_s": 700.0}, shape)
    assert "min duration met" in done


def test_nothing_done_yet_has_no_eta_and_no_division_by_zero() -> None:
    line = progress_line({"issued": 0, "completed": 0, "late": 0, "elapsed_s": 0.0}, ProgressShape("Offline", 1.0))
    assert "0.0 samples/s" in line and "ETA" not in line


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.6, "1m00s"), (61, "1m01s"), (3725, "1h02m")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_min_duration_from_user_conf(tmp_path: Path) -> None:
    conf = tmp_path / "user.conf"
    conf.write_text("bert.Offline.target_qps = 10\n*.Server.min_duration = 2500\n")
    assert min_duration_s(conf, "Server") == 2.5
    assert min_duration_s(conf, "Offline") == 600.0  # mlperf.conf's when user.conf says nothing


def test_reporter_prints_every_period_and_stops_with_the_block() -> None:
    out = io.StringIO()
    counters = {"issued": 10, "completed": 0, "late": 0, "elapsed_s": 0.0}

    def read() -> dict[str, float]:
        counters["completed"] = min(10, counters["completed"] + 2)
        counters["elapsed_s"] += 0.05
        return dict(counters)

    with ProgressReporter(read, ProgressShape("Offline", 1.0), period_s=0.02, out=out):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith(PREFIX) for line in lines)
    count = len(lines)
    time.sleep(0.1)
    assert len(out.getvalue().splitlines()) == count  # nothing after the block ended
    assert not any(thread.name == "progress" for thread in threading.enumerate())


def test_reporter_says_why_it_stopped_when_the_counters_fail() -> None:
    out = io.StringIO()

    def read() -> dict[str, float]:
        raise RuntimeError("core gone")

    with ProgressReporter(read, ProgressShape("Offline", 1.0), period_s=0.01, out=out):
        time.sleep(0.1)
    assert out.getvalue().strip() == f"{PREFIX}stopped: RuntimeError: core gone"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_screen_redraws_progress_in_place_on_a_terminal_only() -> None:
    terminal = _Terminal()
    screen = ProgressScreen(terminal)
    for line in (f"{PREFIX}a\n", f"{PREFIX}b\n", "done\n"):
        screen.write(line)
    assert terminal.getvalue() == f"\r\033[K{PREFIX}a\r\033[K{PREFIX}b\ndone\n"
    pipe = io.StringIO()
    plain = ProgressScreen(pipe)
    for line in (f"{PREFIX}a\n", "done\n"):
        plain.write(line)
    plain.done()
    assert not plain.redraws and pipe.getvalue() == f"{PREFIX}a\ndone\n"


@pytest.mark.slow
def test_a_run_prints_progress_and_keeps_sample_times(tmp_path: Path, harness_built: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1", PROGRESS_TTY_ENV: "1"}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run", "--benchmarks=bert",
                           "--scenarios=offline", "--model_name=tiny", "--precision=fp32", "--device=cpu",
                           "--synthetic_sample_count=64", "--test_run", "--min_duration=5000",
                           "--offline_expected_qps=2000"],  # 11,000 samples: several seconds anywhere
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    folder = next((build / "logs").glob("*/*/bert-99/Offline"))
    transcript = (folder / "stdout.txt").read_text()
    lines = [line for line in transcript.splitlines() if line.startswith(PREFIX)]
    assert lines, done.stdout[-2000:]
    assert all("Offline, [" in line and "samples/s" in line for line in lines)
    # The core's record holds every sample of LoadGen's one Offline query, each completed after it was issued.
    times = SampleTimes.load(folder / SAMPLE_TIMES_FILE)
    detail = (folder / "mlperf_log_detail.txt").read_text()
    query = int(re.search(r'"key": "generated_samples_per_query", "value": (\d+)', detail).group(1))
    assert len(times.index) == query
    assert (times.completed_s >= times.issued_s).all() and np.isin(times.index, np.arange(64)).all()
    # Each test draws its report beside its logs, and the run gets one page.
    assert all((folder / name).is_file() for name in ("report.md", "latency.png", "timeline.png"))
    run_root = folder.parents[2]
    assert (run_root / "report.md").is_file() and f"report: {run_root / 'report.md'}" in done.stdout
