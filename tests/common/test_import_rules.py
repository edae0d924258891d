"""Dependencies point one way: code/common depends on nothing above it, and the product (code/) on no tool or test.

configs -> code/common and benchmarks -> code/llm -> code/common; code/llm is a library that benchmarks share (no
benchmark.py), so it imports no benchmark either; an import against that arrow makes a package cycle, so
code/common could no longer be imported or reused without the registry or a benchmark. The tools under scripts/
(the bench, the agreement check, add_system) use the product, never the reverse, and the product reads no test
data: a harness installed without scripts/ and tests/ runs the same. Reading the source (every ``import``, at module
level or inside a function) rather than importing it also catches the lazy imports that a run would only reach on
some paths.

No modules of code/ import each other in a circle of any size, not even lazily or for types only: such a circle
is one idea split over several files (or a shared piece living in the wrong one), and a lazy or type-only import
that dodges the circle at load time leaves it in the design. Shared pieces go below them (errors in their own
module, a format's records in its library).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from code.common.paths import REPO_ROOT

COMMON = REPO_ROOT / "code" / "common"
# Packages code/common must not import: the config classes and every benchmark (a folder under code/ with a
# benchmark.py), plus the orchestration that sits above it.
BENCHMARK_PACKAGES = sorted(f"code.{p.parent.name}" for p in (REPO_ROOT / "code").glob("*/benchmark.py"))
# Libraries for benchmarks: above code/common, below every benchmark.
BENCHMARK_LIBRARIES = ("code.llm",)
FORBIDDEN = ("configs", "code.actions", "code.submission", "code.harness", *BENCHMARK_LIBRARIES, *BENCHMARK_PACKAGES)
COMMON_MODULES = sorted(COMMON.glob("*.py"))
LIBRARY_MODULES = sorted(p for lib in BENCHMARK_LIBRARIES for p in (REPO_ROOT / lib.replace(".", "/")).rglob("*.py"))
PRODUCT_MODULES = sorted((REPO_ROOT / "code").rglob("*.py"))
# Packages the product must not import: the tools and the tests.
TOOLS = ("scripts", "tests")
# The top-level packages of code/, each checked for two-file circles.
CODE_PACKAGES = sorted(p.parent.name for p in (REPO_ROOT / "code").glob("*/__init__.py"))
# Circles broken once and kept broken: each pair's second module moved a shared piece below both.
BROKEN_CIRCLES = (
    ("code.common.benchmarks", "code.common.devices"),  # the benchmark errors: code/common/benchmark_errors.py
    ("code.gptj.download_data", "code.gptj.calibration_data"),  # record conversion: code/llm/cnn_dailymail.py
    ("code.actions.run_harness", "code.actions.find_performance"),  # the child test: code/actions/test_process.py
    ("code.actions.run_harness", "code.actions.accuracy_gate"),
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


def two_file_cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every pair of modules that import each other, each pair once (in name order)."""
    return sorted((a, b) for a, imports in graph.items() for b in imports if a < b and a in graph[b])


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


CODE_GRAPH = import_graph(PRODUCT_MODULES)
CODE_CYCLES = two_file_cycles(CODE_GRAPH)


def test_benchmark_packages_are_found():
    assert {"code.bert", "code.gptj"} <= set(BENCHMARK_PACKAGES)
    assert not set(BENCHMARK_LIBRARIES) & set(BENCHMARK_PACKAGES), "a library for benchmarks has no benchmark.py"
    assert LIBRARY_MODULES


@pytest.mark.parametrize("path", LIBRARY_MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT / "code")))
def test_libraries_import_no_benchmark(path):
    above = ("configs", "code.actions", "code.submission", "code.harness", *BENCHMARK_PACKAGES)
    bad = [name for name in imported_modules(path)
           if any(name == root or name.startswith(root + ".") for root in above)]
    assert not bad, f"{path.relative_to(REPO_ROOT)} imports {bad}: a library for benchmarks depends on none of them"


@pytest.mark.parametrize("path", COMMON_MODULES, ids=lambda p: p.name)
def test_common_imports_nothing_above_it(path):
    bad = [name for name in imported_modules(path)
           if any(name == root or name.startswith(root + ".") for root in FORBIDDEN)]
    assert not bad, f"code/common/{path.name} imports {bad}: code/common must not depend on configs/ or a benchmark"


@pytest.mark.parametrize("path", COMMON_MODULES, ids=lambda p: p.name)
def test_common_module_imports(path):
    importlib.import_module(f"code.common.{path.stem}")


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
    assert len(PRODUCT_MODULES) > 20 and COMMON / "paths.py" in PRODUCT_MODULES


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


@pytest.mark.parametrize("package", CODE_PACKAGES)
def test_no_two_modules_import_each_other(package):
    inside = [pair for pair in CODE_CYCLES if any(m.startswith(f"code.{package}.") for m in pair)]
    assert not inside, f"{inside} import each other: move what both need into a module below them"


def test_no_modules_of_code_import_each_other_in_a_circle():
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
    assert two_file_cycles(graph) == []
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
    assert two_file_cycles(graph) == [("pkg.a", "pkg.b")]
