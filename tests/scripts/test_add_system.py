"""make add_system on a copy of the repo: stubs that import, validate and resolve; a system description."""

import json
import os
import shlex
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


def test_a_gpu_system_derives_from_its_gpu_model_not_from_stubs():
    """A system of GPUs named from another machine (here: no GPU) gets classes derived from its GPU model's, the
    rates scaled by the count its name gives, or by ``gpu_count`` for a name without one."""
    from code.common.constants import Benchmark, Scenario
    from code.common.gpu_models import by_name
    from scripts.add_system import model_classes_of, model_subclasses

    model = by_name("A100_SXM4_40GB")
    classes = model_classes_of(model, Benchmark.BERT, Scenario.Offline)
    assert sorted(c.__name__ for c in classes.values()) == ["A100_SXM4_40GB", "A100_SXM4_40GB_HighAccuracy"]
    counted = model_subclasses("A100_SXM4_40GBx8", Scenario.Offline, classes, 8)
    assert "class A100_SXM4_40GBx8(Offline.A100_SXM4_40GB):" in counted and "gpu_count" not in counted
    named = model_subclasses("MyBox", Scenario.Offline, classes, 8)
    assert "class MyBox(Offline.A100_SXM4_40GB):" in named and named.count("    gpu_count = 8") == 2


def test_every_benchmark_brings_its_starting_values():
    """add_system knows no benchmark by name: each one's configs/<bench>/new_system.py covers every scenario of a
    machine without GPUs, and both accuracy classes' precisions."""
    import importlib

    from code.common.constants import Benchmark, Scenario

    for benchmark in Benchmark:
        start = importlib.import_module(f"configs.{benchmark.package}.new_system")
        assert set(start.STARTING_VALUES) == set(Scenario), benchmark
        assert len(start.PRECISION) == 2


def _repo_copy(tmp_path):
    for folder in ("code", "configs", "scripts", "systems"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)  # ruff's settings, for the lint check of what was written
    return tmp_path


