"""make add_system on a copy of the repo: stubs that import, validate and resolve; a system description."""

import json
import shutil
import subprocess
import sys

from code.common.paths import REPO_ROOT


def test_add_system_writes_stubs_that_resolve(tmp_path):
    for folder in ("code", "configs", "scripts", "systems"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)

    added = run("-m", "scripts.add_system", "--system_name=MyBox_x2")
    assert added.returncode == 0, added.stderr
    for bench in ("bert", "gptj"):
        for scenario in ("Offline", "Server", "SingleStream"):
            custom = (tmp_path / "configs" / bench / scenario / "custom.py").read_text()
            assert "class MyBox_x2(" in custom and "class MyBox_x2_HighAccuracy(MyBox_x2)" in custom
    description = json.loads((tmp_path / "systems" / "MyBox_x2.json").read_text())
    assert description["system_name"] == "MyBox_x2" and "accelerator_model_name" in description

    again = run("-m", "scripts.add_system", "--system_name=MyBox_x2")
    assert again.returncode == 0 and "already configured" in again.stdout

    info = run("-m", "code.main", "--action=info", "--system_name=MyBox_x2", "--scenarios=offline,server",
               "--benchmarks=bert-99.9")
    assert info.returncode == 0, info.stderr
    assert "config class MyBox_x2_HighAccuracy" in info.stdout
    assert "offline_expected_qps" in info.stdout and "[MyBox_x2]" in info.stdout
    gptj = run("-m", "code.main", "--action=info", "--system_name=MyBox_x2", "--benchmarks=gptj")
    assert gptj.returncode == 0, gptj.stderr
    assert "gptj-99 Offline" in gptj.stdout and "'tiny'" in gptj.stdout  # no GPU here: the CPU stub

    bad = run("-m", "scripts.add_system", "--system_name=my-box")
    assert bad.returncode == 2 and "valid Python class name" in bad.stderr


def test_bert_gpu_stubs_set_the_gelu_epilogue_per_accuracy_target():
    """On a GPU the 99% BERT class gets the tanh GELU epilogue and the 99.9% class the erf kernel (bert_gpu.md)."""
    from code.common.constants import Benchmark, Scenario
    from scripts.add_system import stub_classes

    text = stub_classes("MyGpu_x1", Benchmark.BERT, Scenario.Offline, on_gpu=True)
    normal, high = text.split("class MyGpu_x1_HighAccuracy")
    assert "gelu_in_gemm = True" in normal and "gelu_in_gemm = False" in high
    assert "gelu_in_gemm" not in stub_classes("MyCpu", Benchmark.BERT, Scenario.Offline, on_gpu=False)


def test_every_benchmark_brings_its_starting_values():
    """add_system knows no benchmark by name: each one's configs/<bench>/new_system.py covers every scenario, for a
    GPU and for a CPU-only machine, and both accuracy classes' precisions."""
    import importlib

    from code.common.constants import Benchmark, Scenario

    for benchmark in Benchmark:
        start = importlib.import_module(f"configs.{benchmark.value}.new_system")
        assert set(start.STARTING_VALUES) == set(Scenario), benchmark
        for scenario in Scenario:
            assert set(start.STARTING_VALUES[scenario]) == {"gpu", "cpu"}, (benchmark, scenario)
        assert set(start.PRECISION) == {"gpu", "cpu"} and set(start.BY_TARGET) <= {"gpu", "cpu"}
