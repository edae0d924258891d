"""The results of every run at a glance (``make results``): the newest result per system, benchmark, scenario, GPU
count, test and model, as a table and a CSV file (the command: code/report/make_results.py).

A result is what a finished test recorded in its ``metadata.json``, with its caveats (``RunRecord.caveats``) and its
figure beside the best published one per GPU (code/mlperf/beside_published.py). Only a run's own tests count, never the
steps that led to them (``run_test_parts``). A test is dated by when it started (its ``test_spec.json``). The logs are
only read.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from code.common import atomic
from code.common.constants import TestMode
from code.common.system_description import shown as shown_path  # a folder as the tables show it
from code.mlperf.beside_published import Beside, beside_published
from code.submission.runs import TestRun, find_tests, run_folders

RESULTS_CSV = "results.csv"
CSV_COLUMNS = ("system", "benchmark", "scenario", "gpus", "test", "metric", "figure", "unit", "samples_per_joule",
               "verdict", "date", "log_folder", "model", "caveats", "published_per_gpu", "published_ratio",
               "published_by", "published_source")


class ResultsError(RuntimeError):
    """Folders that hold no result to show or compare; the message names the fix."""


@dataclass(frozen=True)
class Result:

    system: str
    benchmark: str
    scenario: str
    gpus: int  # GPUs the test ran on; 0 on a CPU
    test: str  # performance | accuracy
    metric: str  # samples_per_second, 90th_percentile_latency, f1, rouge1...
    figure: float | None
    unit: str
    verdict: str
    started: float  # seconds since the epoch
    folder: Path
    samples_per_joule: float | None = None  # a performance test whose GPU power was read (code/mlperf/power.py)
    model: str = "?"  # the model the figure is from: BERT-large, BERT-tiny (RunRecord.model_label)
    caveats: tuple[str, ...] = ()  # synthetic, small model, shortened, stand-in for <GPU> (RunRecord.caveats)
    published: Beside | None = None  # the figure beside the best published one per GPU

    @property
    def key(self) -> tuple[str, str, str, int, str, str]:
        """What "the same result" means across runs: a newer test with this key replaces an older one. The model is
        part of it: a quick run of a small model does not hide the last figure of the MLPerf model."""
        return self.system, self.benchmark, self.scenario, self.gpus, self.test, self.model


def run_results(run_folder: Path) -> dict[tuple[str, str, str, int, str, str], Result]:
    """The newest finished test per key of one run folder (none of its probes, tries or set-aside engines)."""
    return newest(map(_result, find_tests([run_folder]).tests))


def newest(results: Iterable[Result]) -> dict[tuple[str, str, str, int, str, str], Result]:
    return {result.key: result for result in sorted(results, key=lambda r: (r.started, str(r.folder)))}


@dataclass
class Newest:
    """The newest result per key, and the tests that gave none (a newer test may hide behind an unreadable one)."""

    results: list[Result]
    unfinished: int
    unreadable: dict[Path, str]


def newest_results(logs_dir: Path) -> Newest:
    """The newest finished test per key under ``logs_dir``, sorted by key; and those that gave none."""
    found = find_tests(run_folders(logs_dir))
    chosen = newest(map(_result, found.tests))
    return Newest([chosen[key] for key in sorted(chosen)], len(found.unfinished), found.unreadable)


def _result(test: TestRun) -> Result:
    record = test.record.result_dict
    value = record.get("value")
    return Result(system=test.system, benchmark=test.benchmark, scenario=test.scenario, gpus=test.record.gpu_count,
                  test="accuracy" if test.mode is TestMode.AccuracyOnly else "performance",
                  metric=str(record.get("metric") or ""), figure=None if value is None else float(value),
                  unit=str(record.get("unit") or ""), verdict=test.verdict, started=started(test.directory),
                  folder=test.directory, samples_per_joule=(test.record.power or {}).get("samples_per_joule"),
                  model=test.record.model_label, caveats=tuple(test.record.caveats),
                  published=beside_published(test.record))


def started(folder: Path) -> float:
    """When the test started (its test_spec.json), else when its metadata.json was written."""
    try:
        return float(json.loads((folder / "test_spec.json").read_text())["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return (folder / "metadata.json").stat().st_mtime


def format_figure(value: float | None) -> str:
    """Six significant digits with thousands separators: 73,309.5 samples/s, 0.0312 samples/s, 90.8741 F1."""
    return "-" if value is None else f"{value:,.6g}"


def format_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], right: set[int]) -> str:
    """Columns padded to their widest cell, those in ``right`` (numbers) aligned right."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.rjust(width) if index in right else cell.ljust(width)
                         for index, (cell, width) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(tuple("-" * width for width in widths)), *map(line, rows)])


def results_table(results: list[Result]) -> str:
    """The table; with a samples/J column only when a result has one (a table of CPU runs has none), the caveats and
    the figure beside the best published one per GPU."""
    joules = any(r.samples_per_joule is not None for r in results)
    headers = ("system", "benchmark", "model", "scenario", "GPUs", "test", "metric", "figure", "unit",
               *(("samples/J",) if joules else ()), "caveats", "vs best published", "verdict", "date", "log folder")
    rows = [(r.system, r.benchmark, r.model, r.scenario, str(r.gpus), r.test, r.metric, format_figure(r.figure),
             r.unit, *((format_figure(r.samples_per_joule),) if joules else ()), ", ".join(r.caveats) or "-",
             r.published.cell() if r.published else "-", r.verdict,
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)), shown_path(r.folder)) for r in results]
    return format_table(headers, rows, right={4, 7, 9} if joules else {4, 7})


def results_csv(results: list[Result]) -> str:
    """The table as CSV: figures in full, dates in ISO 8601, log folders absolute."""
    return csv_text(CSV_COLUMNS, [
        (r.system, r.benchmark, r.scenario, r.gpus, r.test, r.metric, "" if r.figure is None else r.figure, r.unit,
         "" if r.samples_per_joule is None else r.samples_per_joule, r.verdict,
         time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(r.started)), r.folder.resolve(), r.model,
         "; ".join(r.caveats),
         *(("", "", "", "") if r.published is None else
           (r.published.best.per_gpu, "" if r.published.not_comparable else round(r.published.ratio, 4),
            r.published.best.describe(), r.published.best.source_url))) for r in results])


def csv_text(columns: tuple[str, ...], rows: Iterable[Iterable[object]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([columns, *rows])
    return buffer.getvalue()


def write_results(logs_dir: Path, csv_path: Path) -> str:
    """Write the CSV of the newest results (a header alone for none); return what the terminal shows."""
    found = newest_results(logs_dir)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(csv_path, results_csv(found.results))
    lines = [results_table(found.results) if found.results else f"no finished test under {logs_dir}: run one first, "
             'e.g. make run RUN_ARGS="--benchmarks=bert --scenarios=offline --test_run"']
    if found.unfinished:
        lines.append(f"not shown: {found.unfinished} test(s) that did not finish (FAILED or stopped: no figure; "
                     "each run's summary.txt says why)")
    if found.unreadable:
        lines.append(f"not shown: {len(found.unreadable)} test(s) whose metadata.json cannot be read (cut short "
                     "or edited; a row above may be older than such a test):")
        lines += [f"  {shown_path(folder)}: {why}" for folder, why in found.unreadable.items()]
    return "\n".join([*lines, f"CSV: {csv_path}"])
