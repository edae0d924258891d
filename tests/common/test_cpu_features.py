"""The CPU precision of BERT's CPU classes comes from what the CPU computes in hardware: bf16 only with AMX or
AVX512-BF16, else fp32; RUN_ARGS still win, and `make info` and the summary say which and why."""

import pytest

from code.actions.info import info
from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.config import cpu_features
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.mlperf.arguments import parse_run_args
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord
from code.mlperf.summary import cpu_precision_note, format_summary
from code.tuning.plans import system_name

AVX2_ONLY = frozenset({"sse4_2", "avx", "avx2", "fma"})


def fake_flags(monkeypatch, flags):
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: frozenset(flags))


def resolved(scenario=Scenario.Offline, target=AccuracyTarget.k_99, **overrides):
    return resolve_config(Benchmark.BERT, scenario, "CPU", WorkloadSetting(accuracy_target=target), overrides)


def test_cpu_flags_are_the_first_processors_flags(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.setattr(cpu_features, "CPUINFO", cpuinfo)
    assert cpu_features.cpu_flags() == {"fpu", "avx2", "avx512_bf16"}
    monkeypatch.setattr(cpu_features, "CPUINFO", tmp_path / "absent")
    assert cpu_features.cpu_flags() == frozenset()


@pytest.mark.parametrize("scenario", [Scenario.Offline, Scenario.Server, Scenario.SingleStream])
def test_a_cpu_without_bf16_arithmetic_runs_fp32_and_says_why(monkeypatch, scenario):
    fake_flags(monkeypatch, AVX2_ONLY)
    config = resolved(scenario)
    assert config["precision"] == "fp32"
    assert config.sources["precision"] == ("CPU: this CPU has neither amx_bf16 nor avx512_bf16: bf16 would be "
                                           "emulated, ~8x slower than fp32")


@pytest.mark.parametrize("flags,named", [({"amx_bf16", "avx512_bf16"}, "amx_bf16 and avx512_bf16"),
                                         ({"avx2", "avx512_bf16"}, "avx512_bf16")])
def test_a_cpu_with_bf16_arithmetic_runs_bf16(monkeypatch, flags, named):
    fake_flags(monkeypatch, flags)
    config = resolved()
    assert config["precision"] == "bf16"
    assert config.sources["precision"] == f"CPU: this CPU has {named}: bf16 in hardware"


def test_an_explicit_precision_wins_over_the_cpus_choice(monkeypatch):
    fake_flags(monkeypatch, AVX2_ONLY)
    config = resolved(precision="bf16")
    assert config["precision"] == "bf16" and config.sources["precision"] == "RUN_ARGS"
    fake_flags(monkeypatch, {"amx_bf16"})
    assert resolved(precision="fp32")["precision"] == "fp32"


def test_bert_99_9_stays_fp32_on_any_cpu(monkeypatch):
    fake_flags(monkeypatch, {"amx_bf16"})
    config = resolved(target=AccuracyTarget.k_99_9)
    assert config["precision"] == "fp32" and config.sources["precision"] == "CPU_HighAccuracy"


def test_make_info_says_which_precision_and_why(monkeypatch, capsys):
    fake_flags(monkeypatch, AVX2_ONLY)
    request = parse_run_args(["--action=info", "--benchmarks=bert", "--scenarios=offline"])
    assert system_name(request) == "CPU"
    info(request)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("precision ")]
    assert "'fp32'" in line and line.endswith("[CPU: this CPU has neither amx_bf16 nor avx512_bf16: bf16 would be "
                                              "emulated, ~8x slower than fp32]")


def test_the_summary_says_which_cpu_precision_ran_and_why(monkeypatch, tmp_path):
    fake_flags(monkeypatch, AVX2_ONLY)
    metadata = RunRecord({"config": resolved().as_dict(), "devices": {"used": ["cpu"]}})
    result = TestResult("Offline", "PerformanceOnly", "x", metric="samples_per_second", value=1.0,
                        unit="samples/s", valid=True)
    text = format_summary("CPU", tmp_path, [("bert-99", result, metadata)])
    assert ("NOTE CPU precision: fp32 [CPU: this CPU has neither amx_bf16 nor avx512_bf16: bf16 would be emulated, "
            "~8x slower than fp32]") in text
    assert text.count("CPU precision") == 1
    on_gpu = RunRecord({"config": {"fields": {"precision": "fp16", "device": "cuda"}, "sources": {}},
                        "devices": {"used": ["cuda:0"]}})
    assert cpu_precision_note(on_gpu) is None


def test_add_system_gives_a_cpu_class_bf16_only_with_bf16_arithmetic(monkeypatch):
    import importlib

    import configs.bert.new_system as start

    try:
        fake_flags(monkeypatch, AVX2_ONLY)
        assert importlib.reload(start).PRECISION == ("fp32", "fp32")
        fake_flags(monkeypatch, {"amx_bf16"})
        assert importlib.reload(start).PRECISION == ("bf16", "fp32")
    finally:
        monkeypatch.undo()
        importlib.reload(start)  # this machine's own values for the tests after this one


def test_mlperf_cpu_flags_replace_the_cpus_own_and_the_reason_says_so(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16 amx_bf16\n")
    monkeypatch.setattr(cpu_features, "CPUINFO", cpuinfo)
    monkeypatch.setenv("MLPERF_CPU_FLAGS", "avx avx2  fma")
    assert cpu_features.cpu_flags() == {"avx", "avx2", "fma"}
    config = resolved()
    assert config["precision"] == "fp32"
    assert config.sources["precision"] == ("CPU: this CPU (MLPERF_CPU_FLAGS) has neither amx_bf16 nor avx512_bf16: "
                                           "bf16 would be emulated, ~8x slower than fp32")
    monkeypatch.setenv("MLPERF_CPU_FLAGS", "")  # set but empty: a CPU without any of the flags
    assert cpu_features.cpu_flags() == frozenset()
    monkeypatch.delenv("MLPERF_CPU_FLAGS")
    assert cpu_features.cpu_flags() == {"fpu", "avx2", "avx512_bf16", "amx_bf16"}
