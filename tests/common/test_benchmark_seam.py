"""The benchmark seam (code/common/benchmarks.py): every benchmark module offers BenchmarkModule's functions with
its parameters, and what crosses the seam keeps the shape metadata.json records."""

from __future__ import annotations

import inspect

import pytest

from code.common.benchmarks import BENCHMARK_MODULES, AccuracyReport, BenchmarkModule, load_benchmark


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
