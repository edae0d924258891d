"""A flag no test of the run reads is refused before anything runs, with one line naming why and the fix.

A GPT-J run given ``--fp8_gemms`` (a switch of BERT's packed path) or an Offline run given ``--server_target_qps`` once
ran for hours as if the flag were not there. One test of the run reading a field is enough for it to pass
(``--scenarios=all``, ``--benchmarks=bert,gptj``), a switch set to its default passes (it clears a config class's
value meant for another backend), and with ``--scenarios=all`` a field of a scenario the system's type does not run
is only noted.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from code.common.constants import Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.config.fields import FieldError
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting, check_run_args_used

G = ["--action=run", "--benchmarks=gptj", "--scenarios=offline", "--input_data=synthetic", "--weights=random"]


def run_main(tmp_path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLPERF_BUILD_DIR": str(tmp_path / "build")}
    return subprocess.run([sys.executable, "-m", "code.main", *args, f"--log_dir={tmp_path / 'logs'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["--fp8_gemms=qkv"], "ERROR: --fp8_gemms is an option of the bert pytorch backend, and this run has gptj-99 "
     "Offline: leave --fp8_gemms out\n"),
    (["--server_target_qps=5"], "ERROR: --server_target_qps applies to Server only, and this run has gptj-99 "
     "Offline: leave --server_target_qps out, or add the scenario (--scenarios=server)\n"),
    (["--cuda_graphs=false"], "ERROR: --cuda_graphs=false is an option of the inflight backend, not of pytorch: set "
     "--backend=inflight, or leave --cuda_graphs out\n"),
], ids=["another benchmark's switch", "another scenario's field", "another backend's switch"])
def test_a_flag_the_run_does_not_read_is_refused_before_anything_runs(tmp_path, args, message):
    """bad-inputs n04: ``G --fp8_gemms=qkv`` and ``G --server_target_qps=5`` ran with no word."""
    done = run_main(tmp_path, [*G, *args])
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == message
    assert not (tmp_path / "build").exists() and not (tmp_path / "logs").exists()


def resolved(benchmark: Benchmark, scenario: Scenario, **overrides: object):
    return resolve_config(benchmark, scenario, "CPU", WorkloadSetting(), dict(overrides))


def test_one_test_reading_a_flag_is_enough():
    """--cuda_graphs is BERT's pytorch backend's (and GPT-J's inflight one's): with BERT in the run it passes though
    GPT-J on the pytorch backend does not read it; a Server field passes beside a Server test."""
    flags = {"cuda_graphs": False}
    check_run_args_used(flags, [resolved(Benchmark.BERT, Scenario.Offline, **flags),
                                resolved(Benchmark.GPTJ, Scenario.Offline, **flags)])
    with pytest.raises(FieldError, match="--cuda_graphs=false is an option of the inflight backend, not of pytorch"):
        check_run_args_used(flags, [resolved(Benchmark.GPTJ, Scenario.Offline, **flags)])
    rate = {"server_target_qps": 5.0}
    check_run_args_used(rate, [resolved(Benchmark.BERT, Scenario.Offline, **rate),
                               resolved(Benchmark.BERT, Scenario.Server, **rate)])


def test_a_switch_at_its_default_passes_as_a_reset():
    """--kv_cache_dtype=auto on GPT-J's pytorch backend does nothing a label could misstate: it passes, as the way
    to clear a config class's FP8 KV cache for another backend; fp8 is refused."""
    check_run_args_used({"kv_cache_dtype": "auto"}, [resolved(Benchmark.GPTJ, Scenario.Offline, kv_cache_dtype="auto")])
    with pytest.raises(FieldError, match=r"^--kv_cache_dtype=fp8 is an option of the inflight backend, not of "
                                         r"pytorch: set --backend=inflight, or leave --kv_cache_dtype out$"):
        check_run_args_used({"kv_cache_dtype": "fp8"},
                            [resolved(Benchmark.GPTJ, Scenario.Offline, kv_cache_dtype="fp8")])


def test_scenarios_all_only_notes_a_field_of_a_scenario_the_system_does_not_run(capsys):
    """The same command serves every system type: --scenarios=all on an edge system (no Server) notes the Server
    field, and names the scenarios that run; named scenarios refuse it."""
    configs = [resolved(Benchmark.BERT, scenario, batch_timeout_us=5)
               for scenario in (Scenario.Offline, Scenario.SingleStream)]
    check_run_args_used({"batch_timeout_us": 5}, configs, all_scenarios=True)
    assert capsys.readouterr().out == ("[config] --batch_timeout_us applies to Server only, and --scenarios=all runs "
                                       "bert-99 Offline, bert-99 SingleStream on this system: no test reads it\n")
    with pytest.raises(FieldError, match=r"--batch_timeout_us applies to Server only, and this run has bert-99 "
                                         r"Offline, bert-99 SingleStream: leave --batch_timeout_us out"):
        check_run_args_used({"batch_timeout_us": 5}, configs)


def test_a_config_class_value_of_another_backends_switch():
    """A config class's FP8 KV cache is refused for GPT-J's pytorch backend, which would run without it under its
    label, naming where it came from and the fix; the oracle, which runs no model, keeps the class's engine as it is
    (the H200's GPT-J ladder: FP8 GEMMs and KV cache), as BERT's oracle keeps its FP8 switches."""
    from code.config.fields import FIELDS, check_combination

    values = {name: fld.default for name, fld in FIELDS.items() if fld.applies_to(Benchmark.GPTJ, Scenario.Offline)}
    values |= {"backend": "pytorch", "precision": "bf16", "kv_cache_dtype": "fp8"}
    with pytest.raises(FieldError, match=r"^kv_cache_dtype=fp8 \(set by MyBox\) is an option of the inflight "
                                         r"backend, not of pytorch: set --backend=inflight, or --kv_cache_dtype=auto$"):
        check_combination(Benchmark.GPTJ, values, {"kv_cache_dtype": "MyBox"})
    check_combination(Benchmark.GPTJ, values, {"kv_cache_dtype": "RUN_ARGS"})  # the whole run judges a flag
    oracle = resolve_config(Benchmark.GPTJ, Scenario.Offline, "H200_SXM_141GBx1", WorkloadSetting(),
                            {"backend": "oracle"})
    assert oracle["kv_cache_dtype"] == "fp8" and oracle.sources["kv_cache_dtype"].startswith("H200_SXM_141GB")
    bert = resolve_config(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx1", WorkloadSetting(),
                          {"backend": "oracle"})
    assert bert["fp8_residual"] is True and bert["backend"] == "oracle"
