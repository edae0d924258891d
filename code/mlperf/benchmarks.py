"""The seam between the orchestration and a benchmark: each benchmark is one package under code/.

A benchmark module (``code/<bench>/benchmark.py``) provides the three functions of ``BenchmarkModule``; nothing
else of it is known here. What crosses the seam is typed here (``TypedDict`` where the value goes to metadata.json
as it is, a dataclass where the orchestration reads fields), so a key a reader expects is a name a type checker knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Required, TypedDict

import numpy as np

from code.common.benchmark_errors import BenchmarkError as BenchmarkError  # re-exported: the seam's errors
from code.common.benchmark_errors import InputsUnavailableError as InputsUnavailableError
from code.common.constants import Benchmark, TestMode
from code.common.registry import LazyRegistry
from code.config.resolved import ResolvedConfig
from code.mlperf.devices import on_device

# Benchmark -> its module, imported when a run asks for that benchmark (code/mlperf imports no benchmark itself).
BENCHMARK_MODULES: LazyRegistry[Benchmark] = LazyRegistry(
    "benchmark", {Benchmark.BERT: "code.bert.benchmark", Benchmark.GPTJ: "code.gptj.benchmark",
                  Benchmark.LLAMA31: "code.llama31.benchmark"})


class InputsDescription(TypedDict, total=False):
    """What ``describe_inputs`` says of a run; recorded as the test's provenance in metadata.json."""

    model: Required[str]  # "BERT-large", "none (oracle backend)", ...
    inputs: Required[str]  # the preprocessed folder, or "synthetic (...)"
    weights: Required[str]  # a checkpoint path, "random (... architecture)", or "none (...)"
    device: Required[str]  # "cpu", "cuda:N": ``auto`` made concrete (the first device, with several)
    invalid_because: Required[list[str]]  # why the figure is not an MLPerf result; empty: it may be one
    checkpoint: Required[str]  # the weights as the run loads them: a path, "random", or "none (<backend> backend)"
    synthetic_inputs: Required[bool]  # made-up inputs: nothing about accuracy is decided on them
    engine: str  # BERT pytorch: the engine folder the run loads
    generation: str  # GPT-J: greedy or beam search, and forced output lengths
    input_lengths: dict[str, Any]  # added by ``prepared_test``: the inputs' length statistics
    devices: list[str]  # added by ``prepared_test``: every device the run puts a backend instance on
    cpu_threads: int  # added by ``prepared_test`` on a CPU device: torch's intra-op threads


class EngineReport(TypedDict, total=False):
    """What ``generate_engine`` did, printed one ``key: value`` after another."""

    engine: Required[str]  # the engine folder, or "none: <why nothing is built>"
    weights: str  # the checkpoint built from, or "random"
    precision: str


@dataclass(frozen=True)
class AccuracyReport:
    """A scored accuracy log: what the orchestration reads, and the benchmark's own figures for metadata.json."""

    metric: str  # "f1", "rouge1"
    value: float
    unit: str  # "%", ""
    passed: bool
    failures: list[str]  # why it failed, one line each
    summary: str  # one line for the closing table
    figures: dict[str, Any] = field(default_factory=dict)  # the benchmark's own: exact_match, rouge2, targets, ...

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "unit": self.unit, "passed": self.passed,
                "failures": list(self.failures), "summary": self.summary, **self.figures}


# device (a torch device: "cuda:0", "cpu") and the run's name for it -> the runner of one backend instance there
RunnerFactory = Callable[[str, str], Any]


