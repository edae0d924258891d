"""``make info`` for systems no class is named after: two and four GPUs of a known model resolve from its class."""

import re
import subprocess
import sys

import pytest

from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.config.registry import ConfigRegistry
from code.config.resolved import WorkloadSetting

RATES = {Scenario.Offline: "offline_expected_qps", Scenario.Server: "server_target_qps"}


def per_gpu(benchmark: Benchmark, scenario: Scenario, model: str) -> tuple[float, str]:
    """One GPU's rate of the engine a run starts with (the engine ladder's first), and the class that sets it."""
    config = ConfigRegistry.get(benchmark, scenario, model, WorkloadSetting(accuracy_target=AccuracyTarget.k_99))
    first = config.engine_ladder[0]
    return first.values[RATES[scenario]], f"{model} engine_ladder[{first.name}]"


@pytest.mark.parametrize("model,count", [("H200_SXM_141GB", 2), ("H100_SXM_80GB", 4)])
def test_info_resolves_x2_and_x4_with_their_rates_and_says_where_they_came_from(model, count):
    system = f"{model}x{count}"
    info = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--benchmarks=bert,gptj",
                           "--scenarios=offline,server", f"--system_name={system}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    sections = re.split(r"\n(?===)", info.stdout)
    for benchmark in (Benchmark.BERT, Benchmark.GPTJ):  # the ones asked for, each with an engine ladder
        for scenario, field in RATES.items():
            title = f"== {system} {benchmark.value}-99 {scenario.value} (custom_k_99_MaxP, config class {model})"
            (section,) = [part for part in sections if part.startswith(title)]
            (line,) = [line for line in section.splitlines() if line.strip().startswith(field)]
            value = float(line.split("=")[1].split()[0])
            rate, source = per_gpu(benchmark, scenario, model)
            assert value == rate * count
            assert line.endswith(f"[{source} x {count} GPUs]")
    # No description is shipped for these counts: info says so and names the command that writes one.
    assert f"systems/{system}.json is missing" in info.stdout and "run `make add_system` to write it" in info.stdout


def test_info_shows_each_scenario_once_and_a_benchmark_that_fits_no_engine(capsys):
    """--scenarios=all names each scenario once; GPT-J on a GPU too small for it says so and BERT is still shown."""
    from code.actions.info import info
    from code.mlperf.arguments import parse_run_args

    info(parse_run_args(["--action=info", "--benchmarks=gptj-99,bert-99", "--scenarios=all",
                         "--system_name=A10_24GBx1"]))
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("== ")]
    assert len(heads) == len(set(heads)) and any("GPT-J does not fit A10_24GB" in line for line in heads)
    assert any(line.startswith("== A10_24GBx1 bert-99 Offline (") for line in heads)


def test_info_shows_the_rate_a_run_on_some_of_the_gpus_uses():
    """--devices=0,1 on a system of eight GPUs: `make info` shows a quarter of the system's rate, the value the run
    writes into user.conf, and says where it comes from and why it is scaled."""
    info = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--benchmarks=bert",
                           "--scenarios=offline", "--system_name=H200_SXM_141GBx8", "--devices=0,1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    (line,) = [line for line in info.stdout.splitlines() if line.strip().startswith("offline_expected_qps")]
    rate, source = per_gpu(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GB")
    assert float(line.split("=")[1].split()[0]) == rate * 8 * 2 / 8
    assert line.endswith(f"[{source} x 8 GPUs, x 2/8 GPUs (--devices=0,1)]")
    assert f"  -> offline_expected_qps = {rate * 2:.1f}: rung, {source} x 8 GPUs, x 2/8 GPUs" in info.stdout


def test_info_says_which_round_each_test_is_for_and_the_newest_that_takes_it(capsys):
    """The round of each test, where it came from, and the newest round that takes the test from the system's type:
    from the CPU system (an edge system), v5.0 for GPT-J and v6.1 for BERT, each its default."""
    from code.actions.info import info
    from code.mlperf.arguments import parse_run_args

    info(parse_run_args(["--action=info", "--benchmarks=gptj-99,bert-99", "--scenarios=offline", "--system_name=CPU"]))
    out = capsys.readouterr().out
    assert "  -> round v5.0 (default; the newest round that takes gptj-99 Offline on edge systems)" in out
    assert "  -> round v6.1 (default; the newest round that takes bert-99 Offline on edge systems)" in out
