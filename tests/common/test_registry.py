"""The one lazy registry (code/common/registry.py) behind backends and benchmarks."""

from __future__ import annotations

import sys

import pytest

from code.common.registry import LazyRegistry


def test_listing_imports_nothing_and_load_imports_one():
    registry = LazyRegistry("thing", {"json": "json:dumps", "module": "colorsys"})
    sys.modules.pop("colorsys", None)
    assert sorted(registry) == ["json", "module"] and "colorsys" not in sys.modules
    assert registry.load("json")({"a": 1}) == '{"a": 1}'
    assert registry.load("module").__name__ == "colorsys"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown thing 'c'; known: a, b"):
        LazyRegistry("thing", {"b": "json", "a": "json"}).load("c")
