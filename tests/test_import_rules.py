"""code/common depends on nothing above it: not on configs/, not on a benchmark package.

Dependencies point one way (configs -> code/common, benchmarks -> code/common); an import against that arrow makes a
package cycle, so code/common could no longer be imported or reused without the registry or a benchmark. Reading
the source (every ``import``, at module level or inside a function) rather than importing it also catches the
lazy imports that a run would only reach on some paths.
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
FORBIDDEN = ("configs", "code.actions", "code.submission", "code.harness", *BENCHMARK_PACKAGES)
COMMON_MODULES = sorted(COMMON.glob("*.py"))


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


def test_benchmark_packages_are_found():
    assert {"code.bert", "code.gptj"} <= set(BENCHMARK_PACKAGES)


@pytest.mark.parametrize("path", COMMON_MODULES, ids=lambda p: p.name)
def test_common_imports_nothing_above_it(path):
    bad = [name for name in imported_modules(path)
           if any(name == root or name.startswith(root + ".") for root in FORBIDDEN)]
    assert not bad, f"code/common/{path.name} imports {bad}: code/common must not depend on configs/ or a benchmark"


@pytest.mark.parametrize("path", COMMON_MODULES, ids=lambda p: p.name)
def test_common_module_imports(path):
    importlib.import_module(f"code.common.{path.stem}")
