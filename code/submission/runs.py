"""Finding the tests a submission is staged from: every complete test under the run folders, read from metadata.json.

A test folder is ``<run>/<system>/<bench-99|bench-99.9>/<Scenario>/`` (or its ``accuracy/`` and
``performance/run_1/`` for a SubmissionRun); its metadata.json says the round, the mode, whether it finished and
its verdict. Nothing here writes: run logs are results and are only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from code.common.constants import TestMode
from code.common.run_record import RunRecord, RunRecordError, read_record


@dataclass(frozen=True)
class TestRun:
    """One finished LoadGen test of a run folder."""

    __test__ = False  # not a pytest test class despite its name

    directory: Path
    system: str
    benchmark: str  # bert-99, bert-99.9, gptj-99, gptj-99.9
    scenario: str
    mode: TestMode  # AccuracyOnly or PerformanceOnly: one LoadGen test
    record: RunRecord

    @property
    def round(self) -> str:
        return self.record.round or "unknown (run before rounds were recorded)"

    @property
    def verdict(self) -> str:
        return str(self.record.result_dict.get("verdict", "unknown"))

    def problems(self) -> list[str]:
        """Why this test is not a submittable result (INVALID, FAIL, shortened, synthetic...); [] when it is."""
        result = self.record.result_dict
        return [*result.get("invalid_reasons", []), *result.get("not_submittable", [])]

    def describe(self) -> str:
        return f"{self.benchmark} {self.scenario} {'accuracy' if self.mode is TestMode.AccuracyOnly else 'performance'}"


def find_tests(run_folders: list[Path]) -> tuple[list[TestRun], list[Path]]:
    """Every finished test under the folders, and the folders of tests that did not finish (stopped, killed,
    FAILED, or whose metadata.json cannot be read, as a full disk leaves it): those have partial logs or none."""
    tests: list[TestRun] = []
    unfinished: list[Path] = []
    for folder in run_folders:
        for path in sorted(folder.rglob("metadata.json")):
            record = _read_record(path.parent)
            result = record.result_dict
            if (not result.get("complete", True) or result.get("valid") is None or not record.has_config
                    or result.get("mode") not in LOADGEN_MODES):
                unfinished.append(path.parent)
                continue
            tests.append(_test_run(path.parent, folder, record))
    return tests, unfinished


LOADGEN_MODES = {mode.value for mode in TestMode if mode is not TestMode.SubmissionRun}
"""The modes a test folder's metadata.json may record: a SubmissionRun writes one folder per LoadGen test."""


def _read_record(directory: Path) -> RunRecord:
    """A test folder's record, or an empty one (an unfinished test) when it cannot be read or is not a run's."""
    try:
        return read_record(directory)
    except RunRecordError:
        return RunRecord({})


def _test_run(directory: Path, run_folder: Path, record: RunRecord) -> TestRun:
    parts = directory.relative_to(run_folder).parts
    if parts[-1] == "accuracy":
        parts = parts[:-1]
    elif parts[-2:] == ("performance", "run_1"):
        parts = parts[:-2]
    system, benchmark, scenario = parts[-3:]
    return TestRun(directory, system, benchmark, scenario, TestMode(record.result_dict["mode"]), record)


def run_folders(logs_dir: Path) -> list[Path]:
    """The run folders under ``build/logs`` (or another logs folder), oldest first: their names are timestamps."""
    if not logs_dir.is_dir():
        return []
    return sorted(p for p in logs_dir.iterdir() if p.is_dir())


def newest(tests: list[TestRun]) -> dict[tuple[str, str, TestMode], TestRun]:
    """Per (benchmark, scenario, mode), the test written last; in that key's order (modes by name)."""
    chosen: dict[tuple[str, str, TestMode], TestRun] = {}
    for test in sorted(tests, key=lambda t: (t.directory / "metadata.json").stat().st_mtime):
        chosen[(test.benchmark, test.scenario, test.mode)] = test
    return {key: chosen[key] for key in sorted(chosen, key=lambda k: (k[0], k[1], k[2].value))}
