"""Run reports: the figures from a made-up per-sample record, report.md beside a test, the run page, bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from code.common.paths import REPO_ROOT
from code.harness.core import SAMPLE_TIMES_FILE, SampleTimes
from code.report.__main__ import main
from code.report.figures import (
    MAX_POINTS,
    batch_sizes,
    bin_count,
    draw_latency,
    draw_timeline,
    marker_size,
    sample_stats,
    thinned,
)
from code.report.pages import LATENCY_PNG, REPORT_FILE, TIMELINE_PNG, ReportError, write_run_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def made_up_times(batches: list[int], step_s: float = 0.01) -> SampleTimes:
    """Offline-like: every sample issued at 0, batch k completing at (k + 1) x step_s."""
    completed = np.concatenate([np.full(size, (k + 1) * step_s) for k, size in enumerate(batches)])
    count = len(completed)
    return SampleTimes(index=np.arange(count), issued_s=np.zeros(count), completed_s=completed,
                       length=np.arange(count)[::-1] + 10)


def made_up_test(folder: Path, scenario: str, times: SampleTimes, valid: bool = True) -> Path:
    folder.mkdir(parents=True)
    result = {"scenario": scenario, "mode": "PerformanceOnly", "metric": "samples_per_second", "value": 123.4,
              "unit": "samples/s", "valid": valid, "verdict": "VALID" if valid else "INVALID",
              "invalid_reasons": [] if valid else ["latency constraint not met"], "not_submittable": ["synthetic"]}
    (folder / "metadata.json").write_text(json.dumps({
        "result": result, "config": {"benchmark": "bert-99"}, "system_name": "CPU", "round": "v5.0",
        "loadgen_version": "5.0.21", "provenance": {"model": "BERT-tiny", "inputs": "synthetic"}}))
    (folder / "mlperf_log_detail.txt").write_text(
        ':::MLLOG {"key": "result_99.00_percentile_latency_ns", "value": 1000000}\n'
        ':::MLLOG {"key": "result_query_count", "value": 1}\n')
    times.save(folder / SAMPLE_TIMES_FILE)
    return folder


def test_batches_and_stats_come_from_shared_completion_times() -> None:
    times = made_up_times([8, 8, 3])
    assert batch_sizes(times).tolist() == [8, 8, 3]
    stats = sample_stats(times)
    assert (stats.samples, stats.batches) == (19, 3)
    assert stats.mean_batch == pytest.approx(19 / 3)
    assert stats.duration_s == pytest.approx(0.03) and stats.samples_per_s == pytest.approx(19 / 0.03)
    assert stats.percentiles_ms[50.0] == pytest.approx(20.0)  # the middle sample finished with the second batch
    assert stats.mean_ms == pytest.approx((8 * 10 + 8 * 20 + 3 * 30) / 19)


def test_sample_times_round_trip_keeps_lengths(tmp_path: Path) -> None:
    times = made_up_times([2, 2])
    times.save(tmp_path / "t.npz")
    loaded = SampleTimes.load(tmp_path / "t.npz")
    assert loaded.length is not None and loaded.length.tolist() == times.length.tolist()
    with_lengths = SampleTimes(np.array([2, 0]), np.zeros(2), np.ones(2)).with_lengths(np.array([5, 6, 7]))
    assert with_lengths.length.tolist() == [7, 5]


def test_test_report_and_run_page(tmp_path: Path) -> None:
    root = tmp_path / "run"
    offline = made_up_test(root / "CPU" / "bert-99" / "Offline", "Offline", made_up_times([8, 8, 3]))
    server = made_up_test(root / "CPU" / "bert-99" / "Server", "Server", made_up_times([1] * 20), valid=False)
    page = write_run_report(root)
    for folder in (offline, server):
        for image in (LATENCY_PNG, TIMELINE_PNG):
            assert (folder / image).read_bytes()[:8] == PNG_MAGIC
    text = (offline / REPORT_FILE).read_text()
    assert "- verdict: **VALID**" in text and "samples_per_second = 123.4 samples/s" in text
    assert "| samples | 19 | 1 queries |" in text and "| p99 latency | 30.00 ms | 1.00 ms |" in text
    assert "| batches (completion calls) | 3, mean 6.3 samples | |" in text
    server_text = (server / REPORT_FILE).read_text()
    assert "**INVALID** (latency constraint not met)" in server_text and "| latency bound | 130 ms | |" in server_text
    run = page.read_text()
    assert "[CPU bert-99 Offline PerformanceOnly](CPU/bert-99/Offline/report.md) | VALID" in run
    assert "![latency.png](CPU/bert-99/Server/latency.png)" in run


def test_a_run_from_before_the_record_still_gets_a_report(tmp_path: Path) -> None:
    folder = made_up_test(tmp_path / "run" / "CPU" / "bert-99" / "Offline", "Offline", made_up_times([1]))
    (folder / SAMPLE_TIMES_FILE).unlink()
    write_run_report(tmp_path / "run")
    assert f"No {SAMPLE_TIMES_FILE} in this folder" in (folder / REPORT_FILE).read_text()
    assert not (folder / LATENCY_PNG).exists()


def test_bad_folders_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ReportError, match="not a folder; give a run's log folder"):
        write_run_report(tmp_path / "missing")
    assert main([str(tmp_path)]) == 2
    assert "no test folder under" in capsys.readouterr().err


def test_the_run_page_lists_probes_and_tries_as_steps_not_as_tests(tmp_path: Path) -> None:
    """A --test_run's probes and find_performance's tries are steps that led to the run's tests: the page shows them
    in a table of their own, after the tests and their plots."""
    root = tmp_path / "run"
    made_up_test(root / "CPU" / "bert-99" / "Offline", "Offline", made_up_times([8, 8]))
    for step in ("probes/CPU/bert-99/Offline", "probes/CPU/bert-99/Offline-2", "gate/exact/CPU/bert-99/Offline",
                 "find_performance/CPU/bert-99/Offline/01-probe"):
        made_up_test(root / step, "Offline", made_up_times([8]))
    tests, steps = write_run_report(root).read_text().split("\n## Steps\n")
    assert tests.count("PerformanceOnly](") == 1 and "probes" not in tests and "find_performance" not in tests
    assert "| [CPU bert-99 Offline PerformanceOnly](CPU/bert-99/Offline/report.md) | VALID |" in tests
    assert steps.startswith("\nSteps that led to the tests, not results of the run: a --test_run's probes")
    assert [line.split("]")[0] for line in steps.splitlines() if line.startswith("| [")] == [
        "| [find_performance/CPU/bert-99/Offline/01-probe", "| [gate/exact/CPU/bert-99/Offline",
        "| [probes/CPU/bert-99/Offline", "| [probes/CPU/bert-99/Offline-2"]
    assert (root / "probes/CPU/bert-99/Offline-2" / REPORT_FILE).is_file()  # each step's own report still written

    tries = tmp_path / "find"  # a find_performance run: steps only
    made_up_test(tries / "find_performance/CPU/bert-99/Offline/01-probe", "Offline", made_up_times([8]))
    assert "No test of the run itself: only the steps below." in write_run_report(tries).read_text()


def make_report(*variables: str, build: Path) -> subprocess.CompletedProcess[str]:
    """`make report ...` for real, reading runs of ``build``."""
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), "report", *variables],
                          capture_output=True, text=True, env={**os.environ, "MLPERF_BUILD_DIR": str(build)},
                          timeout=300)


def test_make_report_takes_a_folder_with_spaces_and_names_the_first_run_when_there_is_none(tmp_path: Path) -> None:
    root = tmp_path / "a run with spaces"
    made_up_test(root / "CPU" / "bert-99" / "Offline", "Offline", made_up_times([8]))
    done = make_report(f"LOG_DIR={root}", build=tmp_path / "build")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(root / REPORT_FILE) and (root / REPORT_FILE).is_file()

    none = make_report(build=tmp_path / "build")  # no build/logs at all
    assert none.returncode == 2
    assert none.stderr.splitlines()[0] == (
        f"ERROR: no run in {tmp_path / 'build' / 'logs'} yet: run one first, e.g. make run RUN_ARGS=\"--benchmarks="
        "bert --scenarios=offline --test_run\", or give a run's folder: make report LOG_DIR=<folder>")

    newest = tmp_path / "build" / "logs" / "2026.11.24-10.00.00"  # without LOG_DIR: the newest run
    made_up_test(newest / "CPU" / "bert-99" / "Offline", "Offline", made_up_times([8]))
    (tmp_path / "build" / "logs" / "2026.11.23-10.00.00").mkdir()
    done = make_report(build=tmp_path / "build")
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == str(newest / REPORT_FILE), done.stderr


def drawn_figure(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the report draws, captured as each is saved: [(patches per axis, points per axis)]."""
    import matplotlib.figure

    drawn = []
    save = matplotlib.figure.Figure.savefig

    def record(figure, *args, **kwargs):  # noqa: ANN001, ANN202
        drawn.append([(len(axis.patches), sum(len(c.get_offsets()) for c in axis.collections)
                       + sum(len(line.get_xdata()) for line in axis.lines if len(line.get_xdata()) > 2))
                      for axis in figure.axes])
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return drawn


