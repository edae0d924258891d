"""Ctrl-C outside the tests (engine building, the C++ build): one line saying what was stopped, exit 130.

Ctrl-C during a test is tests/harness/test_supervision.py's (it needs the built core and a running LoadGen test).
"""

from __future__ import annotations

import signal

from code import main as entry
from code.actions import generate_engines as generate_engines_module
from code.harness import build as build_module


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_while_engines_are_built_is_one_line_and_130(monkeypatch, capsys):
    monkeypatch.setattr(generate_engines_module, "generate_engines", _interrupt)
    status = entry.main(["--action=run", "--benchmarks", "bert", "--system_name=CPU"])
    assert status == 128 + signal.SIGINT == 130
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if "interrupted" in line]
    assert lines == ["[main] interrupted by SIGINT during generate_engines (an engine is renamed into place only "
                     "when whole: none is left half-written); no test had started, so there are no run logs"]
    assert "Traceback" not in out + err


def test_ctrl_c_during_the_cpp_build_is_one_line_and_130(monkeypatch, capsys):
    monkeypatch.setattr(build_module, "build", _interrupt)
    assert build_module.main(["--round=v4.1"]) == 130
    out, err = capsys.readouterr()
    assert err == ("code.harness.build: interrupted by SIGINT; the build of round v4.1 is unfinished: `make build` "
                   "resumes it\n")
    assert out == ""


def test_ctrl_c_during_the_build_of_a_runs_cores_is_one_line_and_130(monkeypatch, capsys):
    """make build without ROUND says the rounds of the run's tests first (BERT Offline on the CPU system: v6.1)."""
    from code.actions import build_cores

    monkeypatch.setattr(build_cores, "build", _interrupt)
    assert build_cores.main(["--system_name=CPU"]) == 130
    out, err = capsys.readouterr()
    assert err == ("code.actions.build_cores: interrupted by SIGINT; the build of round v6.1 is unfinished: `make "
                   "build` resumes it\n")
    assert out == "code.actions.build_cores: the run's tests are for round(s) v6.1\n"


def test_summary_of_an_interrupted_run_gives_the_signal_status(tmp_path):
    """The summary's exit line matches what the process exits with (130), not the tests' own status (1)."""
    from code.mlperf.run_logs import TestResult
    from code.mlperf.run_record import RunRecord
    from code.mlperf.summary import format_summary

    stopped = TestResult("Server", "PerformanceOnly", str(tmp_path), complete=False,
                         invalid_reasons=["interrupted by SIGINT after 3.0 s; its LoadGen logs are partial"])
    text = format_summary("CPU", tmp_path, [("bert-99", stopped, RunRecord({}))], interrupted_by=("SIGINT", 130))
    assert ("  Exit status 130: interrupted by SIGINT; a stopped test is INCOMPLETE (metadata.json says "
            "\"complete\": false) and its LoadGen logs are partial.") in text.splitlines()
    assert "Exit status 1:" not in text
    assert "Exit status 1: a test did not finish." in format_summary("CPU", tmp_path,
                                                                     [("bert-99", stopped, RunRecord({}))])
