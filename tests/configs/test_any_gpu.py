"""Any NVIDIA GPU gets a config: simulated machines behind a faked NVML (tests/fake_nvml.py), each detected, named and
resolved for every benchmark and scenario a round accepts, with the engine ladder its GPU runs asserted row by row.

The fake tests detection and the configs derived from what NVML says; it is no evidence that the engines run on
those GPUs (the stand-in runs of documentation/notes/journal/2026-11-28.md and the cross-compile table of
documentation/gpu_architectures.md are)."""

from __future__ import annotations

import sys

import pytest

from code.common import systems
from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.gpu_models import MODELS
from code.common.rounds import ROUNDS
from code.config.resolve import resolve_config
from code.config.resolved import ConfigError, NoEngineError, WorkloadSetting
from tests.fake_nvml import FakeGpu, FakeNvml

GIB = 2**30
BERT_FP8 = ["fp8-attention", "fp8-fast-accum", "int8", "fp16"]
BERT_99_9_FP8 = ["fp8-fast-accum", "fp8-exact-attention", "fp8", "fp16"]
GPTJ_FP8 = ["fp8-fast-accum", "fp8", "fp8-gemms", "bf16"]

# (what NVML says: name, memory, capability, SMs, power limit in mW; count) -> the system's name and, per benchmark,
# the engines its GPU runs (bert-99, bert-99.9, gptj-99)
SIMULATED = [
    (FakeGpu("NVIDIA A100-SXM4-40GB", 40 * GIB, (8, 0), 108, 400_000), 8, "A100_SXM4_40GBx8",
     (["int8", "fp16"], ["fp16"], ["bf16"])),
    (FakeGpu("NVIDIA A100-SXM4-80GB", 80 * GIB, (8, 0), 108, 400_000), 8, "A100_SXM4_80GBx8",
     (["int8", "fp16"], ["fp16"], ["bf16"])),
    # bf16 GPT-J holds one sample in flight (SingleStream) but not the 8 a batch needs
    (FakeGpu("NVIDIA L4", 23_034 * 2**20, (8, 9), 58, 72_000), 1, "L4x1",
     (BERT_FP8, BERT_99_9_FP8, {"batches": ["fp8-fast-accum", "fp8", "fp8-gemms"], "SingleStream": GPTJ_FP8})),
    (FakeGpu("NVIDIA L40S", 46_068 * 2**20, (8, 9), 142, 350_000), 4, "L40Sx4", (BERT_FP8, BERT_99_9_FP8, GPTJ_FP8)),
    (FakeGpu("NVIDIA GeForce RTX 4090", 24_564 * 2**20, (8, 9), 128, 450_000), 1, "RTX_4090_24GBx1",
     (BERT_FP8, BERT_99_9_FP8, ["fp8-fast-accum", "fp8", "fp8-gemms", "bf16"])),
    (FakeGpu("NVIDIA H100 PCIe", 81_559 * 2**20, (9, 0), 114, 350_000), 2, "H100_PCIe_80GBx2",
     (BERT_FP8, BERT_99_9_FP8, GPTJ_FP8)),
    (FakeGpu("NVIDIA GH200 480GB", 97_871 * 2**20, (9, 0), 132, 900_000), 1, "GH200_96GBx1",
     (BERT_FP8, BERT_99_9_FP8, GPTJ_FP8)),
    (FakeGpu("NVIDIA B200", 183_359 * 2**20, (10, 0), 148, 1_000_000), 8, "B200_SXM_180GBx8",
     (BERT_FP8, BERT_99_9_FP8, GPTJ_FP8)),
    # a GPU no table row names: everything comes from NVML (its SM count and power limit unanswered)
    (FakeGpu("NVIDIA Future G300", 256 * GIB, (12, 0)), 2, "Future_G300_256GBx2",
     (BERT_FP8, BERT_99_9_FP8, GPTJ_FP8)),
]
BENCHMARKS = (("bert-99", Benchmark.BERT, AccuracyTarget.k_99), ("bert-99.9", Benchmark.BERT, AccuracyTarget.k_99_9),
              ("gptj-99", Benchmark.GPTJ, AccuracyTarget.k_99))
