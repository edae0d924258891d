"""Compliance audits: the table of required tests agrees with each round's official checker, bad requests are
refused by name before anything runs, and a real TEST01 audit (LoadGen, the round's audit.config and
run_verification.py) of a tiny BERT Offline run ends with the official verify files saying PASS."""

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from code.actions.run_audit import ship_test01_accuracy
from code.common.constants import Benchmark, ExitCode, Scenario
from code.common.paths import LIB_DIR, REPO_ROOT
from code.common.rounds import ROUNDS, SYSTEM_TYPES, get_round
from code.mlperf.arguments import ArgumentError, parse_run_args
from code.mlperf.audits import (
    AuditError,
    AuditVerdict,
    audit_refusal,
    audit_tools,
    find_reference_run,
    parse_audit_tests,
    read_verification,
    reference_problem,
)
from tests.actions.test_end_to_end import _env, build_dir, run_main  # noqa: F401 - build_dir is a fixture
from tests.common.test_rounds import OUR_BENCHMARKS, official_checker
from tests.conftest import official_tools


def checker_required_audits(round_name: str, benchmark: str, folder: Path, caplog) -> list[str]:  # noqa: ANN001
    """The audits the round's checker requires of a benchmark: its check_compliance_dir, given an empty compliance
    folder, names every test it misses; the package checker (v5.1, v6.1) has ComplianceCheck.get_test_list."""
    checker = official_checker(round_name)
    if get_round(round_name).tools.checker[0] == "-m":
        from submission_checker.checks.compliance_check import ComplianceCheck  # imported with the constants

        holder = SimpleNamespace(config=SimpleNamespace(base=checker.MODEL_CONFIG[round_name]))
        return sorted(set(ComplianceCheck.get_test_list(holder, benchmark)))
    folder.mkdir()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="main"):
        checker.check_compliance_dir(str(folder), benchmark, "Offline", checker.Config(round_name, None), "closed",
                                     {}, benchmark)
    return sorted({record.args[0] for record in caplog.records if record.msg.startswith("Missing %s")})


@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_required_audits_match_the_official_checker(round_name, tmp_path, caplog):
    """For each of our benchmarks the round has (on any system type), the tests its checker requires."""
    the_round = get_round(round_name)
    benchmarks = [name for name in OUR_BENCHMARKS if any(the_round.scenarios_for(kind, name) for kind in SYSTEM_TYPES)]
    assert benchmarks
    for benchmark in benchmarks:
        missing = checker_required_audits(round_name, benchmark, tmp_path / benchmark, caplog)
        assert missing == sorted(the_round.audits_for(benchmark)), benchmark


@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_the_official_files_of_each_required_audit_are_found(round_name):
    official_tools(round_name, "compliance")
    for test in ROUNDS[round_name].audits_for("bert-99"):
        tools = audit_tools(round_name, test, Benchmark.BERT)
        assert tools.audit_config.is_file() and tools.verification.name == "run_verification.py"
    assert audit_tools(round_name, "TEST01", Benchmark.BERT).audit_config.parent.name == "bert"


def test_audit_names_are_parsed_and_unknown_ones_listed():
    assert parse_audit_tests("test01, TEST05,TEST01") == ["TEST01", "TEST05"]
    assert parse_run_args(["--action=run_audit", "--audit_test=TEST01"]).audit_tests == ["TEST01"]
    with pytest.raises(ArgumentError, match=r"unknown audit test 'TEST07'; valid choices: TEST01, TEST04, TEST05, "
                                            r"TEST06"):
        parse_run_args(["--action=run_audit", "--audit_test=TEST07"])
    with pytest.raises(ArgumentError, match=r"--audit_test applies to audits only: make run_audit_harness"):
        parse_run_args(["--action=run", "--audit_test=TEST01"])


