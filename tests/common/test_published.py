"""The best published results per GPU (code/common/published_results.csv, code/common/published.py) and the
configs' ratios derived from them (code/common/gpu_models.py)."""

from __future__ import annotations

import csv
import re

import pytest

from code.common import gpu_models
from code.common.published import PUBLISHED_CSV, Published, best, published_results

SCENARIOS = {"Offline", "Server", "SingleStream"}


def test_every_row_names_a_gpu_model_a_source_and_a_per_gpu_figure():
    rows = published_results()
    assert len(rows) >= 20
    with PUBLISHED_CSV.open(newline="") as file:
        assert len(list(csv.DictReader(file))) == len(rows)
    keys = [(row.benchmark, row.scenario, row.gpu_model) for row in rows]
    assert len(keys) == len(set(keys)), "one row per benchmark, scenario and GPU model"
    for row in rows:
        model = gpu_models.by_name(row.gpu_model)
        assert model is not None and model.name == row.gpu_model, row
        assert row.benchmark in ("bert-99", "bert-99.9", "gptj-99", "llama3.1-8b") and row.scenario in SCENARIOS, row
        assert row.unit == ("ms" if row.scenario == "SingleStream" else "samples/s"), row
        assert row.lower_is_better is (row.unit == "ms")
        # Per GPU = the system's figure / its GPUs, to the table's rounding; a latency is one GPU's, not divided.
        expected = row.system_figure if row.lower_is_better else row.system_figure / row.gpus
        assert row.per_gpu == pytest.approx(expected, rel=2e-4), row
        assert re.fullmatch(rf"https://github\.com/mlcommons/inference_results_{row.round}/tree/main/closed/"
                            rf"{row.submitter}/results/{re.escape(row.system)}", row.source_url), row


def test_the_figures_read_from_the_results_repositories():
    # Read from the results tables of mlcommons/inference_results_v4.1 and v5.0 (system figure / 8 GPUs).
    assert best("bert-99", "Offline", "H200_SXM_141GB").per_gpu == 9223.9  # Dell 73,791.0
    assert best("bert-99", "Server", "H200_SXM_141GB").system_figure == 58091.3
    assert best("bert-99.9", "Server", "H200_SXM_141GB").describe() == (
        "GigaComputing GIGABYTE_G593_SD1_H200_SXM_141GBx8_TRT, v4.1")
    assert best("bert-99", "Offline", "H100_SXM_80GB").system_figure == 72876.0  # Supermicro
    # GPT-J's tables state tokens/s: 21,813.4 / 69 tokens per sample / 8 GPUs.
    assert best("gptj-99", "Server", "H200_SXM_141GB").per_gpu == pytest.approx(21813.4 / 69 / 8, abs=0.01)


def test_the_best_is_the_highest_rate_or_the_lowest_latency():
    def row(scenario: str, figure: float, unit: str, submitter: str) -> Published:
        return Published("bert-99", scenario, "L4", figure, unit, "v4.1", submitter, "S", 1, figure, "u")

    rows = (row("Offline", 900.0, "samples/s", "A"), row("Offline", 1000.0, "samples/s", "B"),
            row("SingleStream", 2.5, "ms", "A"), row("SingleStream", 2.1, "ms", "B"))
    assert best("bert-99", "Offline", "L4", rows).submitter == "B"
    assert best("bert-99", "SingleStream", "L4", rows).per_gpu == 2.1
    assert best("bert-99", "Server", "L4", rows) is None and best("gptj-99", "Offline", "L4", rows) is None


def test_the_configs_ratios_come_from_the_same_table():
    h100 = {scenario: best("bert-99", scenario, "H100_SXM_80GB").per_gpu for scenario in ("Offline", "Server")}
    l40s = gpu_models.by_name("L40S").published
    assert l40s["bert-99 Offline"] == round(3475.95 / h100["Offline"], 3)
    assert l40s["gptj-99 Offline"] == round(12.664 / best("gptj-99", "Offline", "H100_SXM_80GB").per_gpu, 3)
    # No 40 GB result: the 80 GB's stands for it; their GPT-J result predates TensorRT-LLM and is left out.
    assert gpu_models.by_name("A100_SXM4_40GB").published == gpu_models.by_name("A100_SXM4_80GB").published
    assert set(gpu_models.by_name("A100_SXM4_80GB").published) == {"bert-99 Offline", "bert-99 Server"}
    # No Server result: the Offline ratio serves both.
    a100_pcie = gpu_models.by_name("A100_PCIe_80GB").published
    assert a100_pcie["bert-99 Server"] == a100_pcie["bert-99 Offline"] == round(3167.4 / h100["Offline"], 3)
    assert gpu_models.by_name("H100_NVL_94GB").published == {}

