"""make stage_results' refusal: each problem in lines a terminal shows whole, with nothing of it lost."""

from pathlib import Path

import pytest

from code.common.constants import ExitCode
from code.submission import __main__ as submission
from code.submission.stage import Staged

LONG_FOLDER = "/data/logs/2026.11.26-10.00.00/" + "x" * 120  # longer than a line: kept whole, to be copied


def refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], problems: list[str],
            notes: list[str]) -> tuple[int, str, str]:
    staged = Staged(Path("build/submission/closed/MyOrg"), "v5.0", "CPU", problems=problems, notes=notes)
    monkeypatch.setattr(submission, "stage", lambda *args, **kwargs: staged)
    status = submission.main(["stage", "--submitter", "MyOrg"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_refusal_of_many_reasons_is_wrapped_and_whole(monkeypatch, capsys):
    reasons = "; ".join(f"reason number {n} of this test, said in words" for n in range(40))
    problem = f"bert-99 Offline performance is VALID but not submittable: {reasons} ({LONG_FOLDER})"
    note = "a test that did not finish is left out: " + " ".join(["build/logs/one/folder"] * 10)
    assert len(problem) > 2000
    status, out, err = refused(monkeypatch, capsys, [problem, "a short one"], [note])
    assert status == ExitCode.BAD_INPUT
    lines = err.splitlines()
    assert lines[0].startswith("[stage_results] nothing staged") and lines[1].startswith("  ")
    assert all(len(line) <= submission.MESSAGE_WIDTH or line.strip() == f"({LONG_FOLDER})" for line in lines)
    assert any(line.strip() == f"({LONG_FOLDER})" for line in lines)
    assert " ".join(line.strip() for line in lines).count("reason number") == 40
    assert "  - a short one" in lines
    assert sum(line.startswith("  - ") for line in lines) == 2  # one bullet per problem, its rest indented
    assert all(len(line) <= submission.MESSAGE_WIDTH for line in out.splitlines())
    assert out.startswith("[stage_results] note: a test that did not finish")
