"""RUN_ARGS parsing: what is accepted, and that every mistake gets an error listing the valid choices."""

import subprocess
import sys

import pytest

from code.common.arguments import ArgumentError, parse_run_args
from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.paths import REPO_ROOT


def test_defaults():
    request = parse_run_args([])
    assert request.action == "run"
    assert [(b.benchmark, b.accuracy_target) for b in request.benchmarks] == [(Benchmark.BERT, AccuracyTarget.k_99)]
    assert request.scenarios == [Scenario.Offline]


def test_benchmarks_scenarios_and_fields():
    request = parse_run_args(["--benchmarks=bert-99,bert-99.9", "--scenarios=Offline,SERVER,singlestream",
                              "--gpu_batch_size=16", "--test_run", "--test_mode=AccuracyOnly"])
    assert [b.accuracy_target for b in request.benchmarks] == [AccuracyTarget.k_99, AccuracyTarget.k_99_9]
    assert request.scenarios == [Scenario.Offline, Scenario.Server, Scenario.SingleStream]
    assert request.overrides == {"gpu_batch_size": 16, "test_run": True, "test_mode": "AccuracyOnly"}


@pytest.mark.parametrize("args,target", [
    (["--accuracy_target=0.999"], AccuracyTarget.k_99_9),
    (["--config_ver=high_accuracy"], AccuracyTarget.k_99_9),
    (["--config_ver=default"], AccuracyTarget.k_99),
    (["--benchmarks=bert-99.9"], AccuracyTarget.k_99_9),
])
def test_accuracy_target_spellings(args, target):
    assert parse_run_args(args).benchmarks[0].accuracy_target is target


def test_trace_is_off_unless_asked_for():
    from code.common.fields import FIELDS

    assert FIELDS["log_enable_trace"].default is False
    assert parse_run_args(["--log_enable_trace"]).overrides == {"log_enable_trace": True}


def test_fast_is_an_alias_of_test_run():
    assert parse_run_args(["--fast"]).overrides == {"test_run": True}
    assert parse_run_args(["--test_run=false"]).overrides == {"test_run": False}


@pytest.mark.parametrize("args,message", [
    (["--benchmarks=resnet"], "unknown benchmark 'resnet'; valid choices: bert, gptj, bert-99, bert-99.9, gptj-99"),
    (["--scenarios=multistream"], "unknown scenario 'multistream'; valid choices: offline, server, singlestream"),
    (["--accuracy_target=0.9"], "valid choices: 0.99, 0.999"),
    (["--config_ver=turbo"], "valid choices: default, high_accuracy"),
    (["--test_mode=Fast"], "valid choices: PerformanceOnly, AccuracyOnly, SubmissionRun"),
    (["--scenario=offline"], "unknown flag --scenario (did you mean --scenarios?)"),
    (["--gpu_batch_size=big"], "--gpu_batch_size=big: expected int"),
    (["--precision=int4"], "valid choices: fp32, fp16, bf16, fp8"),
    (["--action=deploy"], "valid choices: generate_engines, run_harness, run, info"),
    (["--benchmarks=bert-99", "--accuracy_target=0.999"], "asks for 0.99 but"),
    (["--gpu_batch_size"], "--gpu_batch_size needs a value"),
    (["benchmarks=bert"], "expected --name=value"),
])
def test_errors_list_valid_choices(args, message):
    with pytest.raises(ArgumentError) as error:
        parse_run_args(args)
    assert message in str(error.value)


def test_main_exits_nonzero_with_one_line_error():
    result = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--benchmarks=bret"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ERROR: unknown benchmark 'bret'; valid choices: bert, gptj, bert-99, bert-99.9, "
                                     "gptj-99, gptj-99.9")
    assert "Traceback" not in result.stderr