def test_a_run_of_a_few_samples_gets_a_few_wide_bars_and_visible_points(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert (bin_count(3, 60), bin_count(40, 60), bin_count(10**6, 60)) == (1, 10, 60)
    assert marker_size(4) > marker_size(MAX_POINTS)
    drawn = drawn_figure(monkeypatch)
    times = made_up_times([2, 1, 1])
    draw_timeline(times, "Offline", None, "t", tmp_path / "timeline.png")
    draw_latency(times, sample_stats(times), None, "t", tmp_path / "latency.png")
    (rate, scatter, sizes, lengths), (hist, cdf) = drawn
    assert rate == (1, 0) and scatter[1] == 4 and lengths[1] == 4  # one bar of 4 samples, every sample a point
    assert sizes[0] == 2  # batches of 1 and of 2 samples: a bar each
    assert hist[0] == 1 and cdf[1] == 4


def test_a_long_run_draws_a_bounded_number_of_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = thinned(10 * MAX_POINTS + 7)
    assert len(kept) <= MAX_POINTS and kept[0] == 0 and kept[-1] == 10 * MAX_POINTS + 6
    drawn = drawn_figure(monkeypatch)
    times = made_up_times([64] * (3 * MAX_POINTS // 64))
    draw_timeline(times, "Offline", 130.0, "t", tmp_path / "timeline.png")
    draw_latency(times, sample_stats(times), 130.0, "t", tmp_path / "latency.png")
    (rate, scatter, _, lengths), (hist, cdf) = drawn
    assert rate[0] == 60 and hist[0] == 60
    assert 0 < scatter[1] <= MAX_POINTS and 0 < lengths[1] <= MAX_POINTS and 0 < cdf[1] <= MAX_POINTS
