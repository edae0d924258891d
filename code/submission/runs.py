"""Finding the tests a submission is staged from: every complete test under the run folders, read from metadata.json.
Nothing here writes: run logs are results and are only read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from code.common.constants import TestMode
from code.mlperf.run_logs import run_test_parts
from code.mlperf.run_record import RunRecord, RunRecordError, read_record

# The modes a test folder's metadata.json may record: a SubmissionRun writes one folder per LoadGen test.
LOADGEN_MODES = {mode.value for mode in TestMode if mode is not TestMode.SubmissionRun}


@dataclass(frozen=True)
class TestRun:

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


@dataclass
class FoundTests:
    """What the run folders hold: the finished tests, and those that did not finish or cannot be read."""

    tests: list[TestRun] = field(default_factory=list)
    unfinished: list[Path] = field(default_factory=list)  # stopped, killed, FAILED: partial logs or none
    unreadable: dict[Path, str] = field(default_factory=dict)  # folder -> why its metadata.json does not read


def find_tests(run_folders: list[Path]) -> FoundTests:
    """Every finished test of the runs themselves (``run_test_parts``), the tests that did not finish (stopped,
    killed, FAILED), and those whose metadata.json cannot be read (a full disk, a hand edit), with the reason."""
    found = FoundTests()
    for folder in run_folders:
        for path in sorted(folder.rglob("metadata.json")):
            if (parts := run_test_parts(path.parent, folder)) is None:
                continue
            try:
                record = read_record(path.parent)
            except RunRecordError as error:
                found.unreadable[path.parent] = error.reason
                continue
            result = record.result_dict
            if (not result.get("complete", True) or result.get("valid") is None or not record.has_config
                    or result.get("mode") not in LOADGEN_MODES):
                found.unfinished.append(path.parent)
                continue
            found.tests.append(TestRun(path.parent, *parts, TestMode(result["mode"]), record))
    return found


def run_folders(logs_dir: Path) -> list[Path]:
    """The run folders under ``build/logs`` (or another logs folder), oldest first: their names are timestamps."""
    return sorted(p for p in logs_dir.iterdir() if p.is_dir()) if logs_dir.is_dir() else []


def newest(tests: list[TestRun]) -> dict[tuple[str, str, TestMode], TestRun]:
    """Per (benchmark, scenario, mode), the test written last; in that key's order (modes by name)."""
    chosen: dict[tuple[str, str, TestMode], TestRun] = {}
    for test in sorted(tests, key=lambda t: (t.directory / "metadata.json").stat().st_mtime):
        chosen[(test.benchmark, test.scenario, test.mode)] = test
    return {key: chosen[key] for key in sorted(chosen, key=lambda k: (k[0], k[1], k[2].value))}