def test_a_test_the_round_does_not_require_is_refused_by_name():
    assert audit_refusal("v5.0", "bert-99", "TEST01", "datacenter") is None
    assert audit_refusal("v5.0", "bert-99", "TEST05", "datacenter") == (
        "round v5.0's checker does not require TEST05 of bert-99: it requires TEST01 (round v4.1 requires it: "
        "--round=v4.1)")
    assert audit_refusal("v4.1", "gptj-99", "TEST01", "datacenter") == (
        "round v4.1's checker does not require TEST01 of gptj-99: it requires no audit of it")


def test_test06_is_asked_of_llama_by_system_type():
    """v5.1's and v6.1's checker asks TEST06 of datacenter llama3.1-8b and no audit of llama3.1-8b-edge, its edge
    name; no round asks one of an edge system's llama."""
    for name in ("v5.1", "v6.1"):
        assert audit_refusal(name, "llama3.1-8b", "TEST06", "datacenter") is None
        assert audit_refusal(name, "llama3.1-8b", "TEST06", "edge") == (
            f"round {name}'s checker does not require TEST06 of llama3.1-8b: it requires no audit of it")


def test_missing_tools_name_the_clone_command_and_the_variable(tmp_path):
    with pytest.raises(AuditError) as error:
        audit_tools("v5.0", "TEST01", Benchmark.BERT, tools_dir=tmp_path)
    message = str(error.value)
    assert f"git clone --branch v5.0 https://github.com/mlcommons/inference {tmp_path / 'v5.0'}" in message
    assert "MLPERF_INFERENCE_TOOLS" in message


def test_no_reference_run_names_the_submission_run_to_make(tmp_path):
    with pytest.raises(AuditError, match=r"no complete SubmissionRun of bert-99 Offline on CPU for round v5.0 .*"
                                         r"--test_mode=SubmissionRun .*--audit_results_dir"):
        find_reference_run("CPU", "bert-99", Scenario.Offline, "v5.0", logs_dir=tmp_path)


def test_a_reference_run_must_be_a_finished_submission_run_of_the_round(tmp_path):
    assert reference_problem(tmp_path, "v5.0") == (f"{tmp_path} has no accuracy/mlperf_log_accuracy.json (a "
                                                   "SubmissionRun folder has accuracy/ and performance/run_1/)")
    for sub, name in (("accuracy", "mlperf_log_accuracy.json"), ("performance/run_1", "mlperf_log_summary.txt")):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / name).write_text("[]")
        (tmp_path / sub / "metadata.json").write_text(json.dumps({"round": "v4.1", "result": {"complete": True}}))
    assert reference_problem(tmp_path, "v5.0") == f"{tmp_path / 'accuracy'} is a run of round v4.1, not v5.0"
    assert reference_problem(tmp_path, "v4.1") is None


# The oracle (gold answers) makes the responses the same in every run, so TEST01's comparison with the accuracy
# run passes; pacing it (20 ms a batch of 16) makes the throughput independent of the machine's load, so the 10 %
# performance comparison does too. 1.5 s runs, for round v5.0, named: its tools judge them.
AUDITED = ["--benchmarks=bert-99", "--scenarios=offline", "--backend=oracle", "--gpu_batch_size=16", "--round=v5.0",
           "--oracle_batch_ms=20", "--min_duration=1500", "--min_query_count=1", "--offline_expected_qps=800"]


