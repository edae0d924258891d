"""Run log folders, LoadGen result parsing and metadata.json.

``build/logs/<timestamp>/<system>/<bench-99|bench-99.9>/<Scenario>/`` holds one test's LoadGen logs, ``metadata.json``
and, for accuracy runs, ``accuracy.txt``; a SubmissionRun puts its two tests in ``accuracy/`` and ``performance/run_1/``
below it, the layout of an MLPerf submission. Folders are created exclusively: a run never writes into an earlier run's.
metadata.json is written marked incomplete before the test starts, so a folder whose test was stopped or killed says so.

"""

from __future__ import annotations

import errno
import json
import os
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.benchmark_errors import BenchmarkError
from code.common.constants import Scenario, TestMode
from code.common.file_lock import hold_for_life
from code.common.paths import LIVE_RUN_LOCK, LOGS_DIR


class LogDirError(RuntimeError):
    """A log folder that would mix two runs; the message names the fix."""


def new_run_root(log_dir: str | None = None) -> Path:
    """A fresh folder for this invocation: build/logs/<timestamp>[-N], or --log_dir if it is new or empty. This
    process holds its ``LIVE_RUN_LOCK`` while it lives, so ``make clean_logs`` leaves the folder alone meanwhile."""
    root = Path(log_dir) if log_dir else new_timestamped_dir(LOGS_DIR)
    if log_dir:
        fix = "choose a new folder or leave --log_dir out to get build/logs/<timestamp>"
        if root.exists() and not root.is_dir():
            raise LogDirError(f"--log_dir={log_dir} is a file, not a folder; {fix}")
        if root.exists() and any(root.iterdir()):
            raise LogDirError(f"--log_dir={log_dir} already holds files from an earlier run; {fix}")
        root.mkdir(parents=True, exist_ok=True)
    hold_for_life(root / LIVE_RUN_LOCK)
    return root


