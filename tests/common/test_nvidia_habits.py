"""NVIDIA's habits: its flag spellings accepted where the meaning is ours, refused with our equivalent named where
it is not; LOG_DIR= on the make command line; --help and `make help` grouped, within 100 columns."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from code.common.constants import AccuracyTarget, Benchmark
from code.common.paths import REPO_ROOT
from code.config.fields import FIELDS
from code.mlperf.arguments import (
    ALIASES,
    FIELD_GROUPS,
    HELP_WIDTH,
    MAIN_ARGUMENTS,
    MAIN_DEFAULTS,
    MAIN_SWITCHES,
    NVIDIA_ONLY_FLAGS,
    OTHER_FIELDS,
    ArgumentError,
    field_groups,
    format_help,
    parse_run_args,
)


@pytest.mark.parametrize("nvidia,ours", [
    (["--use_graphs=false"], {"cuda_graphs": False}),
    (["--use_graphs"], {"cuda_graphs": True}),
    (["--gpu_inference_streams=2"], {"num_workers": 2}),
    (["--gpu_inference_streams", "3"], {"num_workers": 3}),  # the space form, as for our own name
    (["--fast"], {"test_run": True}),
])
def test_nvidia_spellings_with_our_meaning_are_aliases(nvidia, ours):
    assert parse_run_args(nvidia).overrides == ours


def test_every_alias_names_a_field():
    assert all(name in FIELDS for name in ALIASES.values())


def test_an_alias_and_our_name_with_two_values_are_one_flag_given_twice():
    with pytest.raises(ArgumentError, match=r"--cuda_graphs \(as --use_graphs and --cuda_graphs\) is given twice"):
        parse_run_args(["--use_graphs=false", "--cuda_graphs=true"])
    assert parse_run_args(["--use_graphs=true", "--cuda_graphs=true"]).overrides == {"cuda_graphs": True}


@pytest.mark.parametrize("args,names", [
    (["--gpu_copy_streams=2"], ["--num_workers=N"]),
    (["--gpu_copy_streams", "2"], ["--num_workers=N"]),
    (["--power"], ["runs under no power meter", "--power_setting=MaxQ"]),
    (["--force_calibration"], ["build/engines/<system>/", "make generate_engines"]),
    (["--force_calibration=1", "--benchmarks=bert"], ["make generate_engines"]),
])
def test_nvidia_flags_without_our_meaning_are_refused_naming_our_equivalent(args, names):
    with pytest.raises(ArgumentError) as error:
        parse_run_args(args)
    message = str(error.value)
    assert message.startswith(f"{args[0].split('=')[0]} is NVIDIA's")
    assert all(name in message for name in names), message
    assert "valid flags" not in message  # the pointer, not the list of every flag


def test_config_ver_all_runs_each_benchmark_at_each_target():
    request = parse_run_args(["--benchmarks=bert,gptj-99", "--config_ver=all"])
    assert [(b.benchmark, b.accuracy_target) for b in request.benchmarks] == [
        (Benchmark.BERT, AccuracyTarget.k_99), (Benchmark.BERT, AccuracyTarget.k_99_9),
        (Benchmark.GPTJ, AccuracyTarget.k_99),
    ]
    assert parse_run_args(["--config_ver=all"]) == parse_run_args(["--config_ver=default,high_accuracy"])
    with pytest.raises(ArgumentError, match="valid choices: default, high_accuracy, all"):
        parse_run_args(["--config_ver=triton"])


def test_help_lines_fit_100_columns_and_every_flag_is_in_a_group():
    text = format_help()
    assert max(len(line) for line in text.splitlines()) <= HELP_WIDTH
    assert OTHER_FIELDS not in text  # every field is in one of FIELD_GROUPS
    listed = [name for _, names in field_groups() for name in names]
    assert sorted(listed) == sorted(FIELDS)  # each field once
    for name in [*FIELDS, *ALIASES, *NVIDIA_ONLY_FLAGS, *MAIN_ARGUMENTS, *MAIN_SWITCHES]:
        assert f"  --{name} " in text or f"  --{name}\n" in text, name


def test_help_keeps_test_only_flags_apart_at_the_end_of_the_fields():
    text = format_help()
    titles = [title for title, _ in FIELD_GROUPS]
    assert titles[-1].startswith("Test-only")
    test_only = text[text.index(titles[-1]):text.index("NVIDIA harness spellings:")]
    for name in ("oracle_shift", "oracle_drop", "oracle_batch_ms", "cpu_workers", "synthetic_length_scale"):
        assert f"--{name} " in test_only
        assert text.count(f"  --{name} ") == 1
    assert "--gpu_batch_size " not in test_only


def test_help_entries_are_aligned_and_long_names_wrap_below():
    lines = format_help().splitlines()
    batch = next(line for line in lines if line.startswith("  --gpu_batch_size "))
    assert batch.index("int, 1 to 65,536.") == 30
    long_name = lines.index("  --performance_sample_count_override")
    assert lines[long_name + 1].startswith(" " * 30 + "int, 1 to")
    assert "  --use_graphs                = --cuda_graphs" in lines


def make_dry_run(*args: str, env: dict[str, str] | None = None) -> list[str]:
    # --no-print-directory: under `make test` this is a nested make, which would add "Entering directory" lines.
    return subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True, env=env).stdout.splitlines()


@pytest.mark.parametrize("target", ["run", "run_harness", "find_performance"])
def test_make_log_dir_is_the_log_dir_of_a_run(target):
    command = [line for line in make_dry_run(target, "LOG_DIR=build/logs/mine", "RUN_ARGS=--help")
               if "-m code.main" in line][-1]
    assert "--log_dir=build/logs/mine" in shlex.split(command)
    without = [line for line in make_dry_run(target, "RUN_ARGS=--help") if "-m code.main" in line][-1]
    assert "--log_dir" not in without
    # A LOG_DIR exported by a job script is not a request: every run would go to one folder.
    exported = [line for line in make_dry_run(target, "RUN_ARGS=--help", env={**os.environ, "LOG_DIR": "/tmp/x"})
                if "-m code.main" in line][-1]
    assert "--log_dir" not in exported


@pytest.mark.slow
def test_make_log_dir_with_spaces_and_a_quote_is_one_folder(tmp_path, harness_built):
    """LOG_DIR reaches the run as one --log_dir whatever its characters: the run's logs land in that folder, not
    an error that blames RUN_ARGS for a word of it."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(harness_built.parents[1], target_is_directory=True)
    log_dir = tmp_path / "my runs" / "it's  the first"
    run_args = ("--benchmarks=bert --scenarios=offline --model_name=tiny --input_data=synthetic --min_duration=1000 "
                "--min_query_count=1 --offline_expected_qps=100")
    done = subprocess.run(["make", "--no-print-directory", "-o", "build", "run", f"LOG_DIR={log_dir}",
                           f"RUN_ARGS={run_args}", f"PY={sys.executable}"], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**os.environ, "MLPERF_BUILD_DIR": str(build)}, timeout=600)
    assert "expected --name=value" not in done.stderr and "Traceback" not in done.stdout + done.stderr
    assert (log_dir / "CPU" / "bert-99" / "Offline" / "metadata.json").is_file(), done.stdout + done.stderr
    assert f"Logs: {log_dir}" in done.stdout


