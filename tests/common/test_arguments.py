"""RUN_ARGS parsing: what is accepted, and that every mistake gets an error listing the valid choices."""

import subprocess
import sys

import pytest

from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.mlperf.arguments import ArgumentError, parse_run_args


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
    from code.config.fields import FIELDS

    assert FIELDS["log_enable_trace"].default is False
    assert parse_run_args(["--log_enable_trace"]).overrides == {"log_enable_trace": True}


@pytest.mark.parametrize("text", ["all", "ALL", "offline,all"])
def test_scenarios_all_is_kept_for_the_system_to_decide(text):
    """--scenarios=all: every scenario is a candidate until the system's type and the round decide
    (tests/actions/test_first_screen.py)."""
    request = parse_run_args([f"--scenarios={text}"])
    assert request.all_scenarios
    assert request.scenarios == list(Scenario)
    assert not parse_run_args(["--scenarios=offline,server"]).all_scenarios


def test_fast_is_an_alias_of_test_run():
    assert parse_run_args(["--fast"]).overrides == {"test_run": True}
    assert parse_run_args(["--test_run=false"]).overrides == {"test_run": False}


@pytest.mark.parametrize("args,message", [
    (["--benchmarks=resnet"],
     "unknown benchmark 'resnet'; valid choices: bert, gptj, llama3.1-8b, bert-99, bert-99.9, gptj-99"),
    (["--scenarios=multistream"], "unknown scenario 'multistream' (did you mean singlestream?); valid choices: "
                                  "offline, server, singlestream, all"),
    (["--accuracy_target=0.9"], "valid choices: 0.99, 0.999"),
    (["--config_ver=turbo"], "valid choices: default, high_accuracy"),
    (["--test_mode=Fast"], "valid choices: PerformanceOnly, AccuracyOnly, SubmissionRun"),
    (["--scenario=offline"], "unknown flag --scenario (did you mean --scenarios?)"),
    (["--gpu_batch_size=big"], "--gpu_batch_size=big: expected int"),
    (["--precision=int4"], "valid choices: fp32, fp16, bf16, fp8, int8"),
    (["--action=deploy"], "valid choices: generate_engines, run_harness, run, info"),
    (["--benchmarks=bert-99", "--accuracy_target=0.999"], "asks for 0.99 but"),
    (["--gpu_batch_size"], "--gpu_batch_size needs a value"),
    (["benchmarks=bert"], "expected --name=value"),
])
def test_errors_list_valid_choices(args, message):
    with pytest.raises(ArgumentError) as error:
        parse_run_args(args)
    assert message in str(error.value)


@pytest.mark.parametrize("args,guess", [
    (["--benchmarks=bret"], "unknown benchmark 'bret' (did you mean bert?)"),
    (["--benchmarks=gpt-j"], "unknown benchmark 'gpt-j' (did you mean gptj?)"),
    (["--benchmarks=bert-999"], "(did you mean bert-99.9?)"),
    (["--scenarios=ofline"], "unknown scenario 'ofline' (did you mean offline?)"),
    (["--scenarios=Sever"], "unknown scenario 'Sever' (did you mean server?)"),
    (["--scenarios=single_stream"], "(did you mean singlestream?)"),
    (["--action=rnu"], "unknown action 'rnu' (did you mean run?)"),
    (["--config_ver=high_acuracy"], "(did you mean high_accuracy?)"),
])
def test_a_typo_of_a_name_gets_did_you_mean(args, guess):
    """Benchmark, scenario and action names get the nearest choice, as flags do."""
    with pytest.raises(ArgumentError) as error:
        parse_run_args(args)
    assert guess in str(error.value)
    assert "valid choices" in str(error.value)


def test_main_exits_nonzero_with_one_line_error():
    result = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--benchmarks=bret"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ERROR: unknown benchmark 'bret' (did you mean bert?); valid choices: bert, gptj, "
                                     "llama3.1-8b, bert-99, bert-99.9, gptj-99, gptj-99.9")
    assert "Traceback" not in result.stderr


