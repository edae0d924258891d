"""The seam between the orchestration and a benchmark: each benchmark is one package under code/.

A benchmark module (``code/<bench>/benchmark.py``) provides three functions; nothing else of it is known here:

- ``generate_engine(config) -> dict``: build (or skip) the engine this config needs; returns what it did.
- ``prepare_test(config, mode) -> PreparedTest``: load data and backend for one LoadGen test.
- ``describe_inputs(config, mode) -> dict``: which data and weights a run would use, cheaply (for ``make info``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from code.common.constants import Benchmark
from code.common.registry import LazyRegistry

# Benchmark -> its module, imported when a run asks for that benchmark (code/common imports no benchmark itself).
BENCHMARK_MODULES: LazyRegistry[Benchmark] = LazyRegistry(
    "benchmark", {Benchmark.BERT: "code.bert.benchmark", Benchmark.GPTJ: "code.gptj.benchmark"})


class BenchmarkError(RuntimeError):
    """A problem the user fixes with a make step (missing data, a stale engine); the message names the step."""


class InputsUnavailableError(BenchmarkError):
    """Real data or weights are needed but absent; the message names the make step that fetches them."""


@dataclass
class PreparedTest:
    """Everything the C++ core needs for one test, plus how to score its accuracy log."""

    sample_lengths: np.ndarray  # int32, one per QSL sample: the batcher sorts by it
    performance_sample_count: int
    runner: Any  # code.harness.core.BatchRunner
    # log folder -> accuracy summary (writes accuracy.txt): {"metric", "value", "unit", "passed", "failures" (why it
    # failed, one line each), "summary" (one line for the closing table)} plus the benchmark's own figures.
    evaluate_accuracy: Callable[[Path], dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)  # inputs/weights used, and whether a result is valid

    @property
    def total_sample_count(self) -> int:
        return len(self.sample_lengths)


def prepared_test(
    lengths: np.ndarray,
    runner: Any,
    evaluate_accuracy: Callable[[Path], dict[str, Any]],
    provenance: dict[str, Any],
    *,
    input_lengths: dict[str, Any],
    device: str,
    cpu_threads: int,
) -> PreparedTest:
    """The end of every benchmark's ``prepare_test``: record the inputs' lengths (and, on a CPU, torch's threads,
    which change the figure) in the provenance, and hand the core int32 lengths of every sample (all of them fit
    in memory, so the performance sample count is the whole set)."""
    provenance["input_lengths"] = input_lengths
    if device == "cpu":
        provenance["cpu_threads"] = cpu_threads
    return PreparedTest(
        sample_lengths=np.ascontiguousarray(lengths, dtype=np.int32),
        performance_sample_count=len(lengths),
        runner=runner,
        evaluate_accuracy=evaluate_accuracy,
        provenance=provenance,
    )


def load_benchmark(benchmark: Benchmark) -> ModuleType:
    """The benchmark's module (``code/<bench>/benchmark.py``), imported on first use."""
    return BENCHMARK_MODULES.load(benchmark)
