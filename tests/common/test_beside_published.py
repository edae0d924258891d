"""A run's figure set beside the best published one per GPU (code/mlperf/beside_published.py) in the summary and
report.md. Records are written and read back as metadata.json; their provenance is the one the benchmark's
``describe_inputs`` makes for the run's config, so the caveats read the words a real run records."""

from __future__ import annotations

from pathlib import Path

import pytest

from code.bert.benchmark import describe_inputs
from code.common.constants import Benchmark, Scenario, TestMode
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.mlperf.beside_published import beside_published, published_line
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord, read_record, write_record
from code.mlperf.summary import format_summary
from code.report.pages import REPORT_FILE, write_test_report


def provenance(**overrides: object) -> dict:
    """What a BERT run of these RUN_ARGS records as its provenance (describe_inputs, as the run calls it)."""
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(),
                            {"input_data": "synthetic", **overrides})
    return dict(describe_inputs(config, TestMode.PerformanceOnly))


REAL = {"model": "BERT-large", "weights": "build/models/bert/model.pytorch", "synthetic_inputs": False,
        "invalid_because": []}


def record(tmp_path: Path, system: str, value: float, gpus: int = 1, scenario: str = "Offline",
           unit: str = "samples/s", fields: dict | None = None, prov: dict | None = None,
           mode: str = "PerformanceOnly", not_submittable: tuple[str, ...] = (), benchmark: str = "bert-99",
           **sections: object) -> RunRecord:
    """A test's metadata.json, written and read back."""
    result = TestResult(scenario, mode, str(tmp_path), metric="m", value=value, unit=unit, valid=True,
                        not_submittable=list(not_submittable))
    devices = [f"cuda:{index}" for index in range(gpus)] or ["cpu"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_record(tmp_path, RunRecord.of(result, system_name=system, devices={"used": devices},
                                        config={"benchmark": benchmark, "fields": fields or {}, "sources": {}},
                                        provenance=REAL if prov is None else prov, **sections))
    return read_record(tmp_path)


def test_a_figure_per_gpu_beside_the_best_published(tmp_path):
    eight = record(tmp_path / "a", "H200_SXM_141GBx8", 66_112.0, gpus=8)
    assert published_line(eight) == ("published: 66,112 samples/s over 8 GPUs = 8,264 per H200_SXM_141GB = 90% of "
                                     "the best published (9,224: Dell XE9680_H200_SXM_141GBx8_TRT, v4.1)")
    beside = beside_published(eight)
    assert beside.per_gpu == 8264.0 and beside.ratio == pytest.approx(8264.0 / 9223.9)
    assert beside.cell() == "90% of Dell v4.1"
    one = record(tmp_path / "b", "H200_SXM_141GBx1", 7400.0, scenario="Server")
    assert published_line(one) == ("published: 7,400 samples/s per H200_SXM_141GB = 102% of the best published "
                                    "(7,261: Dell XE9680_H200_SXM_141GBx8_TRT, v4.1)")


def test_a_latency_compares_the_other_way(tmp_path):
    latency = record(tmp_path, "L4x1", 2.83, scenario="SingleStream", unit="ms")
    assert published_line(latency) == ("published: 2.83 ms = 132% of the best published L4 latency (2.138 ms: Lenovo "
                                       "Lenovo_2xL4_TRT, v4.1; lower is better)")
    assert beside_published(latency).cell() == "132% of Lenovo v4.1 latency"


def test_a_stand_in_or_a_small_model_is_not_comparable(tmp_path):
    stand_in = record(tmp_path / "a", "L4x1", 1100.0, fields={"gpu_as": "L4"})
    assert published_line(stand_in) == ("published: not comparable (stand-in for L4); the best published per L4 is "
                                        "1,029 samples/s: NVIDIA L4x1_TRT, v3.1")
    assert beside_published(stand_in).cell() == "not comparable"
    tiny = record(tmp_path / "b", "H100_SXM_80GBx1", 20_000.0, prov=provenance(model_name="tiny", weights="random"))
    assert tiny.model_label == "BERT-tiny" and tiny.caveats == ["small model", "synthetic"]
    assert published_line(tiny).startswith("published: not comparable (small model); the best published per "
                                           "H100_SXM_80GB is 9,110 samples/s: Supermicro")
    oracle = record(tmp_path / "c", "H100_SXM_80GBx1", 90_000.0, prov=provenance(backend="oracle"))
    assert oracle.model_label == "none (oracle backend)" and oracle.caveats == ["no model", "synthetic"]
    assert beside_published(oracle).not_comparable == "no model"


def test_a_synthetic_or_shortened_run_compares_and_says_so(tmp_path):
    quick = record(tmp_path, "H100_SXM_80GBx1", 8200.0, prov=provenance(weights="random"),
                   fields={"test_run": True}, not_submittable=("test run (--test_run)",))
    assert quick.model_label == "BERT-large" and quick.caveats == ["synthetic", "shortened"]
    assert published_line(quick).endswith("= 90% of the best published (9,110: Supermicro "
                                          "SYS_421GE_TNHR2_LCC_H100_SXM_80GBx8_TRT, v4.1); this run: synthetic, "
                                          "shortened")
    short = record(tmp_path / "b", "H100_SXM_80GBx1", 8200.0,
                   not_submittable=("shortened: min_duration 1000 ms (a submission needs 600000)",))
    assert short.caveats == ["shortened"]


@pytest.mark.parametrize("system,gpus,mode,benchmark", [
    ("CPU", 0, "PerformanceOnly", "bert-99"),  # no GPU
    ("H100_NVL_94GBx1", 1, "PerformanceOnly", "bert-99"),  # no published row for the model
    ("MyBox", 1, "PerformanceOnly", "bert-99"),  # --system_name without a GPU model
    ("H200_SXM_141GBx1", 1, "AccuracyOnly", "bert-99"),  # an accuracy test
    ("L4x1", 1, "PerformanceOnly", "gptj-99.9"),  # no row for that benchmark
])
def test_nothing_to_compare_says_nothing(tmp_path, system, gpus, mode, benchmark):
    quiet = record(tmp_path, system, 1000.0, gpus=gpus, mode=mode, benchmark=benchmark)
    assert beside_published(quiet) is None and published_line(quiet) is None
    assert "published" not in format_summary(system, tmp_path, [(benchmark, quiet.result, quiet)])


def test_the_summary_and_report_md_show_the_comparison(tmp_path):
    folder = tmp_path / "H200_SXM_141GBx1" / "bert-99" / "Offline"
    one = record(folder, "H200_SXM_141GBx1", 8264.0)
    text = format_summary("H200_SXM_141GBx1", tmp_path, [("bert-99", one.result, one)]).splitlines()
    figure = next(index for index, line in enumerate(text) if "m = 8,264.000 samples/s" in line)
    assert text[figure + 1] == f"      {published_line(one)}"
    (folder / "mlperf_log_detail.txt").write_text("")
    report = write_test_report(folder)
    assert f"- {published_line(one)}" in (folder / REPORT_FILE).read_text()
    assert report.published == "90% of Dell v4.1"
