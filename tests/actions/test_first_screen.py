"""A newcomer's first screen: a run says what it will run and for about how long before anything slow starts;
--scenarios=all means what the round accepts on the system; make checks RUN_ARGS before the C++ build and runs from
the repository root only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from code.actions.announce import plan_lines, seconds_of_test
from code.common.constants import DATASET_SIZE, Scenario, TestMode
from code.common.paths import REPO_ROOT
from code.common.rounds import RoundError
from code.mlperf.arguments import ArgumentError, parse_run_args
from code.tuning import plans
from code.tuning.plans import gate_plans, scenarios_of

OFFLINE_SINGLESTREAM = [Scenario.Offline, Scenario.SingleStream]


def scenarios(args: list[str], system: str) -> dict[str, list[Scenario]]:
    request = parse_run_args(args)
    return {bench.name: scenarios_of(request, bench, system) for bench in request.benchmarks}


def test_scenarios_all_is_what_the_round_accepts_on_the_system_type():
    # CPU.json: edge. H100_SXM_80GBx8.json: datacenter,edge.
    assert scenarios(["--scenarios=all", "--benchmarks=bert,gptj"], "CPU") == {
        "bert-99": OFFLINE_SINGLESTREAM, "gptj-99": OFFLINE_SINGLESTREAM}
    assert scenarios(["--scenarios=all", "--benchmarks=gptj"], "H100_SXM_80GBx8") == {"gptj-99": list(Scenario)}
    # Round v4.1 took BERT on datacenter systems; bert-99.9 only there.
    assert scenarios(["--scenarios=all", "--benchmarks=bert-99,bert-99.9", "--round=v4.1"], "H100_SXM_80GBx8") == {
        "bert-99": list(Scenario), "bert-99.9": [Scenario.Offline, Scenario.Server]}


def test_scenarios_all_without_a_system_type_is_all_three():
    assert scenarios(["--scenarios=all"], "NoDescriptionx3") == {"bert-99": list(Scenario)}


def test_scenarios_all_refuses_a_benchmark_the_round_has_none_of(monkeypatch):
    monkeypatch.setattr(plans, "system_type", lambda system: "datacenter")
    with pytest.raises(ArgumentError, match="round v5.0 accepts no bert-99 scenario on datacenter systems"):
        scenarios(["--scenarios=all", "--round=v5.0"], "CPU")
    # With no round named, BERT from a datacenter system is v4.1's alone: the fix names it and its clone.
    with pytest.raises(ArgumentError, match=r"--scenarios=all on CPU .*: bert-99 from datacenter systems is in round "
                                            r"v4.1 only, .*--round=v4.1 LOADGEN_SRC=<clone>"):
        scenarios(["--scenarios=all"], "CPU")



def test_named_scenarios_are_run_as_named():
    assert scenarios(["--scenarios=server"], "CPU") == {"bert-99": [Scenario.Server]}


def lines_of(args: list[str], system: str = "CPU") -> list[str]:
    request = parse_run_args(args)
    return plan_lines(request, system, list(gate_plans(request, system)))


def test_a_run_without_run_args_says_its_test_length_defaults_and_estimate():
    lines = lines_of([])
    assert lines[0].startswith("run on CPU, round v6.1, full length: min_duration 600 s")
    assert any(line.startswith("  bert-99 Offline PerformanceOnly: about ") for line in lines)
    assert any(line.startswith("taken by default: --benchmarks=bert, --scenarios=offline, "
                               "--test_mode=PerformanceOnly, full length (add --test_run") for line in lines)
    assert lines[-1].startswith("estimated time: at least ")
    assert "(an estimate from the configs' expected rates and min_duration" in lines[-1]
    # Which round, why, and the newest round that takes the test (the CPU system is an edge system).
    assert "  round v6.1 (default; the newest round that takes bert-99 Offline on edge systems)" in lines


def test_each_test_of_a_run_names_its_own_default_round():
    """BERT and GPT-J on the CPU system: v6.1 and v5.0, each test said with its round."""
    lines = lines_of(["--benchmarks=bert,gptj", "--scenarios=offline", "--test_run"])
    assert lines[0].startswith("run on CPU, round v6.1, v5.0, --test_run")
    assert "  round v6.1 (default; the newest round that takes bert-99 Offline on edge systems)" in lines
    assert "  round v5.0 (default; the newest round that takes gptj-99 Offline on edge systems)" in lines


def test_a_measurement_only_the_clone_built_round_takes_runs_with_a_buildable_one():
    """bert-99 Server on an H200 system (datacenter,edge) is v4.1's alone: measured with v6.1, the plan naming the
    round and clone a submission needs; a SubmissionRun of it is refused with that fix."""
    lines = lines_of(["--benchmarks=bert", "--scenarios=server", "--test_run"], "H200_SXM_141GBx1")
    assert ("  round v6.1 (default; the newest round that takes bert-99 Server on datacenter,edge systems is v4.1: "
            "--round=v4.1 LOADGEN_SRC=<clone>)") in lines
    with pytest.raises(RoundError, match=r"bert-99 Server from datacenter,edge systems is in round v4.1 only, .*"
                                         r"--round=v4.1 LOADGEN_SRC=<clone>"):
        lines_of(["--benchmarks=bert", "--scenarios=server", "--test_mode=SubmissionRun"], "H200_SXM_141GBx1")


def test_a_test_run_says_so_and_names_no_default_it_did_not_take():
    lines = lines_of(["--benchmarks=bert,gptj", "--scenarios=all", "--test_run", "--test_mode=PerformanceOnly"])
    assert "--test_run: short, min_duration 60 s; not a submission; 4 LoadGen test(s):" in lines[0]
    assert not any(line.startswith("taken by default") for line in lines)


def test_a_submission_run_counts_its_accuracy_and_performance_tests():
    lines = lines_of(["--benchmarks=gptj", "--scenarios=offline", "--test_mode=SubmissionRun"], "H100_SXM_80GBx8")
    assert [line.split(":")[0] for line in lines[1:3]] == ["  gptj-99 Offline AccuracyOnly",
                                                            "  gptj-99 Offline PerformanceOnly"]


def test_the_estimate_is_the_minimum_duration_or_samples_at_the_expected_rate():
    request = parse_run_args(["--scenarios=offline,singlestream", "--offline_expected_qps=10",
                              "--single_stream_expected_latency_ns=50000000"])
    offline, single = (plan.config for plan in gate_plans(request, "CPU"))
    # Full length Offline: at least the data set in its one query, at 10 samples/s.
    assert seconds_of_test(offline, TestMode.PerformanceOnly) == pytest.approx(DATASET_SIZE[offline.benchmark] / 10)
    assert seconds_of_test(offline, TestMode.AccuracyOnly) == pytest.approx(DATASET_SIZE[offline.benchmark] / 10)
    assert seconds_of_test(single, TestMode.PerformanceOnly) == pytest.approx(600)
    short = parse_run_args(["--test_run", "--offline_expected_qps=10"])
    (config,) = (plan.config for plan in gate_plans(short, "CPU"))
    assert seconds_of_test(config, TestMode.PerformanceOnly) == pytest.approx(66)  # LoadGen's 1.1 x 60 s x 10/s


def test_check_args_says_the_plan_and_stops_before_any_model_code():
    """A second's work: no torch, no test started."""
    probe = ("import sys; from code.main import main; status = main(['--check_args', '--system_name=CPU']); "
             "print('LOADED', status, sorted(m for m in ('torch', 'code.actions.run_harness') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "[plan] run on CPU, round v6.1, full length" in result.stdout
    assert "[plan] RUN_ARGS are valid for --action=run" in result.stdout
    assert result.stdout.strip().endswith("LOADED 0 []")


def test_a_run_whose_plan_make_said_checks_again_but_says_it_once(monkeypatch, capsys):
    from code.actions.announce import PLAN_SAID_ENV, announce

    request = parse_run_args(["--benchmarks=bert", "--scenarios=offline", "--test_run", "--system_name=CPU"])
    announce(request)
    assert "[plan] run on CPU, round v6.1" in capsys.readouterr().out
    monkeypatch.setenv(PLAN_SAID_ENV, "1")
    announce(request)
    assert "[plan]" not in capsys.readouterr().out


def make(*args: str, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    # --no-print-directory: under `make test` this is a nested make, which would add "Entering directory" lines.
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("target", ["run", "run_harness", "find_performance", "run_audit_harness",
                                    "run_audit_test01"])
def test_make_checks_run_args_after_setup_and_before_the_build(target):
    lines = make("-n", target, "RUN_ARGS=--benchmarks=bert").stdout.splitlines()
    check = next(index for index, line in enumerate(lines) if "-m code.main --check_args" in line)
    # No round named: the build resolves the run's tests as the run will, and builds each test's round.
    build = next(index for index, line in enumerate(lines) if "-m code.actions.build_cores" in line)
    run = [index for index, line in enumerate(lines) if "-m code.main" in line][-1]
    assert check < build < run
    assert lines[build].split("-m code.actions.build_cores ")[1] == lines[check].split(" --check_args ")[1]
    # The check reads exactly what the run will; a run that make checked does not say the plan again.
    said = "MLPERF_PLAN_SAID=1 " if target in ("run", "run_harness", "find_performance") else ""
    assert said + lines[check].replace(" --check_args", "") == lines[run]
    # Under make -j as well: build waits for the check.
    assert "check_args" in make("-p", "-n", target).stdout.split("\nbuild: ")[1].splitlines()[0]


def test_a_typo_in_run_args_stops_make_run_before_the_build():
    result = make("run", "RUN_ARGS=--benchmarks=bret --scenarios=offline")
    assert result.returncode != 0
    assert "ERROR: unknown benchmark 'bret' (did you mean bert?)" in result.stderr
    assert "code.harness.build" not in result.stdout and "code.actions.build_cores" not in result.stdout


def test_make_from_another_folder_names_the_repository_root(tmp_path):
    result = make("-f", str(REPO_ROOT / "Makefile"), "help", cwd=tmp_path)
    assert result.returncode != 0
    assert f"run make from the repository root: cd {REPO_ROOT.resolve()}" in result.stderr
    assert make("-C", str(REPO_ROOT), "help", cwd=tmp_path).returncode == 0
