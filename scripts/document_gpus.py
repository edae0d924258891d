"""Rewrite the table of GPU models in documentation/adding_a_system.md from the configs (what each model runs).

One row per model of code/common/gpu_models.py: its compute capability and memory, the engines each benchmark's
Offline config runs on it, first to last (the engine ladder with what the GPU cannot run skipped), GPT-J's samples in
flight, and whether its rates were measured on that model or are estimates. Generated so it cannot drift from the
configs.

Usage: ``python -m scripts.document_gpus`` (``--check`` exits 1 when the page is out of date; a test runs that).
"""

from __future__ import annotations

import sys

from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.common.gpu_models import MODELS, capability_text
from code.common.paths import REPO_ROOT
from code.config.resolve import resolve_config
from code.config.resolved import NoEngineError, WorkloadSetting
from scripts.page_table import PageTable

PAGE = REPO_ROOT / "documentation" / "adding_a_system.md"
HEADER = ("| GPU model | compute capability | memory | bert-99 engines | bert-99.9 engines | gptj-99 engines "
          "(samples in flight) | rates |\n| --- | --- | --- | --- | --- | --- | --- |\n")
WORKLOADS = (("bert-99", Benchmark.BERT, AccuracyTarget.k_99), ("bert-99.9", Benchmark.BERT, AccuracyTarget.k_99_9),
             ("gptj-99", Benchmark.GPTJ, AccuracyTarget.k_99))


def engines(system: str, benchmark: Benchmark, target: AccuracyTarget) -> tuple[str, bool]:
    """The engines the Offline config runs on ``system``, first to last, and whether its rate is an estimate."""
    try:
        config = resolve_config(benchmark, Scenario.Offline, system, WorkloadSetting(accuracy_target=target), {})
    except NoEngineError as error:  # the last engine's reason: the one the others would fall back to
        return f"none: {error.skipped[-1][1]}", False
    names = []
    for rung in config.ladder:
        if benchmark is Benchmark.GPTJ:  # the samples in flight of each engine, as a run of it resolves them
            slots = resolve_config(benchmark, Scenario.Offline, system, WorkloadSetting(accuracy_target=target), {},
                                   rung=rung.name)["gpu_batch_size"]
            names.append(f"{rung.name} ({slots})")
        else:
            names.append(rung.name)
    return ", ".join(names), "estimate:" in config.sources["offline_expected_qps"]


def table() -> str:
    rows = []
    for model in MODELS:
        cells, estimated = [], False
        for _, benchmark, target in WORKLOADS:
            text, estimate = engines(f"{model.name}x1", benchmark, target)
            cells.append(text)
            estimated |= estimate
        rates = "estimated (the first `--test_run` measures them)" if estimated else "measured on this model"
        rows.append(f"| `{model.name}` | {capability_text(model.capability)} | {round(model.memory_gib)} GB | "
                    + " | ".join(cells) + f" | {rates} |")
    return HEADER + "\n".join(rows) + "\n"


TABLE = PageTable(PAGE, HEADER, table, "python -m scripts.document_gpus")
rewritten = TABLE.rewritten


if __name__ == "__main__":
    sys.exit(TABLE.main(sys.argv[1:]))