@pytest.mark.slow
def test_test01_audit_of_a_tiny_bert_offline_run(build_dir, tmp_path):  # noqa: F811 - the fixture
    official_tools("v5.0", "compliance")
    compliance_logs = build_dir / "compliance_logs"
    # No SubmissionRun yet: refused before anything is written.
    refused = run_main(build_dir, "--action=run_audit", *AUDITED)
    assert refused.returncode == ExitCode.BAD_INPUT, refused.stdout + refused.stderr
    assert "no complete SubmissionRun of bert-99 Offline on CPU" in refused.stderr and not compliance_logs.exists()

    reference = run_main(build_dir, "--action=run", "--test_mode=SubmissionRun", *AUDITED)
    assert reference.returncode == ExitCode.OK, reference.stdout + reference.stderr
    logs_before = sorted(p.relative_to(build_dir) for p in (build_dir / "logs").rglob("*"))

    done = run_main(build_dir, "--action=run_audit", "--audit_test=TEST01", *AUDITED)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    [root] = compliance_logs.iterdir()
    test01 = root / "CPU" / "bert-99" / "Offline" / "TEST01"
    # The layout the checker reads under compliance/<system>/<benchmark>/<Scenario>/TEST01/, and nothing more.
    assert sorted(str(p.relative_to(test01)) for p in test01.rglob("*") if p.is_file()) == [
        "accuracy/accuracy.txt", "accuracy/mlperf_log_accuracy.json", "performance/run_1/mlperf_log_detail.txt",
        "performance/run_1/mlperf_log_summary.txt", "verify_accuracy.txt", "verify_performance.txt"]
    assert "TEST PASS" in (test01 / "verify_accuracy.txt").read_text()
    assert "TEST PASS" in (test01 / "verify_performance.txt").read_text()
    assert (test01 / "accuracy" / "accuracy.txt").read_text().startswith('{"exact_match": 100.0, "f1": 100.0}')
    run_dir = root / "audit_runs" / "CPU" / "bert-99" / "Offline" / "TEST01"
    assert "Found Audit Config file" in (run_dir / "mlperf_log_detail.txt").read_text()
    assert "TEST01 verification complete" in (run_dir / "verification.txt").read_text()
    [summary] = json.loads((root / "summary.json").read_text())
    assert summary["mode"] == "TEST01" and summary["verdict"] == "PASS but not submittable"
    assert summary["accuracy"]["checks"] == {"accuracy": True, "performance": True}
    assert "TEST01: accuracy PASS, performance PASS" in done.stdout
    # The reference run was only read.
    assert sorted(p.relative_to(build_dir) for p in (build_dir / "logs").rglob("*")) == logs_before

    # Half the reference's throughput: the official performance check fails, so the audit FAILs and exits 3.
    slower = [arg.replace("=20", "=40") if arg.startswith("--oracle_batch_ms") else arg for arg in AUDITED]
    failed = run_main(build_dir, "--action=run_audit", "--audit_test=TEST01", *slower)
    assert failed.returncode == ExitCode.INVALID, failed.stdout + failed.stderr
    [failed_root] = [p for p in compliance_logs.iterdir() if p != root]
    [failed_summary] = json.loads((failed_root / "summary.json").read_text())
    assert failed_summary["verdict"] == "FAIL"
    assert failed_summary["accuracy"]["checks"] == {"accuracy": True, "performance": False}
    assert failed_summary["invalid_reasons"] == ["TEST FAIL: Test score invalid"]
    assert "TEST01: accuracy PASS, performance FAIL" in failed.stdout and "Exit status 3" in failed.stdout


def _scored(tmp_path, audit_f1: float, baseline_f1: float):
    """An audit folder whose logged responses differ from the accuracy run's, scored at these F1s."""
    work = tmp_path / "work"
    (work / "baseline").mkdir(parents=True)
    (work / "accuracy.txt").write_text(json.dumps({"exact_match": 0.0, "f1": audit_f1}) + "\n")
    (work / "baseline" / "accuracy.txt").write_text(json.dumps({"exact_match": 0.0, "f1": baseline_f1}) + "\n")
    scores = {"audit": {"metric": "f1", "value": audit_f1}, "baseline": {"metric": "f1", "value": baseline_f1}}
    return work, scores