@dataclass
class PreparedTest:
    """Everything the C++ core needs for one test, plus how to score its accuracy log. ``runner_on`` builds a backend
    instance on one device when asked, in the LoadGen process for a one-device run, in each worker process for
    several (code/harness/workers.py), so the LoadGen process of a several-GPU run never holds a model."""

    sample_lengths: np.ndarray  # int32, one per QSL sample: the batcher sorts by it
    performance_sample_count: int
    runner_on: RunnerFactory  # code.harness.core.BatchRunner or ContinuousRunner, with ``stats()`` if it counts
    devices: list[str]  # the run's devices, one runner each ("cpu", "cuda:0", "cuda:1", "cpu:0", ...)
    evaluate_accuracy: Callable[[Path], AccuracyReport]  # log folder -> score (writes accuracy.txt there)
    provenance: InputsDescription  # inputs/weights used, and whether a result is valid
    # Responses are int32 token ids whose count LoadGen gets with each (n_tokens): llama3.1-8b's token latencies and
    # TEST06 read it. GPT-J's LoadGen infers its tokens from a fixed factor instead.
    token_responses: bool = False

    @property
    def total_sample_count(self) -> int:
        return len(self.sample_lengths)


class BenchmarkModule(Protocol):
    """What the orchestration calls of ``code/<bench>/benchmark.py`` (a module: its functions are the methods)."""

    def describe_inputs(self, config: ResolvedConfig, mode: TestMode) -> InputsDescription:
        """Which data and weights a run would use, cheaply (``make info``), and why its figure would not count."""

    def generate_engine(self, config: ResolvedConfig) -> EngineReport:
        """Build (or skip) the engine this config needs; says what it did."""

    def prepare_test(self, config: ResolvedConfig, mode: TestMode) -> PreparedTest:
        """Load data and backend for one LoadGen test."""


def prepared_test(
    lengths: np.ndarray,
    runner_on: RunnerFactory,
    evaluate_accuracy: Callable[[Path], AccuracyReport],
    provenance: InputsDescription,
    *,
    input_lengths: dict[str, Any],
    devices: list[str],
    cpu_threads: int,
    token_responses: bool = False,
    streams_first_tokens: bool = False,
    num_samples: int | None = None,
) -> PreparedTest:
    """The end of every benchmark's ``prepare_test``: the inputs' lengths, the devices (and a CPU's torch threads,
    which change the figure) go into the provenance; every sample fits in memory, so the performance sample count is
    the whole set. ``streams_first_tokens``: the runner reports each first token as soon as it has it; otherwise a
    token response's first token goes with it, and its time to first token is its whole latency (the verdict says
    so where LoadGen times first tokens). ``num_samples`` (``--num_samples``): the run checks the first samples only,
    ``lengths`` theirs, which makes no MLPerf result; the provenance says so (in a new list: ``describe_inputs`` may
    hand out one it keeps)."""
    if num_samples is not None:
        provenance["invalid_because"] = [*provenance.get("invalid_because", []), f"--num_samples={num_samples}: a "
                                         f"quick check on the first {len(lengths)} samples"]
    if token_responses:
        provenance["first_tokens"] = "streamed" if streams_first_tokens else "with responses"
    provenance["input_lengths"] = input_lengths
    provenance["devices"] = list(devices)
    if devices == ["cpu"]:
        provenance["cpu_threads"] = cpu_threads

    def runner_on_device(device: str, name: str) -> Any:
        return on_device(runner_on(device, name), device)

    return PreparedTest(
        sample_lengths=np.ascontiguousarray(lengths, dtype=np.int32),
        performance_sample_count=len(lengths),
        runner_on=runner_on_device,
        devices=list(devices),
        evaluate_accuracy=evaluate_accuracy,
        provenance=provenance,
        token_responses=token_responses,
    )


@contextmanager
def model_name_lookup(model_name: str) -> Iterator[None]:
    """Around what looks ``model_name`` up in a benchmark's table of architectures (which refuses an unknown one with
    a ValueError naming the known ones): the refusal becomes the ``BenchmarkError`` that stops the run, naming the
    field, so every benchmark refuses a bad ``--model_name`` in the same words."""
    try:
        yield
    except ValueError as error:
        raise BenchmarkError(f"model_name = {model_name!r}: {error}") from None


def load_benchmark(benchmark: Benchmark) -> BenchmarkModule:
    return BENCHMARK_MODULES.load(benchmark)
