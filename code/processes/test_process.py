"""One LoadGen test in a child process, and the run's summary: what every action that runs tests shares
(run_harness, find_performance, run_audit, the accuracy gate), kept below them so none imports another.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario, TestMode
from code.common.faults import describe
from code.common.log import get_logger
from code.common.paths import REPO_ROOT, harness_lib_dir
from code.common.rounds import RoundError
from code.common.supervision import how_it_ended, start_in_own_group, stop_group, stop_signals_ignored
from code.config.resolve import resolve_config
from code.config.resolved import ResolvedConfig, WorkloadSetting
from code.harness.build import BuildError, build, module_path
from code.harness.progress import PREFIX as PROGRESS_PREFIX
from code.harness.progress import PROGRESS_TTY_ENV, ProgressScreen
from code.mlperf.benchmarks import BenchmarkError
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord, RunRecordError, mark_incomplete, read_record, write_record
from code.mlperf.summary import RanTest, format_summary, write_summary
from code.mlperf.verdicts import round_refusal

log = get_logger("run_harness")


def test_spec(system: str, config: ResolvedConfig, mode: TestMode, overrides: dict, log_dir: Path,
              tuning: str | None = None, probed: dict | None = None) -> dict:
    """What a test's child needs to rebuild its config (test_spec.json). ``tuning``: how the harness set its expected
    rate or latency first, for the summary; ``probed``: the overrides a probe measured (metadata.json's ``probe``)."""
    return {
        **({"tuning": tuning} if tuning else {}), **({"probed": sorted(probed)} if probed else {}),
        "system": system, "benchmark": config.benchmark.value, "benchmark_name": config.benchmark_name,
        "accuracy_target": config.workload.accuracy_target.value, "harness_type": config.workload.harness_type.value,
        "power_setting": config.workload.power_setting.value, "scenario": config.scenario.value, "mode": mode.value,
        "overrides": overrides,
        # The engine ladder's rung the parent chose (the child resolves the same one) and why, for metadata.json.
        "rung": config.rung.name if config.rung else None, "engine": config.engine_choice,
        "log_dir": str(log_dir), "started": time.time(),
    }


def check_round(config: ResolvedConfig) -> None:
    """A SubmissionRun is for a benchmark and scenario its round accepts."""
    if TestMode.parse(config["test_mode"]) is TestMode.SubmissionRun:
        refusal = round_refusal(config)
        if refusal:
            raise RoundError(f"refusing a SubmissionRun that round {config['round']} would not accept: {refusal}")


def require_built_core(round_name: str) -> None:
    """Build the round's C++ core when it is missing, before any test starts: each test of a run that names no round
    loads its own default round's core, which ``make build`` may not have built (``python -m code.main``, or RUN_ARGS
    that changed since). The build holds the round's build lock, as ``make build`` does; a round it cannot build
    here (v4.1 without its clone) stops the run with the build's fix."""
    if module_path(harness_lib_dir(round_name)).is_file():
        return
    log.info("the C++ core of round %s is not built: building it now (make build ROUND=%s)", round_name, round_name)
    try:
        build(round_name)
    except BuildError as error:
        raise BenchmarkError(f"the C++ core of round {round_name} is not built, and building it failed: {error}; "
                             f"fix that, then run `make build ROUND={round_name}`") from None


def finish_run(system: str, root: Path, results: list[RanTest], who: str = "run_harness",
               interrupted_by: tuple[str, int] | None = None, stopped: str | None = None) -> None:
    """Write the summary files in ``root`` and print the summary, which reaches the terminal even when they cannot
    be written. ``stopped``: why the run ended before its last test, with the fix."""
    from code.report.pages import ReportError, write_run_report

    summary = format_summary(system, root, results, interrupted_by, stopped)
    _save(lambda: write_summary(root, summary, results), "the summary", root, who)
    print(summary, flush=True)
    try:  # the run's report.md beside its summary (each test drew its own plots)
        print(f"[{who}] report: {write_run_report(root, redraw=False)}", flush=True)
    except ReportError:
        return  # no test left a folder to report on (all refused or stopped before LoadGen)
    except Exception as error:  # noqa: BLE001 - the results are recorded; the report is a convenience
        print(f"[{who}] report.md not written: {type(error).__name__}: {error}", flush=True)


def run_child(spec: dict, log_dir: Path, cwd: Path = REPO_ROOT) -> tuple[TestResult, RunRecord]:
    """Run one test in its own process group, in ``cwd`` (LoadGen reads an audit's audit.config from there); the
    group is stopped whenever this returns or raises."""
    spec_file = log_dir / "test_spec.json"
    spec_file.write_text(json.dumps(spec, indent=2) + "\n")
    mark_incomplete(log_dir, spec["scenario"], spec["mode"], "the test has not finished: it is running, or it was "
                    "stopped before it could write its result", {"test_spec": spec})
    command = [sys.executable, "-m", "code.processes.run_single_test", str(spec_file)]
    # The repository first on the path, also outside it: our `code` package, not the standard library's module.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    screen = ProgressScreen(sys.stdout)
    if screen.redraws:
        env[PROGRESS_TTY_ENV] = "1"
    log.debug("test process: %s (cwd %s)", " ".join(command), cwd)
    transcript = Transcript(log_dir / "stdout.txt")
    process = start_in_own_group(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, bufsize=1)
    try:
        assert process.stdout is not None
        error_line = last_progress = None
        for line in process.stdout:
            screen.write(line)
            if screen.redraws and line.startswith(PROGRESS_PREFIX):
                last_progress = line  # redrawn in place each second: the transcript keeps the last of a run
                continue
            if last_progress:
                transcript.write(last_progress)
                last_progress = None
            transcript.write(line)
            if line.startswith("ERROR:"):
                error_line = line.strip()
        screen.done()
        status = process.wait()
    finally:
        with stop_signals_ignored():
            stop_group(process)
            transcript.close()
    if transcript.error is not None:
        log.warning("%s not saved whole: %s", transcript.path.name, transcript.error)
    try:
        record = read_record(log_dir)
    except RunRecordError:  # unreadable: the test counts as failed
        record = RunRecord({})
    if status == 0 and record.complete:
        return record.result, record
    reasons = [error_line.removeprefix("ERROR: ")] if error_line else []
    # A test killed by a signal (the out-of-memory killer, kill -9) stopped mid-way: its LoadGen logs are partial.
    killed = status < 0
    partial = "; its LoadGen logs are partial" if killed else ""
    reasons.append(f"the test process {how_it_ended(status)}{partial}; see {log_dir / 'stdout.txt'}")
    result = TestResult(spec["scenario"], spec["mode"], str(log_dir), valid=None, complete=not killed,
                        invalid_reasons=reasons)
    _save(lambda: write_record(log_dir, RunRecord.of(result, test_spec=spec)), "metadata.json",
          log_dir / "metadata.json")
    return result, RunRecord({})


class Transcript:
    """The test's stdout.txt. A full disk or a read-only folder stops the copy, not the run: the output still
    reaches the terminal, and ``error`` says in one line why the file is incomplete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._file: TextIO | None = None
        self._file = self._guarded(lambda: open(path, "w", buffering=1))  # line-buffered: a write fails at once

    def write(self, line: str) -> None:
        if (file := self._file) is not None:
            self._guarded(lambda: file.write(line))

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            self._guarded(file.close)

    def _guarded(self, act: Callable[[], Any]) -> Any:
        """``act()``; an OSError the user fixes ends the copy, and ``error`` keeps the first one's line."""
        try:
            return act()
        except OSError as error:
            message = describe(error, writing_in=self.path)
            if message is None:
                raise
            self.error = self.error or message
            file, self._file = self._file, None
            if file is not None:
                with contextlib.suppress(OSError):  # the buffered rest cannot be written either: the error says why
                    file.close()
            return None


def _save(write: Callable[[], object], what: str, where: Path, who: str = "run_harness") -> None:
    """Write a record of the run; where the user must fix the disk or folder, say so in one line and go on."""
    try:
        write()
    except OSError as error:
        message = describe(error, writing_in=where)
        if message is None:
            raise
        get_logger(who).warning("%s not saved: %s", what, message)


def resolve_from_spec(spec: dict[str, Any]) -> ResolvedConfig:
    """The config a child test process runs: resolved again from the spec ``test_spec`` wrote."""
    workload = WorkloadSetting(HarnessType(spec["harness_type"]), AccuracyTarget(spec["accuracy_target"]),
                               PowerSetting(spec["power_setting"]))
    # The parent resolved the same config first, warned about an unusable tuned file already and chose the rung of
    # the config's engine ladder (its accuracy gate): the child runs that engine.
    return resolve_config(Benchmark(spec["benchmark"]), Scenario(spec["scenario"]), spec["system"], workload,
                          spec["overrides"], warn_tuned=False, rung=spec.get("rung"))
