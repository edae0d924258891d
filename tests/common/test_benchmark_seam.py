"""The benchmark seam (code/mlperf/benchmarks.py): every benchmark module offers BenchmarkModule's functions with
its parameters, and what crosses the seam keeps the shape metadata.json records."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

from code.config.backends import declarations
from code.mlperf.backend_class import BackendClass
from code.mlperf.benchmarks import BENCHMARK_MODULES, AccuracyReport, BenchmarkModule, load_benchmark


@pytest.mark.parametrize("benchmark", list(BENCHMARK_MODULES))
def test_benchmark_modules_offer_the_protocol(benchmark):
    module = load_benchmark(benchmark)
    for name, member in inspect.getmembers(BenchmarkModule, inspect.isfunction):
        if name.startswith("_"):
            continue
        expected = [p for p in inspect.signature(member).parameters if p != "self"]
        assert list(inspect.signature(getattr(module, name)).parameters) == expected, (benchmark, name)


def test_accuracy_report_records_common_keys_then_figures():
    report = AccuracyReport(metric="f1", value=90.5, unit="%", passed=True, failures=[], summary="f1 = 90.5",
                            figures={"exact_match": 83.0, "f1": 90.5})
    assert list(report.as_dict()) == ["metric", "value", "unit", "passed", "failures", "summary", "exact_match", "f1"]
    assert report.as_dict()["exact_match"] == 83.0


@pytest.mark.parametrize("benchmark", list(BENCHMARK_MODULES))
def test_backend_classes_offer_the_one_backend_protocol(benchmark):
    """Every declared backend class of every benchmark answers ``code.mlperf.backend_class.BackendClass``'s calls, and
    each benchmark's protocol is that generic one with its own context and batches."""
    package = importlib.import_module(f"code.{benchmark.package}.backends")
    protocol = next(value for name, value in vars(package).items()
                    if name.endswith("BackendClass") and value is not BackendClass)
    assert typing.get_origin(protocol) is BackendClass
    assert typing.get_args(protocol)[0] is package.BackendContext
    for declared in declarations(benchmark):
        cls = package.backend_class(declared.name)
        for name, member in inspect.getmembers(BackendClass, inspect.isfunction):
            if name.startswith("_"):
                continue
            expected = [p for p in inspect.signature(member).parameters if p != "self"]
            actual = [p for p in inspect.signature(getattr(cls, name)).parameters if p != "self"]
            assert actual == expected, (benchmark, declared.name, name)
        assert callable(cls)
