"""Submission commands meet bad input or a failing tool: one line naming the fix, the right exit, nothing deleted.

Fast cases, without runs: each builds the few files the command reads in a private build folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.constants import TestMode
from code.common.paths import REPO_ROOT
from code.submission.runs import find_tests, newest
from code.submission.stage import StageError, stage, staged_round


def _submission(build: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "code.submission", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "MLPERF_BUILD_DIR": str(build), **(env or {})})


@pytest.mark.parametrize("submitter", ["..", ".", "", "a/b", "My Org", "../logs"])
def test_a_submitter_that_is_not_a_folder_name_is_refused_before_anything_is_deleted(tmp_path, submitter):
    """Staging deletes <work_dir>/<submitter> first: SUBMITTER=.. would delete the folder holding the run logs."""
    work = tmp_path / "build" / "submission_work"
    kept = tmp_path / "build" / "logs" / "run" / "metadata.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    with pytest.raises(StageError, match="is not a folder name"):
        stage(submitter, logs=[kept.parent], out_dir=tmp_path / "build" / "submission", work_dir=work)
    with pytest.raises(StageError, match="is not a folder name"):
        staged_round(submitter, work_dir=work)
    assert kept.read_text() == "{}"


def test_truncate_and_check_refuse_dot_dot_too(tmp_path):
    for action in ("truncate", "check"):
        done = _submission(tmp_path, action, "--submitter=..")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("ERROR: SUBMITTER='..' is not a folder name") and "Traceback" not in done.stderr


def test_a_failing_truncation_tool_is_one_line_and_exit_1(tmp_path):
    """The official tool fails (here: a stand-in that exits 1): its last error line and its log, no traceback."""
    tools = tmp_path / "tools"
    folder = tools / "v5.0" / "tools" / "submission"
    folder.mkdir(parents=True)
    (folder / "submission_checker.py").write_text("")
    (folder / "truncate_accuracy_log.py").write_text(
        "import sys\nprint('starting')\nprint('ERROR: cannot read results/x/accuracy.txt')\nsys.exit(1)\n")
    build = tmp_path / "build"
    accuracy = build / "submission" / "closed" / "MyOrg" / "results" / "CPU" / "bert-99" / "Offline" / "accuracy"
    accuracy.mkdir(parents=True)
    (accuracy / "accuracy.txt").write_text('{"exact_match": 80.0, "f1": 88.0}\n')
    (build / "submission_work" / "MyOrg").mkdir(parents=True)
    (build / "submission_work" / "MyOrg" / "stage.json").write_text(json.dumps({"round": "v5.0"}))
    done = _submission(build, "truncate", "--submitter=MyOrg", env={"MLPERF_INFERENCE_TOOLS": str(tools)})
    assert done.returncode == 1, done.stdout + done.stderr
    log = build / "submission_work" / "MyOrg" / "truncate.log"
    assert done.stderr == ("ERROR: truncate_accuracy_log.py (round v5.0) failed (exit 1): ERROR: cannot read "
                           f"results/x/accuracy.txt; whole log: {log}\n")
    assert "starting" in log.read_text()


def test_an_unreadable_metadata_json_is_named_with_why_not_a_crash(tmp_path):
    """A full disk or a hand edit leaves metadata.json unreadable; staging names that test and why, and goes on."""
    run = tmp_path / "2026.11.24-10.00.00"
    cut = run / "CPU" / "bert-99" / "Offline"
    cut.mkdir(parents=True)
    (cut / "metadata.json").write_text('{"result": {"complete": tr')
    other = run / "CPU" / "bert-99" / "SingleStream"
    other.mkdir(parents=True)
    (other / "metadata.json").write_text("[]")
    found = find_tests([run])
    assert found.tests == [] and found.unfinished == [] and list(found.unreadable) == [cut, other]
    assert found.unreadable[cut] == "no readable metadata.json (Expecting value: line 1 column 25 (char 24))"
    assert found.unreadable[other] == "its metadata.json is not a run record (a JSON object with a result object)"


def test_a_test_is_read_with_its_loadgen_mode_and_an_unknown_mode_is_unfinished(tmp_path):
    """metadata.json's mode becomes a TestMode; a folder recording no LoadGen test mode is not a test to stage."""
    run = tmp_path / "2026.11.24-10.00.00"
    folders = {}
    for scenario, mode in (("Offline", "AccuracyOnly"), ("Server", "PerformanceOnly"), ("SingleStream", "Sideways")):
        folders[scenario] = run / "CPU" / "bert-99" / scenario
        folders[scenario].mkdir(parents=True)
        (folders[scenario] / "metadata.json").write_text(json.dumps(
            {"config": {}, "result": {"complete": True, "valid": True, "mode": mode}}))
    found = find_tests([run])
    assert [(test.scenario, test.mode) for test in found.tests] == [
        ("Offline", TestMode.AccuracyOnly), ("Server", TestMode.PerformanceOnly)]
    assert found.unfinished == [folders["SingleStream"]]
    assert list(newest(found.tests)) == [("bert-99", "Offline", TestMode.AccuracyOnly),
                                   ("bert-99", "Server", TestMode.PerformanceOnly)]