def _tree_state(root):
    """Every file under configs/ and systems/ with its bytes: what a refused add_system must leave unchanged."""
    return {path: path.read_bytes() for folder in ("configs", "systems") for path in (root / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def test_keyword_or_invalid_system_name_is_refused_before_anything_is_written(tmp_path):
    root = _repo_copy(tmp_path)
    before = _tree_state(root)
    for name, fix in [("class", "try --system_name=class_system"), ("None", "try --system_name=None_system"),
                      ("2box", "try --system_name=box"), ("ConfigRegistry", "pick another"),
                      ("H100_SXM_80GB", "names a GPU model, not a system (its classes hold one GPU's values for every "
                       "system of it): name the system with its GPU count, --system_name=H100_SXM_80GBx<count>, or "
                       "give it a name of its own with --gpu_model=H100_SXM_80GB --gpu_count=<count>"),
                      ("Box_HighAccuracy", "pick another")]:
        refused = subprocess.run([sys.executable, "-m", "scripts.add_system", f"--system_name={name}"], cwd=root,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stdout
        assert fix in refused.stderr and "Traceback" not in refused.stderr
        assert _tree_state(root) == before


def test_a_broken_custom_py_is_named_with_its_line_not_a_traceback(tmp_path):
    root = _repo_copy(tmp_path)
    custom = root / "configs" / "bert" / "Offline" / "custom.py"
    custom.write_text("class class(OfflineBaseConfig):\n    pass\n")  # what an older add_system could leave
    for args in (["-m", "scripts.add_system", "--system_name=Box"],
                 ["-m", "code.main", "--action=info", "--system_name=CPU"]):
        result = subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2
        assert f"ERROR: {custom} is not valid Python (line 1: invalid syntax); fix that line" in result.stderr
        assert "Traceback" not in result.stderr


def test_stubs_are_written_atomically_and_rolled_back_when_rejected(tmp_path, monkeypatch):
    """A stub the registry rejects puts every custom.py back as it was; no temporary file is left."""
    from scripts import add_system

    monkeypatch.setattr(add_system, "REPO_ROOT", tmp_path)
    folder = tmp_path / "configs" / "bert" / "Offline"
    folder.mkdir(parents=True)
    earlier = add_system.HEADER + add_system.import_block(add_system.Benchmark.BERT, add_system.Scenario.Offline)
    earlier += "# the user's own classes\n"
    (folder / "custom.py").write_text(earlier)
    for scenario in ("Server", "SingleStream"):
        (tmp_path / "configs" / "bert" / scenario).mkdir(parents=True)

    def rejected(*args, **kwargs):
        raise add_system.ConfigError("field 'gpu_batch_size' = 0 is out of range")

    monkeypatch.setattr(add_system.ConfigRegistry, "get", rejected)
    try:
        add_system.add_configs("RollbackBox", add_system.Benchmark.BERT, gpus=None, dry_run=False)
    except add_system.ConfigError as error:
        assert "out of range" in str(error)
    else:
        raise AssertionError("the rejected stubs were kept")
    assert (folder / "custom.py").read_text() == earlier
    assert not (tmp_path / "configs" / "bert" / "Server" / "custom.py").exists()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["custom.py"]


def test_a_second_system_joins_an_existing_custom_py(tmp_path):
    """custom.py is imported once per process: the classes appended to a file already imported register too."""
    root = _repo_copy(tmp_path)

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=120)

    for name in ("BoxA_x2", "BoxB_x2"):
        added = run("-m", "scripts.add_system", f"--system_name={name}")
        assert added.returncode == 0, added.stderr
    custom = (root / "configs" / "bert" / "Offline" / "custom.py").read_text()
    assert "class BoxA_x2(" in custom and "class BoxB_x2(" in custom
    for name in ("BoxA_x2", "BoxB_x2"):
        info = run("-m", "code.main", "--action=info", f"--system_name={name}", "--benchmarks=bert",
                   "--scenarios=offline")
        assert info.returncode == 0 and f"config class {name})" in info.stdout, info.stderr


def test_a_known_gpu_model_gets_classes_derived_from_its_own_that_pass_lint(tmp_path):
    """H200_SXM_141GBx2 starts from H200_SXM_141GB's classes (not the generic starting values), which resolve as
    the model's would; a custom.py written by an earlier add_system gets the imports they need; ruff passes it."""
    from scripts.add_system import EARLIER_IMPORTS

    root = _repo_copy(tmp_path)
    earlier = root / "configs" / "bert" / "Offline" / "custom.py"
    earlier.write_text('"""An earlier add_system\'s file."""\n\n'
                       + EARLIER_IMPORTS.format(bench="bert", scenario="Offline", base="OfflineBaseConfig")
                       + "\n\n@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)\n"
                       "class OldBox(OfflineBaseConfig):\n    gpu_batch_size = 8\n    offline_expected_qps = 2.0\n")

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=120)

    for name in ("H200_SXM_141GBx2", "MyBox_x2"):
        added = run("-m", "scripts.add_system", f"--system_name={name}")
        assert added.returncode == 0, added.stderr
    assert added.stdout.count("(starting values of a machine without GPUs)") == 6  # MyBox_ is no GPU model: stubs
    for bench in ("bert", "gptj"):
        for scenario in ("Offline", "Server", "SingleStream"):
            custom = (root / "configs" / bench / scenario / "custom.py").read_text()
            assert f"class H200_SXM_141GBx2({scenario}.H200_SXM_141GB):" in custom
            assert f"class H200_SXM_141GBx2_HighAccuracy({scenario}.H200_SXM_141GB_HighAccuracy):" in custom
            assert "gpu_batch_size" not in custom.split("class H200_SXM_141GBx2(")[1].split("class MyBox_x2")[0]
    assert "class OldBox(OfflineBaseConfig)" in earlier.read_text()
    lint = run("-m", "ruff", "check", "--no-cache", "configs")
    assert lint.returncode == 0, lint.stdout + lint.stderr

    info = run("-m", "code.main", "--action=info", "--system_name=H200_SXM_141GBx2", "--benchmarks=bert-99.9",
               "--scenarios=offline")
    assert info.returncode == 0, info.stderr
    assert "config class H200_SXM_141GBx2_HighAccuracy)" in info.stdout
    assert "15000.0" in info.stdout  # the first engine's rate, x 2
    assert "[H200_SXM_141GB_HighAccuracy engine_ladder[fp8-fast-accum] x 2 GPUs]" in info.stdout
    old = run("-m", "code.main", "--action=info", "--system_name=OldBox", "--benchmarks=bert", "--scenarios=offline")
    assert old.returncode == 0 and "config class OldBox)" in old.stdout, old.stderr


def test_a_hand_written_custom_py_without_the_imports_is_refused_naming_them(tmp_path):
    root = _repo_copy(tmp_path)
    custom = root / "configs" / "bert" / "Server" / "custom.py"  # Offline's is written before Server's is read
    custom.write_text("from configs.bert.Server import ServerBaseConfig  # a file of the user's own\n")
    before = _tree_state(root)
    refused = subprocess.run([sys.executable, "-m", "scripts.add_system", "--system_name=H200_SXM_141GBx2"],
                             cwd=root, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "lacks imports that the classes make add_system writes need: add `from code.common" in refused.stderr
    assert "`from configs.bert import Server`" in refused.stderr
    assert _tree_state(root) == before  # bert/Offline/custom.py, written first, is taken back


def test_what_add_system_writes_for_a_long_system_name_passes_lint(tmp_path):
    """make lint (ruff over the whole checkout) passes after make add_system, whatever the name's length: a class
    header too long for a line is wrapped, and a name too long for any header is refused before anything is
    written."""
    root = _repo_copy(tmp_path)

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=120)

    long_name = "A_Very_Long_System_Name_That_Goes_On_And_On_For_Quite_A_While_In_The_Lab_x8"
    for name in (long_name, "H100_SXM_80GB_With_A_Very_Long_Name_Of_Its_Own_Given_By_Its_Owners_Lab_x8",
                 "H200_SXM_141GBx8"):
        added = run("-m", "scripts.add_system", f"--system_name={name}")
        assert added.returncode == 0, added.stderr
    lint = run("-m", "ruff", "check", "--no-cache", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    info = run("-m", "code.main", "--action=info", f"--system_name={long_name}", "--benchmarks=bert-99.9",
               "--scenarios=offline")
    assert info.returncode == 0 and f"config class {long_name}_HighAccuracy)" in info.stdout, info.stderr

    before = _tree_state(root)
    too_long = run("-m", "scripts.add_system", "--system_name=" + "B" * 100)
    assert too_long.returncode == 2 and "at most 90 characters" in too_long.stderr
    assert _tree_state(root) == before


def test_an_unknown_benchmark_is_refused_with_the_list_before_anything_is_written(tmp_path):
    root = _repo_copy(tmp_path)
    before = _tree_state(root)
    refused = subprocess.run([sys.executable, "-m", "scripts.add_system", "--system_name=MyBox_x2",
                              "--benchmarks=bert,resnet"], cwd=root, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stdout
    assert "error: --benchmarks=bert,resnet: unknown benchmark 'resnet'; valid choices: bert, gptj" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    assert _tree_state(root) == before


def make_add_system(*variables: str, dry: bool = False) -> subprocess.CompletedProcess:
    """`make add_system ...` in the checkout (``dry``: make -n, what it would run)."""
    return subprocess.run(["make", "--no-print-directory", *(["-n"] if dry else []), "-C", str(REPO_ROOT),
                           "add_system", *variables], capture_output=True, text=True, timeout=300)


def test_make_add_system_passes_a_name_with_a_space_whole_to_be_refused():
    before = _tree_state(REPO_ROOT)
    refused = make_add_system("SYSTEM=My Box")
    assert refused.returncode == 2 and "unrecognized arguments" not in refused.stderr, refused.stderr
    assert ("error: --system_name=My Box must be a valid Python class name (letters, digits, _; not starting with a "
            "digit): try --system_name=My_Box") in refused.stderr
    assert _tree_state(REPO_ROOT) == before


def test_a_named_system_on_a_machine_without_gpus_says_it_gets_none_and_how_to_name_them(tmp_path):
    """MyBox on a machine without GPUs: CPU stubs and no accelerators, said on stderr with the make variables that
    name its GPUs; given them, its classes derive from the model's and state the count."""
    root = _repo_copy(tmp_path)
    no_gpu = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # this machine as one without GPUs, whatever it has
    plain = subprocess.run([sys.executable, "-m", "scripts.add_system", "--system_name=MyBox", "--benchmarks=bert"],
                           cwd=root, capture_output=True, text=True, timeout=120, env=no_gpu)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.startswith("warning: MyBox is written as a machine without GPUs (CPU stubs; "
                                   "accelerators_per_node 0 in its description): this machine has none, and none was "
                                   "named. For a system of GPUs: make add_system SYSTEM=MyBox GPU_MODEL=<model> "
                                   "GPU_COUNT=<count> (--gpu_model/--gpu_count; models: H100_SXM_80GB, ")
    assert json.loads((root / "systems" / "MyBox.json").read_text())["accelerators_per_node"] == "0"

    command = shlex.split(make_add_system("SYSTEM=MyGpuBox", "GPU_MODEL=A100_SXM4_40GB", "GPU_COUNT=8",
                                          dry=True).stdout.splitlines()[-1])
    assert command[1:] == ["-m", "scripts.add_system", "--system_name=MyGpuBox", "--gpu_model=A100_SXM4_40GB",
                           "--gpu_count=8"]
    named = subprocess.run([sys.executable, *command[1:], "--benchmarks=bert"], cwd=root, capture_output=True,
                           text=True, timeout=120, env=no_gpu)
    assert named.returncode == 0 and "warning" not in named.stderr, named.stderr
    assert "[add_system] system: MyGpuBox, 8x A100_SXM4_40GB (" in named.stdout
    custom = (root / "configs" / "bert" / "Offline" / "custom.py").read_text()
    assert "class MyGpuBox(Offline.A100_SXM4_40GB):" in custom and "    gpu_count = 8" in custom
    assert json.loads((root / "systems" / "MyGpuBox.json").read_text())["accelerators_per_node"] == "8"