def test_help_lists_every_benchmark_and_loads_no_model_code():
    """--help is answered by the argument table alone: no torch, no C++ core, no build."""
    probe = ("import sys; from code.main import main; status = main(['--help']); "
             "print('LOADED', status, sorted(m for m in ('torch', 'code.harness.build', 'code.actions.run_harness') "
             "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "comma list: bert, gptj, llama3.1-8b, bert-99, bert-99.9, gptj-99," in result.stdout
    assert result.stdout.strip().endswith("LOADED 0 []")


@pytest.mark.parametrize("target", ["run", "run_harness", "run_audit_harness"])
def test_make_help_does_not_build_the_core(target):
    """`make run RUN_ARGS=--help` depends on setup only; without --help the target still builds first."""
    def dry_run(run_args: str) -> list[str]:
        # --no-print-directory: under `make test` this is a nested make, which would add "Entering directory" lines.
        return subprocess.run(["make", "-n", "--no-print-directory", target, f"RUN_ARGS={run_args}"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.splitlines()

    builds = ("code.harness.build", "code.actions.build_cores")  # one round, or the rounds of the run's tests
    helped = dry_run("--help")
    assert not any(build in line for line in helped for build in builds)
    assert [line for line in helped if "-m code.main" in line][-1].endswith("--help")
    assert any("code.actions.build_cores" in line for line in dry_run("--benchmarks=bert"))
    assert any("code.harness.build --round=v5.0" in line for line in dry_run("--benchmarks=bert --round=v5.0"))


@pytest.mark.parametrize("spaced,joined", [
    (["--benchmarks", "gptj", "--scenarios", "server"], ["--benchmarks=gptj", "--scenarios=server"]),
    (["--gpu_batch_size", "16", "--test_run", "--precision", "fp16"],
     ["--gpu_batch_size=16", "--test_run", "--precision=fp16"]),
    (["--test_run", "false", "--config_ver", "high_accuracy"], ["--test_run=false", "--config_ver=high_accuracy"]),
    (["--fast", "--verbose", "--round", "v4.1"], ["--fast", "--verbose", "--round=v4.1"]),
])
def test_space_form_means_the_same_as_equals(spaced, joined):
    assert parse_run_args(spaced) == parse_run_args(joined)


@pytest.mark.parametrize("args,message", [
    (["--test_run", "bert"], "got 'bert'"),
    (["--benchmarks"], "--benchmarks needs a value"),
    (["--verbose=loud"], "--verbose=loud: expected true or false"),
    (["--config_ver", "default,turbo"], "unknown config_ver 'turbo'"),
    (["--config_ver=default,high_accuracy", "--accuracy_target=0.99"], "contradicts --accuracy_target=0.99"),
    (["--benchmarks=bert-99.9", "--config_ver=default"], "asks for 0.999 but"),
])
def test_space_form_and_config_ver_errors(args, message):
    with pytest.raises(ArgumentError) as error:
        parse_run_args(args)
    assert message in str(error.value)


def test_config_ver_comma_list_runs_each_benchmark_at_each_target():
    request = parse_run_args(["--benchmarks", "bert,gptj-99", "--config_ver", "default,high_accuracy"])
    assert [(b.benchmark, b.accuracy_target) for b in request.benchmarks] == [
        (Benchmark.BERT, AccuracyTarget.k_99), (Benchmark.BERT, AccuracyTarget.k_99_9),
        (Benchmark.GPTJ, AccuracyTarget.k_99),  # a suffix fixes the target: gptj-99 is not doubled
    ]


def test_verbose_is_a_switch_off_by_default():
    assert parse_run_args([]).verbose is False
    assert parse_run_args(["--verbose"]).verbose is True
    assert parse_run_args(["--verbose=false"]).verbose is False
    assert parse_run_args(["--verbose"]).overrides == {}