@pytest.mark.parametrize(("audit_f1", "baseline_f1", "benchmark", "passed"), [
    (90.0, 90.5, "bert-99", True),  # 0.56 % apart: within bert-99's 1 %
    (90.0, 90.5, "bert-99.9", False),  # but not within bert-99.9's 0.1 %
    (90.0, 95.0, "bert-99", False),
])
def test_differing_test01_responses_ship_both_scores(tmp_path, audit_f1, baseline_f1, benchmark, passed):
    """When the responses differ, the checker compares the audit's accuracy with the accuracy run's on the same
    samples: both files are shipped, and the verdict follows the checker's delta."""
    work, scores = _scored(tmp_path, audit_f1, baseline_f1)
    verdict = AuditVerdict("TEST01", checks={"accuracy": False, "performance": True})
    accuracy_dir = tmp_path / "TEST01" / "accuracy"
    ship_test01_accuracy(verdict, work, accuracy_dir, scores, benchmark)
    assert {p.name for p in accuracy_dir.iterdir()} == {"accuracy.txt", "baseline_accuracy.txt",
                                                        "compliance_accuracy.txt"}
    assert (accuracy_dir / "compliance_accuracy.txt").read_text() == (work / "accuracy.txt").read_text()
    assert verdict.passed is passed
    assert bool(verdict.reasons) is not passed
    assert f"f1 {audit_f1:.3f} vs baseline {baseline_f1:.3f}" in verdict.figures[0]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "env", "message"), [
    # No round named: each test's default round on the CPU system (edge), BERT's v6.1 and GPT-J's v5.0.
    (["--audit_test=TEST05"], {}, "refusing a TEST05 audit that round v6.1 would not accept: round v6.1's checker "
                                  "does not require TEST05 of bert-99"),
    (["--audit_test=TEST01", "--scenarios=server"], {}, "round v6.1 has no bert-99 Server for edge systems"),
    (["--benchmarks=gptj"], {}, "round v5.0's checker requires no audit of gptj-99"),
    (["--audit_test=TEST01"], {"MLPERF_INFERENCE_TOOLS": "/nonexistent"},
     "git clone https://github.com/mlcommons/inference /nonexistent/main"),
    (["--audit_test=TEST01", "--round=v5.0"], {"MLPERF_INFERENCE_TOOLS": "/nonexistent"},
     "git clone --branch v5.0 https://github.com/mlcommons/inference /nonexistent/v5.0"),
])
def test_bad_audits_are_refused_before_anything_runs(tmp_path, harness_built, args, env, message):
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run_audit", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, env={**_env(build), **env}, timeout=120)
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    assert message in done.stderr
    assert not (build / "compliance_logs").exists()


def test_a_test01_audit_that_logged_nothing_says_so(tmp_path):
    """A LoadGen that ignores audit.config's sampling keys (every 4.1.x release on PyPI does) logs no response:
    nothing is compared, and the reason says that."""
    work, scores = _scored(tmp_path, 0.0, 0.0)
    verdict = AuditVerdict("TEST01", checks={"accuracy": False, "performance": True}, compared=0)
    ship_test01_accuracy(verdict, work, tmp_path / "TEST01" / "accuracy", scores, "bert-99")
    assert not verdict.passed and verdict.reasons[0].startswith("the audit logged no response to compare")


@pytest.mark.parametrize("first_token, eos, passed", [("Skipped", "True", True), ("True", "True", True),
                                                      ("False", "True", False), ("Skipped", "False", False)])
def test_a_test06_verdict_is_the_checkers_three_lines(tmp_path, first_token, eos, passed):
    """TEST06's run_verification.py writes verify_accuracy.txt with no TEST PASS line and no performance file: the
    audit passes when the lines the checker reads say so (first token True or Skipped, EOS and length True)."""
    (tmp_path / "verify_accuracy.txt").write_text(f"First token check pass: {first_token}\nEOS check pass: {eos}\n"
                                                  "Sample length check pass: True\nTEST06 verification complete\n")
    verdict = read_verification("TEST06", tmp_path, "")
    assert list(verdict.checks) == ["accuracy"] and verdict.passed is passed
