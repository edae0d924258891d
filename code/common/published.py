"""The best published MLPerf Inference results per GPU (closed division), read from ``published_results.csv``.

A figure alone does not say whether it is good; beside the best result MLCommons published for the same benchmark,
scenario and GPU model (the summary, report.md, ``make results``) it does, and the same figures give the ratios a
config estimates another GPU's first rates from (code/common/gpu_models.py). Each row names its round, submitter,
system and results folder; ``per_gpu`` is the system's figure over its GPUs, except a SingleStream latency. GPT-J
rows keep samples/s (v4.1 and later tables state tokens/s, samples x 69: ``note`` gives them); Server's completed
and scheduled samples/s (v4.1 and later vs earlier) differ by well under 1% in a VALID run and compare as one.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

PUBLISHED_CSV = Path(__file__).with_name("published_results.csv")
LATENCY_UNITS = ("ms",)
"""Units of a latency figure (SingleStream's p90), where lower is better; every other unit is a rate."""


@dataclass(frozen=True)
class Published:
    """One published result, per GPU."""

    benchmark: str  # bert-99, bert-99.9, gptj-99, llama3.1-8b
    scenario: str  # Offline, Server, SingleStream
    gpu_model: str  # code/common/gpu_models.py's name: H200_SXM_141GB
    per_gpu: float
    unit: str  # samples/s, or ms for a latency
    round: str  # v4.1
    submitter: str
    system: str  # the system's folder name in the results repository
    gpus: int
    system_figure: float
    source_url: str
    note: str = ""

    @property
    def lower_is_better(self) -> bool:
        return self.unit in LATENCY_UNITS

    def describe(self) -> str:
        """``Dell XE9680_H200_SXM_141GBx8_TRT, v4.1``: who published it, where and when."""
        return f"{self.submitter} {self.system}, {self.round}"


@functools.cache
def published_results() -> tuple[Published, ...]:
    """Every row of the file; read once per process (the file ships with the code and does not change under it)."""
    with PUBLISHED_CSV.open(newline="", encoding="utf-8") as file:
        return tuple(Published(**{**row, "per_gpu": float(row["per_gpu"]), "gpus": int(row["gpus"]),
                                  "system_figure": float(row["system_figure"])}) for row in csv.DictReader(file))


def best(benchmark: str, scenario: str, gpu_model: str, rows: tuple[Published, ...] | None = None) -> Published | None:
    """The best published result per GPU of ``gpu_model`` among ``rows`` (the file's unless given): the highest
    rate, or the lowest latency; None where none is on file."""
    matching = [row for row in (published_results() if rows is None else rows)
                if (row.benchmark, row.scenario, row.gpu_model) == (benchmark, scenario, gpu_model)]
    if not matching:
        return None
    pick = min if matching[0].lower_is_better else max
    return pick(matching, key=lambda row: row.per_gpu)