def new_timestamped_dir(parent: Path, prefix: str = "") -> Path:
    """A folder ``<parent>/<prefix><timestamp>[-N]`` that did not exist before (created here, never reused)."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = prefix + time.strftime("%Y.%m.%d-%H.%M.%S")
    for attempt in range(1000):
        folder = parent / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        with suppress(FileExistsError):
            folder.mkdir()
            return folder
    raise LogDirError(f"could not create a new folder under {parent}")


def make_test_log_dir(root: Path, system: str, benchmark_name: str, scenario: Scenario, mode: TestMode,
                      submission_layout: bool) -> Path:
    directory = root / system / benchmark_name / scenario.value
    if submission_layout:
        directory = directory / ("accuracy" if mode is TestMode.AccuracyOnly else "performance/run_1")
    try:
        directory.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise LogDirError(f"{directory} exists already; refusing to overwrite an earlier run") from None
    return directory


# The parts of a test folder's path inside its run folder: system, benchmark, scenario.
TEST_DEPTH = 3


def run_test_parts(directory: Path, run_folder: Path) -> tuple[str, str, str] | None:
    """(system, benchmark, scenario) of a test of the run itself (``accuracy/`` or ``performance/run_1/`` below it
    for a SubmissionRun); None for a step that led to one, under a folder of its own (``probes/``,
    ``find_performance/``, ``gate/<engine>/``): staging, reports and ``make results`` all tell steps apart by this
    rule."""
    parts = Path(directory).relative_to(run_folder).parts
    if parts[-1:] == ("accuracy",):
        parts = parts[:-1]
    elif parts[-2:] == ("performance", "run_1"):
        parts = parts[:-2]
    return (parts[0], parts[1], parts[2]) if len(parts) == TEST_DEPTH else None


class IncompleteLogError(BenchmarkError):
    """A LoadGen log is cut short though the disk has room (a quota, a file system error)."""


# How LoadGen ends each log it finished writing: summary and detail end their last line, the accuracy log closes
# its JSON array (``[]`` in a performance run), whitespace after it aside.
LOADGEN_LOGS_END_WITH = {"mlperf_log_summary.txt": (b"\n", False), "mlperf_log_detail.txt": (b"\n", False),
                         "mlperf_log_accuracy.json": (b"]", True)}
# Below this much free space, a cut-short log is put down to a full disk.
NEARLY_FULL_BYTES = 1 << 20


def check_loadgen_logs(directory: Path) -> None:
    """Raise unless LoadGen's logs in ``directory`` are whole: its logger drops what it cannot write without a word,
    so a full disk leaves cut-short logs behind a test that looks finished. A full disk raises ``OSError`` (ENOSPC)
    naming the first bad log, as the operating system would; anything else ``IncompleteLogError``."""
    for name, (ending, strip) in LOADGEN_LOGS_END_WITH.items():
        path = directory / name
        try:
            with path.open("rb") as file:
                file.seek(max(0, path.stat().st_size - 64))
                tail = file.read()
        except OSError:
            tail = b""
        if (tail.rstrip() if strip else tail).endswith(ending):
            continue
        free = os.statvfs(directory)
        if free.f_bavail * free.f_frsize < NEARLY_FULL_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        raise IncompleteLogError(f"{path} is missing or cut short: LoadGen could not write all of it (a disk quota "
                                 "or a file system error); free space or fix the folder, then run again")


def read_detail_log(directory: Path) -> dict[str, Any]:
    """The ``:::MLLOG`` key/value pairs of mlperf_log_detail.txt (later values win), plus the error keys."""
    path = directory / "mlperf_log_detail.txt"
    values: dict[str, Any] = {}
    errors: list[str] = []
    if not path.exists():
        return values
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith(":::MLLOG"):
            continue
        try:
            record = json.loads(line[len(":::MLLOG"):])
        except json.JSONDecodeError:
            continue
        key = record.get("key", "")
        values[key] = record.get("value")
        if key.startswith("error") or record.get("metadata", {}).get("is_error"):
            errors.append(f"{key}: {record.get('value')}")
    values["_errors"] = errors
    return values


# The main metric of each scenario: (detail-log key, display name, unit, scale applied to the raw value).
METRICS = {
    Scenario.Offline: ("result_samples_per_second", "samples_per_second", "samples/s", 1.0),
    Scenario.Server: ("result_scheduled_samples_per_sec", "scheduled_samples_per_second", "samples/s", 1.0),
    Scenario.SingleStream: ("early_stopping_latency_ss", "90th_percentile_latency", "ms", 1e-6),
}

# SingleStream's metric where LoadGen times tokens (llama3.1-8b): ``early_stopping_latency_ss`` is then the
# early-stopping estimate of the 90th percentile time to first token, the figure the checker reads.
FIRST_TOKEN_METRIC = "90th_percentile_first_token_latency"

# LLMs' token throughput (GPT-J's LoadGen infers its tokens from a fixed factor); the checker reads it since v4.1.
TOKEN_METRICS = {
    Scenario.Offline: "result_inferred_tokens_per_second",
    Scenario.Server: "result_inferred_completed_tokens_per_second",
}


# LoadGen's checks of a performance test, and the reason each gives when it is False.
PERFORMANCE_CHECKS = {
    "result_min_duration_met": "min duration not met",
    "result_min_queries_met": "min queries not met",
    "early_stopping_met": "early stopping not met",
    "result_perf_constraints_met": "latency constraint not met",
}
# The detail log's figures metadata.json keeps beside the main metric.
EXTRA_KEYS = ("result_99.00_percentile_latency_ns", "result_90.00_percentile_latency_ns", "result_mean_latency_ns",
              "result_qps_with_loadgen_overhead", "result_completed_samples_per_sec", *TOKEN_METRICS.values())


@dataclass
class TestResult:
    """What one LoadGen test produced, as the summary and metadata.json report it."""

    __test__ = False  # not a pytest test class despite its name

    scenario: str
    mode: str
    log_dir: str
    metric: str | None = None
    value: float | None = None
    unit: str | None = None
    valid: bool | None = None  # performance: LoadGen's VALID; accuracy: PASS; None: the test did not finish
    complete: bool = True  # False: the test was stopped (or is still running); its LoadGen logs are partial
    invalid_reasons: list[str] = field(default_factory=list)  # why INVALID, FAIL or not finished
    not_submittable: list[str] = field(default_factory=list)  # why a VALID or PASS figure could not be submitted
    loadgen_errors: list[str] = field(default_factory=list)
    accuracy: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """INCOMPLETE, FAILED, INVALID, FAIL, VALID or PASS ("but not submittable" when a good figure cannot
        count)."""
        if not self.complete:
            return "INCOMPLETE"
        if self.valid is None:
            return "FAILED"
        if not self.valid:
            return "FAIL" if self.accuracy is not None else "INVALID"
        word = "PASS" if self.accuracy is not None else "VALID"
        return f"{word} but not submittable" if self.not_submittable else word

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TestResult:
        return cls(**{key: value for key, value in record.items() if key != "verdict"})


def performance_result(directory: Path, scenario: Scenario) -> TestResult:
    detail = read_detail_log(directory)
    result = TestResult(scenario.value, TestMode.PerformanceOnly.value, str(directory))
    result.loadgen_errors = detail.get("_errors", [])
    if "result_validity" not in detail:
        result.valid = False
        result.invalid_reasons = ["LoadGen wrote no result (see the run's stdout for the error)"]
        return result
    key, name, unit, scale = METRICS[scenario]
    raw = detail.get(key)
    if raw is None and scenario is Scenario.SingleStream:
        raw = detail.get("result_90.00_percentile_latency_ns")
    if scenario is Scenario.SingleStream and detail.get("requested_use_token_latencies"):
        name = FIRST_TOKEN_METRIC  # with token latencies on, LoadGen's SingleStream estimate is of first tokens
    result.metric, result.unit = name, unit
    result.value = None if raw is None else float(raw) * scale
    result.valid = detail["result_validity"] == "VALID" and not result.loadgen_errors
    result.invalid_reasons = [text for key, text in PERFORMANCE_CHECKS.items() if detail.get(key) is False]
    if detail.get("result_invalid_reason"):
        result.invalid_reasons.append(str(detail["result_invalid_reason"]))
    if result.loadgen_errors:
        result.invalid_reasons.append(f"{len(result.loadgen_errors)} LoadGen error(s) in mlperf_log_detail.txt")
    if detail["result_validity"] != "VALID" and not result.invalid_reasons:
        result.invalid_reasons.append(f"LoadGen: {detail['result_validity']}")
    result.extra = {key: detail[key] for key in EXTRA_KEYS if key in detail}
    tokens_key = TOKEN_METRICS.get(scenario)
    if tokens_key in detail:  # LLMs: LoadGen's (inferred) token throughput, the v4.1+ GPT-J metric
        result.extra["tokens_per_second"] = float(detail[tokens_key])
    return result


def relocate_test(directory: Path, to: Path) -> Path:
    """Move a finished test's folder to ``to`` (new, in the same run folder) and point every path under it that
    metadata.json and test_spec.json name there: the accuracy gate moves a missed accuracy run out of the way."""
    directory, to = Path(directory), Path(to)
    to.parent.mkdir(parents=True, exist_ok=True)
    if to.exists():
        raise LogDirError(f"{to} exists already; refusing to overwrite an earlier run")
    directory.rename(to)

    def moved(value: Any) -> Any:
        if isinstance(value, str) and (value == str(directory) or value.startswith(f"{directory}{os.sep}")):
            return str(to) + value[len(str(directory)):]
        if isinstance(value, dict):
            return {key: moved(item) for key, item in value.items()}
        if isinstance(value, list):
            return [moved(item) for item in value]
        return value

    for name in ("metadata.json", "test_spec.json"):
        path = to / name
        if path.is_file():
            atomic.write_text(path, json.dumps(moved(json.loads(path.read_text())), indent=2, sort_keys=True,
                                               default=str) + "\n")
    return to