def _audit(root: Path, round_name: str, verdict: str, scenario: str = "Offline", test: str = "TEST01") -> Path:
    """One compliance run as run_audit leaves it: the checker's TEST folder, the audit's own run, summary.json."""
    folder = root / "CPU" / "bert-99" / scenario / test
    (folder / "accuracy").mkdir(parents=True)
    (folder / "verify_performance.txt").write_text("TEST PASS\n" if verdict == "PASS" else "TEST FAIL\n")
    run = root / "audit_runs" / "CPU" / "bert-99" / scenario / test
    run.mkdir(parents=True)
    (run / "metadata.json").write_text(json.dumps({"round": round_name, "result": {"complete": True}}))
    reasons = [] if verdict == "PASS" else ["TEST FAIL: performance differs"]
    (root / "summary.json").write_text(json.dumps([{"benchmark": "bert-99", "log_dir": str(folder),
                                                     "verdict": verdict, "invalid_reasons": reasons}]))
    return folder


def test_staging_takes_audits_of_its_round_only_and_names_a_failed_one(tmp_path):
    """The newest audit of another round is left out with a note; a staged audit that FAILed is a problem."""
    from code.submission.stage import Staged, _failed_audits, _newest_audits

    passed = _audit(tmp_path / "2026.11.24-09.00.00", "v5.0", "PASS")
    other_round = _audit(tmp_path / "2026.11.24-10.00.00", "v4.1", "PASS")
    staged = Staged(tmp_path / "tree", "v5.0", "CPU")
    audits = _newest_audits([passed.parents[3], other_round.parents[3]], "CPU", "v5.0", staged)
    assert audits == {("bert-99", "Offline", "TEST01"): passed}
    assert staged.notes == [f"audit of round v4.1 left out (staging round v5.0): {other_round}"]
    assert _failed_audits(audits, {("bert-99", "Offline")}) == []

    failed = _audit(tmp_path / "2026.11.24-11.00.00", "v5.0", "FAIL")
    audits = _newest_audits([passed.parents[3], failed.parents[3]], "CPU", "v5.0", staged)
    assert audits == {("bert-99", "Offline", "TEST01"): failed}
    assert _failed_audits(audits, {("bert-99", "Offline")}) == [
        f"bert-99 Offline TEST01 audit is FAIL: TEST FAIL: performance differs ({failed}; run it again: "
        "make run_audit_harness)"]
    assert _failed_audits(audits, {("bert-99", "SingleStream")}) == []  # not staged: not a problem of the tree


def test_audits_of_one_scenario_run_one_at_a_time_are_all_staged(tmp_path):
    """TEST01 and TEST05 from two invocations (two compliance folders): each test's newest counts."""
    from code.submission.stage import Staged, _newest_audits

    test01 = _audit(tmp_path / "2026.11.24-09.00.00", "v4.1", "PASS")
    test05 = _audit(tmp_path / "2026.11.24-10.00.00", "v4.1", "PASS", test="TEST05")
    audits = _newest_audits([test01.parents[3], test05.parents[3]], "CPU", "v4.1", Staged(tmp_path, "v4.1", "CPU"))
    assert audits == {("bert-99", "Offline", "TEST01"): test01, ("bert-99", "Offline", "TEST05"): test05}


def test_a_full_disk_while_staging_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    import errno

    from code.submission import __main__ as submission

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "results" / "mlperf_log_detail.txt"))

    monkeypatch.setattr(submission, "stage", full_disk)
    assert submission.main(["stage", "--submitter=MyOrg"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: no space left writing {tmp_path / 'results' / 'mlperf_log_detail.txt'} (No space")
    assert err.count("\n") == 1