def test_make_log_dir_and_another_run_args_log_dir_are_refused():
    with pytest.raises(ArgumentError, match="--log_dir is given twice"):
        parse_run_args(["--log_dir=build/logs/mine", "--log_dir=build/logs/other"])


def test_make_help_is_grouped_fits_100_columns_and_lists_lint():
    lines = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    headings = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headings[1:] == ["Set up:", "Data and models:", "Run:", "Results:", "Submission:", "Test:", "Clean:"]
    assert any(line.strip().startswith("make results [COMPARE=") for line in lines)
    assert any(line.strip().startswith("make lint ") for line in lines)


def help_entries(text: str) -> dict[str, str]:
    """--help's flag entries: the flag, then its text with the wrapped lines joined."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        if line.startswith("  --"):
            flag, _, rest = line.strip().partition(" ")
            entries[flag] = rest.strip()
        elif flag and line.startswith(" " * 30):
            entries[flag] = f"{entries[flag]} {line.strip()}".strip()
        else:
            flag = None
    return entries


def test_help_shows_every_flag_s_default():
    entries = help_entries(format_help())
    for name in [*MAIN_ARGUMENTS, *MAIN_SWITCHES, *FIELDS]:
        assert "default" in entries[f"--{name}"], name
    assert entries["--benchmarks"].endswith("(default: bert)")
    assert entries["--scenarios"].endswith("(default: offline)")
    assert entries["--action"].endswith("(default: run)")
    assert entries["--test_mode"].endswith("(default: PerformanceOnly)")
    assert entries["--test_run"].endswith("(default: false)")
    assert entries["--gpu_batch_size"].endswith("(default: set by the config class)")
    assert entries["--cluster_ready_timeout_s"].endswith("(default: 1,800)")


def test_parse_takes_main_defaults_from_the_table_help_shows():
    request = parse_run_args([])
    assert request.action == MAIN_DEFAULTS["action"]
    assert [bench.name for bench in request.benchmarks] == [f"{MAIN_DEFAULTS['benchmarks']}-99"]
    assert [scenario.value.lower() for scenario in request.scenarios] == [MAIN_DEFAULTS["scenarios"]]
    assert set(request.defaulted) == set(MAIN_ARGUMENTS)
    assert "benchmarks" not in parse_run_args(["--benchmarks=gptj"]).defaulted