RATES = ("offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns")


def accepted_scenarios(benchmark_name: str) -> list[Scenario]:
    """Every scenario some round accepts of the benchmark on a datacenter or edge system."""
    return [scenario for scenario in Scenario
            if any(scenario in round_.scenarios_for(kind, benchmark_name)
                   for round_ in ROUNDS.values() for kind in ("datacenter", "edge"))]


@pytest.fixture
def machine(monkeypatch):
    """Install a fake NVML for detection (``import pynvml``) and forget the machine detected before."""

    def install(gpu: FakeGpu, count: int) -> systems.DetectedSystem:
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([gpu] * count))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        systems.this_machine.cache_clear()
        return systems.this_machine()

    yield install
    systems.this_machine.cache_clear()


@pytest.mark.parametrize(("gpu", "count", "name", "ladders"), SIMULATED, ids=[row[2] for row in SIMULATED])
def test_a_simulated_gpu_resolves_every_benchmark_with_its_ladder(machine, gpu, count, name, ladders):
    detected = machine(gpu, count)
    assert detected.name == name
    for (benchmark_name, benchmark, target), ladder in zip(BENCHMARKS, ladders, strict=True):
        for scenario in accepted_scenarios(benchmark_name):
            config = resolve_config(benchmark, scenario, name, WorkloadSetting(accuracy_target=target), {})
            expected = ladder if isinstance(ladder, list) else ladder.get(scenario.value, ladder["batches"])
            assert [rung.name for rung in config.ladder] == expected, (benchmark_name, scenario)
            assert config.rung is not None and config.rung.name == expected[0]
            rate = next(field for field in RATES if field in config.values)
            assert config[rate] > 0
            # a value no one measured on this GPU model says where it came from
            assert "estimate:" in config.sources[rate], config.sources[rate]
            if scenario is not Scenario.SingleStream:
                assert config["gpu_batch_size"] >= 8 and "derived:" in config.sources["gpu_batch_size"]
            for skipped, why in config.skipped:
                assert skipped not in expected and ("compute capability" in why or "GiB" in why)


def test_the_rates_of_a_system_are_its_gpus_rates_times_the_count(machine):
    machine(FakeGpu("NVIDIA A100-SXM4-40GB", 40 * GIB, (8, 0), 108, 400_000), 8)
    one, eight = (resolve_config(Benchmark.BERT, Scenario.Offline, f"A100_SXM4_40GBx{n}", WorkloadSetting(), {})
                  for n in (1, 8))
    assert eight["offline_expected_qps"] == pytest.approx(8 * one["offline_expected_qps"])
    assert "x 8 GPUs" in eight.sources["offline_expected_qps"]
    assert "published A100_SXM4_40GB/H100 SXM per-GPU ratio" in one.sources["offline_expected_qps"]


def test_gptj_below_the_memory_it_needs_is_refused_with_what_would_fit(machine):
    machine(FakeGpu("NVIDIA Small G16", 16 * GIB, (8, 0), 60, 150_000), 1)
    with pytest.raises(ConfigError) as refused:
        resolve_config(Benchmark.GPTJ, Scenario.Offline, "Small_G16_16GBx1", WorkloadSetting(), {})
    message = str(refused.value)
    assert "GPT-J" in message and "16 GiB" in message and "bert-99 and bert-99.9 run on it" in message
    bert = resolve_config(Benchmark.BERT, Scenario.Offline, "Small_G16_16GBx1", WorkloadSetting(), {})
    assert [rung.name for rung in bert.ladder] == ["int8", "fp16"]


