"""Dependencies point one way: each room of code/ (and configs/) stands on a floor and imports only rooms below it,
and the product (code/) imports no tool or test.

A room is a package of code/ (``code.common``, ``code.config``, ...), ``code.main`` or ``configs``; its floor is
stated in ``FLOORS`` and a room imports only rooms on a lower floor. The plumbing (code/common) is the ground; the
config mechanism (code/config) stands on it, MLPerf's rules and records (code/mlperf) on both; the benchmarks and
their libraries above those; the config classes (configs/), the programs of one LoadGen test (code/processes), the
tuning that runs them (code/tuning), the actions (code/actions) and the entry point (code/main.py) on top. A room
that names a higher one does so by a registry's text (``code/common/registry.py``), never by an import, so a lower
room can be imported, tested and reused without what stands above it. A benchmark imports no other benchmark: what
two share is a library (code/llm) below both. The tools under scripts/ (the bench, the agreement check, add_system)
use the product, never the reverse, and the product reads no test data: a harness installed without scripts/ and
tests/ runs the same. Reading the source (every ``import``, at module level or inside a function) rather than
importing it also catches the lazy imports that a run would only reach on some paths.

No modules import each other in a circle of any size, not even lazily or for types only: such a circle is one idea
split over several files (or a shared piece living in the wrong one), and a lazy or type-only import that dodges the
circle at load time leaves it in the design. Shared pieces go below them (errors in their own module, a format's
records in its library).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from code.common.paths import REPO_ROOT

# Each room's floor: a room imports only rooms on a lower floor (the ground is 1).
FLOORS = {
    "code.common": 1,  # plumbing: paths, logs, locks, files, downloads, faults, systems and GPU models, rounds
    "code.config": 2,  # the config mechanism: fields, classes, registry, ladders, tuned values, resolution
    "code.harness": 2,  # the C++ core over LoadGen and the workers that feed it
    "code.mlperf": 3,  # MLPerf's rules and records: arguments, benchmarks seam, devices, inputs, logs, verdicts
    "code.numerics": 3,  # numeric building blocks (8-bit GEMMs) and their switches
    "code.llm": 4,  # what the LLM benchmarks share
    "code.bert": 4,
    "code.submission": 4,
    "code.gptj": 5,
    "code.llama31": 5,
    "code.report": 5,
    "configs": 6,  # the config classes
    "code.processes": 6,  # the programs of one LoadGen test
    "code.tuning": 7,  # what a run runs: the accuracy gate's engine, the probe's and searches' LoadGen settings
    "code.actions": 8,  # one module per ``--action``
    "code.main": 9,
}
# Rooms that are benchmarks (a folder under code/ with a benchmark.py): none imports another.
BENCHMARK_PACKAGES = sorted(f"code.{p.parent.name}" for p in (REPO_ROOT / "code").glob("*/benchmark.py"))
LOWER_ROOMS = ("common", "config", "mlperf")  # each module of these imports on its own
LOWER_MODULES = sorted(p for room in LOWER_ROOMS for p in (REPO_ROOT / "code" / room).glob("*.py"))
PRODUCT_MODULES = sorted((REPO_ROOT / "code").rglob("*.py"))
# Every module that stands in a room (code/__init__.py only marks the package).
ROOMED_MODULES = [p for p in PRODUCT_MODULES if p != REPO_ROOT / "code" / "__init__.py"] + sorted(
    (REPO_ROOT / "configs").rglob("*.py"))
# Packages the product must not import: the tools and the tests.
TOOLS = ("scripts", "tests")
# Circles broken once and kept broken: each pair's second module moved a shared piece below both.
BROKEN_CIRCLES = (
    ("code.mlperf.benchmarks", "code.mlperf.devices"),  # the benchmark errors: code/common/benchmark_errors.py
    ("code.gptj.download_data", "code.gptj.calibration_data"),  # record conversion: code/llm/cnn_dailymail.py
    ("code.actions.run_harness", "code.tuning.find_performance"),  # the child test: code/processes/test_process.py
    ("code.actions.run_harness", "code.tuning.accuracy_gate"),
    ("code.config.registry", "code.config.any_gpu"),  # the class and its rules: code/config/classes.py
)


def imported_modules(path: Path) -> list[str]:
    """Every absolute module name an ``import`` or ``from ... import`` in the file names, nested ones included."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """The dotted name Python imports the file under (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path], root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """Module -> the other modules among ``paths`` it imports (at module level or inside a function)."""
    modules = {module_name(path, root): path for path in paths}
    return {name: {other for other in imported_modules(path) if other in modules and other != name}
            for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that reach each other through imports (a strongly connected component of two or more,
    Tarjan's algorithm), each sorted: a circle of any size, type-only and lazy imports included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


CODE_GRAPH = import_graph(ROOMED_MODULES)


def room_of(module: str) -> str:
    """The room a module stands in: its package under code/ (``code.config``), ``code.main``, or ``configs``."""
    parts = module.split(".")
    return "configs" if parts[0] == "configs" else ".".join(parts[:2])


def imports_down(module: str, imported: list[str], floors: dict[str, int]) -> list[str]:
    """The imports of ``module`` (into other rooms among ``floors``) that do not run down to a lower floor."""
    here = floors[room_of(module)]
    return [name for name in imported
            if room_of(name) in floors and room_of(name) != room_of(module) and floors[room_of(name)] >= here]


def test_every_room_has_a_floor():
    rooms = {room_of(module_name(path)) for path in ROOMED_MODULES}
    assert rooms == set(FLOORS), f"rooms without a floor: {sorted(rooms - set(FLOORS))}; gone: " \
                                 f"{sorted(set(FLOORS) - rooms)}: state each room's floor in FLOORS"


@pytest.mark.parametrize("path", ROOMED_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_room_imports_only_rooms_below_it(path):
    module = module_name(path)
    bad = imports_down(module, imported_modules(path), FLOORS)
    assert not bad, (f"{path.relative_to(REPO_ROOT)} (floor {FLOORS[room_of(module)]}) imports {bad}, which stand "
                     "on its floor or above: move what it needs below it")


def test_the_floor_check_sees_an_import_running_back_up():
    floors = {"code.common": 1, "code.config": 2, "code.mlperf": 3}
    assert imports_down("code.config.fields", ["code.common.paths", "code.config.ladder"], floors) == []
    assert imports_down("code.config.fields", ["code.mlperf.devices"], floors) == ["code.mlperf.devices"]


def test_benchmark_packages_are_found():
    assert {"code.bert", "code.gptj"} <= set(BENCHMARK_PACKAGES)
    assert "code.llm" not in BENCHMARK_PACKAGES, "a library for benchmarks has no benchmark.py"


@pytest.mark.parametrize("path", [p for p in PRODUCT_MODULES if room_of(module_name(p)) in BENCHMARK_PACKAGES],
                         ids=lambda p: str(p.relative_to(REPO_ROOT / "code")))
def test_a_benchmark_imports_no_other_benchmark(path):
    own = room_of(module_name(path))
    bad = [name for name in imported_modules(path) if room_of(name) in BENCHMARK_PACKAGES and room_of(name) != own]
    assert not bad, f"{path.relative_to(REPO_ROOT)} imports {bad}: what two benchmarks share goes into a library"


@pytest.mark.parametrize("path", LOWER_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "code")))
def test_a_lower_module_imports_on_its_own(path):
    importlib.import_module(module_name(path))


def _test_data_paths(path: Path) -> list[str]:
    """String constants, docstrings aside, that name the tests folder or its fixtures as a path."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value in ("tests", "fixtures") or node.value.startswith(("tests/", "fixtures/")))
    ]


def test_product_modules_are_found():
    assert len(PRODUCT_MODULES) > 20 and REPO_ROOT / "code" / "common" / "paths.py" in PRODUCT_MODULES


@pytest.mark.parametrize("path", PRODUCT_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "code")))
def test_product_imports_no_tool(path):
    bad = [name for name in imported_modules(path)
           if any(name == root or name.startswith(root + ".") for root in TOOLS)]
    assert not bad, f"{path.relative_to(REPO_ROOT)} imports {bad}: code/ must not depend on scripts/ or tests/"


@pytest.mark.parametrize("path", PRODUCT_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "code")))
def test_product_reads_no_test_data(path):
    named = _test_data_paths(path)
    assert not named, f"{path.relative_to(REPO_ROOT)} names {named}: test data is no input of the product"


def test_the_rules_see_imports_and_paths(tmp_path):
    """The checks would catch what they forbid: a nested tool import and a fixture path built from parts."""
    module = tmp_path / "m.py"
    module.write_text(
        '"""Reads tests/fixtures in its docstring only."""\n'
        "def f():\n"
        "    from scripts.bench import cli\n"
        '    return ROOT / "tests" / "fixtures" / "squad_tiny.json"\n'
    )
    assert "scripts.bench" in imported_modules(module)
    assert sorted(_test_data_paths(module)) == ["fixtures", "tests"]


def test_no_modules_import_each_other_in_a_circle():
    """No circle of any size: three modules that import each other in turn are one idea split in three."""
    found = circles(CODE_GRAPH)
    assert not found, f"these modules import each other in a circle: {found}; move what they share below them"


def planted_graph(root: Path, modules: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of a package ``pkg`` under ``root`` holding these modules (name -> source)."""
    package = root / "pkg"
    package.mkdir()
    for name, source in {"__init__": "", **modules}.items():
        (package / f"{name}.py").write_text(source)
    return import_graph(sorted(package.glob("*.py")), root)


def test_the_circle_check_sees_a_planted_three_file_circle(tmp_path):
    graph = planted_graph(tmp_path, {
        "a": "from pkg.b import g\n",
        "b": "def g():\n    from pkg.c import h\n    return h\n",
        "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n",
        "d": "from pkg.a import f\n",
    })
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


@pytest.mark.parametrize("pair", BROKEN_CIRCLES, ids=lambda pair: pair[1])
def test_broken_circles_stay_broken(pair):
    first, second = pair
    assert first in CODE_GRAPH and second in CODE_GRAPH, f"{pair}: a module was renamed; name it here again"
    assert first not in CODE_GRAPH[second] or second not in CODE_GRAPH[first], f"{first} and {second} import each other"


def test_the_cycle_check_sees_a_lazy_circle(tmp_path):
    """Two files that import each other, one of them inside a function, make a circle; a one-way import does not."""
    graph = planted_graph(tmp_path, {
        "a": "from pkg.b import g\nfrom pkg.c import h\n",
        "b": "def g():\n    from pkg.a import f\n    return f\n",
        "c": "import pkg\n",
    })
    assert graph["pkg.c"] == {"pkg"}
    assert circles(graph) == [["pkg.a", "pkg.b"]]
