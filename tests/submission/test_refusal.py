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


def test_runs_of_several_rounds_are_refused_naming_the_round_that_takes_them_all(tmp_path):
    """Each test takes its own default round (BERT v6.1, GPT-J v5.0 on the CPU system): staging leaves no result out
    unasked, and names v5.0, the newest round that accepts both from an edge system."""
    from code.common.constants import TestMode
    from code.mlperf.run_record import RunRecord
    from code.submission.runs import TestRun
    from code.submission.stage import StageError, _one_round

    tests = [TestRun(tmp_path / benchmark, "CPU", benchmark, "Offline", TestMode.PerformanceOnly,
                     RunRecord({"round": round_name})) for benchmark, round_name in (("bert-99", "v6.1"),
                                                                                      ("gptj-99", "v5.0"))]
    with pytest.raises(StageError, match=r"the runs mix rounds \(v5.0: 1 tests, .*v6.1: 1 tests, .*give "
                                         r"ROUND=<round>, or the run folders of one round \(the newest round that "
                                         r"accepts all of them from edge systems is v5.0: run the tests it lacks with "
                                         r"ROUND=v5.0, then make stage_results ROUND=v5.0\)"):
        _one_round(tests, None, "edge")
    assert _one_round(tests, "v6.1", "edge") == "v6.1"
    assert _one_round(tests[:1], None, "edge") == "v6.1"


def test_an_optional_scenario_is_taken_and_not_required():
    """llama3.1-8b's datacenter Server is optional in v6.1: a set with it or without it is complete; a scenario the
    round does not take (SingleStream of the datacenter set) is named. Stand-in records: the rule alone."""
    from types import SimpleNamespace

    from code.common.constants import TestMode
    from code.submission.runs import TestRun
    from code.submission.stage import _check

    record = SimpleNamespace(result_dict={"verdict": "VALID"}, round="v6.1")
    modes = (TestMode.AccuracyOnly, TestMode.PerformanceOnly)

    def tests(*scenarios: str) -> dict:
        return {("llama3.1-8b", scenario, mode): TestRun(Path(scenario), "H200_SXM_141GBx1", "llama3.1-8b", scenario,
                                                         mode, record)
                for scenario in scenarios for mode in modes}

    assert _check(tests("Offline", "Server"), "datacenter", "v6.1") == []
    assert _check(tests("Offline"), "datacenter", "v6.1") == []
    assert _check(tests("Offline", "SingleStream"), "datacenter", "v6.1") == [
        "llama3.1-8b SingleStream: round v6.1 does not take it from a datacenter system (its folder would be ignored "
        "or rejected)"]
    missing = _check(tests("Server"), "datacenter", "v6.1")
    assert missing and all(problem.startswith("llama3.1-8b Offline: no finished") for problem in missing)
