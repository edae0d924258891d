"""The one validation layer (code/config/fields.py): every bad value stops the run before anything runs.

The cases of issue 18 run through `python -m code.main --action=run` as a user runs them, in a private build
folder: each must end with one line naming the field, the value, what is allowed and the fix, exit status 2,
and nothing written.
"""

import math
import os
import subprocess
import sys

import pytest

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.paths import REPO_ROOT
from code.config.fields import FIELDS, FieldError
from code.config.registry import ConfigRegistry
from code.config.resolve import resolve_config
from code.config.resolved import ConfigError, WorkloadSetting
from code.mlperf.arguments import ArgumentError, format_help, parse_run_args
from configs.bert.Offline import OfflineBaseConfig

NUMERIC = [f for f in FIELDS.values() if f.type in (int, float)]

# (RUN_ARGS, what the one error line must contain): each reproduced in issue 18 as a hang, an out-of-memory
# kill, a silently wrong run or a late traceback.
ISSUE_CASES = [
    (["--scenarios=server", "--server_target_qps=0"], "--server_target_qps=0 is out of range: allowed greater than 0"),
    (["--scenarios=server", "--server_target_qps=nan"], "--server_target_qps=nan is out of range"),
    (["--scenarios=server", "--server_target_qps=-5"], "--server_target_qps=-5 is out of range"),
    (["--min_duration=-5"], "--min_duration=-5 is out of range: allowed 0 to"),
    (["--scenarios=singlestream", "--single_stream_expected_latency_ns=0"],
     "--single_stream_expected_latency_ns=0 is out of range: allowed 1,000 to"),
    (["--offline_expected_qps=0"], "--offline_expected_qps=0 is out of range"),
    (["--gpu_batch_size=99999999999999999999"], "--gpu_batch_size=99999999999999999999 is out of range: allowed 1 to"),
    (["--performance_sample_count_override=5"],
     "--performance_sample_count_override = 5 is below bert's performance sample count, 10,833"),
    (["--gpu_batch_size=0"], "--gpu_batch_size=0 is out of range: allowed 1 to 65,536"),
    (["--seed=-1"], "--seed=-1 is out of range: allowed 0 to 4,294,967,295"),
    (["--benchmarks=gptj", "--num_beams=0"], "--num_beams=0 is out of range: allowed 1 to 64"),
    (["--backend=inflight"], "'inflight' is not a bert backend; bert has: pytorch, oracle"),
]

# Values each valid alone that cannot work together: a run would be INVALID with a wrong hint, blame the cluster for
# a port no address has, or run on this machine alone without a word.
ISSUE_CASES += [
    (["--scenarios=server", "--model_name=tiny", "--input_data=synthetic", "--min_duration=5000", "--max_duration=1",
      "--min_query_count=1", "--server_target_qps=20"],
     "--max_duration = 1 ms is below the minimum duration, 5,000 ms (--min_duration): LoadGen would stop before the "
     "minimum is met and the test would be INVALID; raise --max_duration to at least 5000"),
    (["--max_duration=1000", "--test_run"], "below the minimum duration, 60,000 ms (--test_run's)"),
    (["--model_name=tiny", "--input_data=synthetic", "--cluster=127.0.0.1:99999"],
     "--cluster = '127.0.0.1:99999': port 99999 is not a TCP port (1 to 65,535); give the host:port of the "
     "cluster's head"),
    (["--model_name=tiny", "--input_data=synthetic", "--cluster_port=7000"],
     "--cluster_port = 7000 applies with --cluster only, and this run has none (it runs on this machine alone): add "
     "--cluster=<the head's host:port>, or leave --cluster_port out"),
    (["--cluster_ready_timeout_s=60"], "--cluster_ready_timeout_s = 60 applies with --cluster only"),
]


@pytest.mark.parametrize(("args", "message"), ISSUE_CASES, ids=[" ".join(a) for a, _ in ISSUE_CASES])
def test_bad_values_stop_before_anything_is_written(tmp_path, args, message):
    build = tmp_path / "build"
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build)}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run", *args, f"--log_dir={tmp_path / 'logs'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("ERROR: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not build.exists() and not (tmp_path / "logs").exists()


def test_range_errors_name_the_allowed_values_and_the_fix():
    with pytest.raises(ArgumentError) as caught:
        parse_run_args(["--scenarios=server", "--server_target_qps=inf"])
    assert str(caught.value) == (
        "--server_target_qps=inf is out of range: allowed greater than 0 and at most 1,000,000 (Server: the Poisson "
        "arrival rate LoadGen issues at, in queries/s, for the whole system; of one GPU in a GPU model's class); "
        "give a value in that range, or leave --server_target_qps "
        "out to use the config's"
    )


def test_every_numeric_field_has_a_range():
    assert NUMERIC and all(f.range is not None for f in NUMERIC), [f.name for f in NUMERIC if f.range is None]


@pytest.mark.parametrize("field", NUMERIC, ids=[f.name for f in NUMERIC])
def test_each_range_is_enforced_at_its_edges(field):
    """The bounds themselves are accepted; one step outside them, NaN and infinities are refused."""
    low, high = field.range.low, field.range.high
    step = 1 if field.type is int else 1e-9 * max(1.0, abs(high))
    outside = [low - step, high + step] if field.type is int else [low - step, high * 1.001, math.nan, math.inf]
    if field.range.above_low:
        outside.append(low)
    else:
        assert field.parse(str(low)) == low
    assert field.parse(str(high)) == high
    for value in outside:
        with pytest.raises(FieldError, match=f"--{field.name}=.* is out of range: allowed"):
            field.parse(str(value))


def test_config_classes_are_held_to_the_same_ranges():
    register = ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    with pytest.raises(ConfigError, match=r"config class ZeroBatch_x1: field 'gpu_batch_size' = 0 is out of range: "
                                          r"allowed 1 to 65,536 .*; set a value in that range"):
        @register
        class ZeroBatch_x1(OfflineBaseConfig):
            gpu_batch_size = 0
            offline_expected_qps = 10.0


def test_a_sample_count_override_may_only_go_up():
    workload = WorkloadSetting()
    bigger = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", workload,
                            {"performance_sample_count_override": 20_000})
    assert bigger["performance_sample_count_override"] == 20_000
    with pytest.raises(FieldError, match="below gptj's performance sample count, 13,368"):
        resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", workload, {"performance_sample_count_override": 13_367})


def test_help_says_what_each_field_accepts():
    text = format_help()
    assert "  --gpu_batch_size            int, 1 to 65,536. " in text
    assert "  --server_target_qps         float, greater than 0 and at most 1,000,000. " in text
    assert "  --test_mode                 one of PerformanceOnly, AccuracyOnly, SubmissionRun. " in text
    assert "(exit\nstatus 2)" in text
