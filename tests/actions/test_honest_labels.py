"""Honest labels: a run either runs what its config, engine name and metadata.json say, or is refused.

Each case once ran something else silently (fp32 for --precision=fp8 on a CPU) or ended in a late traceback
(--device=cuda without a GPU); now each stops before anything is written, with one line and exit status 2.
"""

import os
import subprocess
import sys

import pytest
import torch

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario, TestMode
from code.common.paths import LIB_DIR, REPO_ROOT
from code.config.fields import FieldError, check_device
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting

CASES = [
    (["--precision=fp8", "--device=cpu"], "--precision=fp8 needs a GPU (FP8 needs compute capability 8.9: Ada, "
     "Hopper, Blackwell) and this run "
     "is on --device=cpu; set --precision=fp32, or run on a GPU"),
    (["--precision=fp8", "--fast_path=false", "--device=cuda"], "runs FP8 GEMMs on the packed path only"),
    (["--benchmarks=gptj", "--precision=fp8", "--device=cpu"], "--precision = 'fp8' needs --backend=inflight"),
    (["--benchmarks=gptj", "--kv_cache_dtype=fp8", "--device=cpu", "--input_data=synthetic", "--weights=random"],
     "--kv_cache_dtype=fp8 is an option of the inflight backend"),
    (["--benchmarks=gptj", "--backend=inflight", "--precision=fp32", "--kv_cache_dtype=fp8", "--device=cpu"],
     "--kv_cache_dtype=fp8 needs a GPU"),
    (["--device=gpu"], "field 'device' = 'gpu' is not str matching auto|cpu|cuda(:[0-9]{1,3})?"),
    (["--fp8_gemms=qkv+w3"], "field 'fp8_gemms' = 'qkv+w3' is not str matching"),
    (["--model_name=huge", "--device=cpu"], "model_name = 'huge': unknown BERT config 'huge'; known: "),
    (["--benchmarks=gptj", "--model_name=huge", "--device=cpu", "--input_data=synthetic", "--weights=random"],
     "unknown GPT-J config 'huge'"),
]
if not torch.cuda.is_available():
    CASES.append((["--device=cuda"], "--device=cuda: PyTorch sees no GPU here"))


def run_main(tmp_path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLPERF_BUILD_DIR": str(tmp_path / "build")}
    return subprocess.run([sys.executable, "-m", "code.main", "--action=run", *args,
                           f"--log_dir={tmp_path / 'logs'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_what_cannot_run_as_labelled_is_refused(tmp_path, args, message):
    done = run_main(tmp_path, args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("ERROR: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "build").exists() and not (tmp_path / "logs").exists()


def test_a_synthetic_setting_with_the_real_data_set_is_refused(tmp_path):
    from code.bert.squad import MANIFEST_FILE

    data = tmp_path / "squad"
    data.mkdir()
    (data / MANIFEST_FILE).write_text("{}")
    done = run_main(tmp_path, ["--device=cpu", f"--input_data={data}", "--synthetic_sample_count=16"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (f"ERROR: --synthetic_sample_count shapes synthetic inputs, and this run uses the SQuAD "
                           f"v1.1 set in {data}; add --input_data=synthetic, or leave --synthetic_sample_count out\n")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("present", [True, False], ids=["real set present", "real set absent"])
def test_a_synthetic_accuracy_run_says_synthetic_is_the_reason(tmp_path, present, harness_built):
    """--input_data=synthetic with --test_mode=AccuracyOnly: the message names the flag, and never calls a data set
    that is present missing (issue 18)."""
    from code.bert.squad import MANIFEST_FILE

    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "lib").symlink_to(LIB_DIR, target_is_directory=True)  # the core is checked first
    real_set = tmp_path / "build" / "preprocessed_data" / "squad_tokenized"
    if present:
        real_set.mkdir(parents=True)
        (real_set / MANIFEST_FILE).write_text("{}")
    done = run_main(tmp_path, ["--device=cpu", "--model_name=tiny", "--input_data=synthetic",
                               "--test_mode=AccuracyOnly"])
    assert done.returncode == 2, done.stdout + done.stderr
    fix = (f"leave --input_data out to use the set in {real_set}" if present else
           'run make download_data download_model preprocess_data BENCHMARKS="bert", then leave --input_data out')
    assert done.stderr == ("ERROR: an accuracy run needs the real SQuAD v1.1 data set, and --input_data=synthetic "
                           f"gives made-up inputs with no answers; {fix}\n")
    assert not (tmp_path / "logs").exists()


def config(benchmark: Benchmark, **overrides):
    workload = WorkloadSetting(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    return resolve_config(benchmark, Scenario.Offline, "CPU", workload, {k: v for k, v in overrides.items()})


def test_the_inflight_backend_on_a_gpu_refuses_fp32():
    resolved = config(Benchmark.GPTJ, backend="inflight", precision="fp32")
    with pytest.raises(FieldError, match="set --precision=bf16"):
        check_device(Benchmark.GPTJ, resolved.values, resolved.sources, "cuda")
    check_device(Benchmark.GPTJ, resolved.values, resolved.sources, "cpu")


def test_the_oracle_runs_no_model_so_any_precision_is_fine():
    resolved = config(Benchmark.BERT, backend="oracle", precision="fp8")
    check_device(Benchmark.BERT, resolved.values, resolved.sources, "cpu")


@pytest.mark.parametrize("benchmark", [Benchmark.BERT, Benchmark.GPTJ])
def test_the_device_that_runs_is_recorded(benchmark):
    from code.mlperf.benchmarks import load_benchmark

    resolved = config(benchmark, device="cpu", model_name="tiny", input_data="synthetic", weights="random")
    assert load_benchmark(benchmark).describe_inputs(resolved, TestMode.PerformanceOnly)["device"] == "cpu"