def test_a_gpu_older_than_ampere_runs_bert_without_triton_and_no_gptj(machine):
    machine(FakeGpu("Tesla T4", 15 * GIB, (7, 5), 40, 70_000), 1)
    bert = resolve_config(Benchmark.BERT, Scenario.Offline, "T4_16GBx1", WorkloadSetting(), {})
    assert [rung.name for rung in bert.ladder] == ["fp16-eager"] and bert["fast_path"] is False
    with pytest.raises(ConfigError, match=r"compute capability 8\.0"):
        resolve_config(Benchmark.GPTJ, Scenario.SingleStream, "T4_16GBx1", WorkloadSetting(), {})


def test_an_engine_the_gpu_cannot_run_is_refused_before_it_loads():
    from code.common.gpu_models import by_name
    from code.config.capabilities import check_runs_on
    from code.config.fields import FieldError

    a100 = by_name("A100_SXM4_40GB")
    with pytest.raises(FieldError, match=r"--precision=fp8.*need compute capability 8\.9, the GPU has 8\.0"):
        check_runs_on(Benchmark.BERT, {"backend": "pytorch", "precision": "fp8"}, {"precision": "RUN_ARGS"}, a100,
                      "cuda:0")
    check_runs_on(Benchmark.BERT, {"backend": "pytorch", "precision": "fp16"}, {}, a100, "cuda:0")


def test_the_gpu_table_in_the_docs_is_current(monkeypatch):
    """documentation/adding_a_system.md's table of what each GPU model runs is generated from the configs."""
    from scripts.document_gpus import PAGE, rewritten

    monkeypatch.setattr("code.common.systems.this_machine", lambda: systems.DetectedSystem())
    text = PAGE.read_text()
    assert rewritten(text) == text, "documentation/adding_a_system.md is stale: run `python -m scripts.document_gpus`"


@pytest.mark.parametrize("model", [model.name for model in MODELS])
def test_every_named_gpu_model_resolves_every_benchmark_and_scenario(monkeypatch, model):
    """Each model of code/common/gpu_models.py, named by NVIDIA's habit ``<model>x<count>`` with no class written
    for it, resolves bert-99 and bert-99.9 in every scenario; GPT-J resolves or, where its memory or compute
    capability runs no engine, is refused with each engine's reason."""
    monkeypatch.setattr("code.common.systems.this_machine", lambda: systems.DetectedSystem())
    system = f"{model}x8"
    for _, benchmark, target in BENCHMARKS:
        for scenario in Scenario:
            try:
                config = resolve_config(benchmark, scenario, system, WorkloadSetting(accuracy_target=target), {})
            except NoEngineError as error:
                assert benchmark is Benchmark.GPTJ and error.skipped, (model, scenario)
                continue
            assert config.ladder and config.rung is config.ladder[0], (model, benchmark, scenario)


def test_a_class_written_twice_for_one_system_names_both_files(tmp_path):
    """NVIDIA's habit (a class in the scenario's __init__.py) beside make add_system's (custom.py): refused, naming
    both files, before any run."""
    import shutil
    import subprocess

    from code.common.paths import REPO_ROOT

    for folder in ("code", "configs", "scripts", "systems"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    scenario = tmp_path / "configs" / "bert" / "Offline"
    block = ("\n\n@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)\n"
             "class A100_SXM4_40GBx8(OfflineBaseConfig):\n    gpu_batch_size = 256\n    offline_expected_qps = 1.0\n")
    (scenario / "__init__.py").write_text((scenario / "__init__.py").read_text() + block)
    (scenario / "custom.py").write_text("from code.common.constants import AccuracyTarget, HarnessType, PowerSetting\n"
                                        "from configs.bert.Offline import OfflineBaseConfig\n"
                                        "from code.config.registry import ConfigRegistry\n" + block)
    info = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--benchmarks=bert-99",
                           "--scenarios=offline", "--system_name=A100_SXM4_40GBx8"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert info.returncode == 2, info.stdout
    assert "configs/bert/Offline/custom.py" in info.stderr and "configs/bert/Offline/__init__.py" in info.stderr
    assert "keep one of the two classes" in info.stderr and "Traceback" not in info.stderr
