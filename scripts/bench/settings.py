"""The bench's fixed numbers: durations, the H200 targets, the search's steps, the fields it sets itself, and what
differs between BERT and GPT-J (``PROFILES``).

Why one module: every other bench module reads them, and a reader checks a figure's conditions in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from code.common.constants import SERVER_LATENCY_BOUND_NS, Benchmark, Scenario
from code.tuning.search import (  # noqa: F401 - re-exported: the bench reads every number from here
    QPS_MARGIN,
    SERVER_MIN_QUERIES,
    SERVER_START_FRACTION,
    SERVER_STEP,
    SUSTAINED_SHARE,
)

BENCHMARKS = ("bert-99", "bert-99.9", "gptj-99", "gptj-99.9")
BENCHMARK_NAMES = {"bert": "bert-99", "gptj": "gptj-99", **{name: name for name in BENCHMARKS}}
DEFAULT_BENCHMARKS = "bert-99,bert-99.9"
SCENARIO_NAMES = {Scenario.Offline: "offline", Scenario.Server: "server", Scenario.SingleStream: "singlestream"}
DEFAULT_DURATION_MS = {Scenario.Offline: 20_000, Scenario.Server: 30_000, Scenario.SingleStream: 20_000}
QUICK_DURATION_MS = 1_000
MLPERF_DURATION_MS = 600_000
# The H200 targets (one GPU), above the best published per-GPU results: throughput at least, latency at most (ms).
# GPT-J's SingleStream has no target (none is published): the bench reports its p90 latency only.
TARGETS: dict[tuple[str, Scenario], tuple[str, float]] = {
    ("bert-99", Scenario.Offline): (">=", 9_300.0),
    ("bert-99.9", Scenario.Offline): (">=", 8_300.0),
    ("bert-99", Scenario.Server): (">=", 7_400.0),
    ("bert-99.9", Scenario.Server): (">=", 6_700.0),
    ("bert-99", Scenario.SingleStream): ("<=", 1.5),
    ("bert-99.9", Scenario.SingleStream): ("<=", 1.5),
    ("gptj-99", Scenario.Offline): (">=", 42.0),
    ("gptj-99.9", Scenario.Offline): (">=", 42.0),
    ("gptj-99", Scenario.Server): (">=", 42.0),
    ("gptj-99.9", Scenario.Server): (">=", 42.0),
}
# The search's margins and steps (QPS_MARGIN, SERVER_STEP, ...) are the product's: code/tuning/search.py.


@dataclass(frozen=True)
class OfflineCase:
    """One Offline measurement of a benchmark: its name (``--offline_lengths``), its row label, and the run fields
    that make it."""

    name: str
    label: str
    fields: dict[str, str]


@dataclass(frozen=True)
class Profile:
    """What differs between the benchmarks; every measurement and report is shared.

    The first Offline case is the realistic one: the targets apply to it, and Server and SingleStream run it.
    """

    family: str  # "bert" | "gptj"
    title: str
    counts_generated: bool  # tokens/s counts generated tokens (GPT-J), else input tokens (BERT)
    inputs: str  # what the runs' inputs are, for the reports
    cases: tuple[OfflineCase, ...]
    run_args: tuple[str, ...]  # before --extra_run_args, which may override them
    quick_run_args: tuple[str, ...]  # --quick: before run_args
    single_stream_hint_ns: int  # SingleStream expected latency (below)
    # Run fields of every test of a scenario (no min_query_count: mlperf.conf's), without and with --quick.
    scenario_fields: dict[Scenario, dict[str, int]] = field(default_factory=dict)
    quick_scenario_fields: dict[Scenario, dict[str, int]] = field(default_factory=dict)

    @property
    def server_latency_bound_ms(self) -> float:
        """LoadGen's Server p99 bound (mlperf.conf), as the harness states it."""
        return SERVER_LATENCY_BOUND_NS[Benchmark(self.family)] / 1e6

    def case(self, name: str) -> OfflineCase:
        return next(case for case in self.cases if case.name == name)


# SingleStream expected latency: LoadGen generates 2 x min_duration / hint queries and stops issuing once the minimum
# duration is met, so a low hint only generates unused queries while a high one can end the run early (the bench then
# re-runs at half the measured mean). GPT-J's queries take seconds: a 1 ms hint would have LoadGen generate (and, with
# its sample_concatenate_permutation, run) far more queries than the duration needs.
PROFILES: dict[str, Profile] = {
    "bert": Profile(
        family="bert",
        title="BERT",
        counts_generated=False,
        inputs="synthetic SQuAD-like lengths, random weights",
        cases=(
            OfflineCase("dataset", "Offline", {"synthetic_lengths": "dataset"}),
            OfflineCase("max", "Offline @384 tokens (worst case)", {"synthetic_lengths": "max"}),
        ),
        run_args=(),
        single_stream_hint_ns=1_000_000,
        quick_run_args=("--model_name=tiny", "--device=cpu", "--precision=fp32", "--synthetic_sample_count=256"),
        scenario_fields={Scenario.Server: {"min_query_count": SERVER_MIN_QUERIES}},
        # --quick: Offline's mlperf.conf minimum of 10,833 samples would dominate a one-second CPU run.
        quick_scenario_fields={
            Scenario.Offline: {"min_query_count": 64},
            Scenario.Server: {"min_query_count": SERVER_MIN_QUERIES},
        },
    ),
    "gptj": Profile(
        family="gptj",
        title="GPT-J",
        counts_generated=True,
        inputs="synthetic prompts of CNN/DailyMail-like lengths (mean ~920 tokens), random weights",
        cases=(
            OfflineCase("forced", "Offline, EOS forced (mean ~70 new tokens)", {"synthetic_output_lengths": "forced"}),
            OfflineCase("full", "Offline, 128 new tokens (worst case)", {"synthetic_output_lengths": "model"}),
        ),
        # LoadGen's gptj sample_concatenate_permutation rounds every Offline query up to a multiple of the sample
        # set: 1,024 prompts keep a 20 s Offline run near 20 s instead of the real set's 13,368 samples.
        run_args=("--synthetic_sample_count=1024",),
        single_stream_hint_ns=1_000_000_000,
        quick_run_args=(
            "--model_name=tiny",
            "--device=cpu",
            "--precision=fp32",
            "--backend=inflight",
            "--synthetic_sample_count=8",
            "--synthetic_length_scale=0.05",
            "--gpu_batch_size=16",
        ),
        # The same rule pads Server and SingleStream's min_query_count to a multiple of the set. Offline: the query
        # follows offline_expected_qps x duration, not mlperf.conf's 13,368 samples. Server: 1,024 queries (~25 s at
        # 42 QPS). SingleStream, whose queries take seconds each: 64 prompts and queries (LoadGen's default of 100
        # would be padded to 1,024 queries, ~25 minutes), enough for its p90 early-stopping estimate.
        scenario_fields={
            Scenario.Offline: {"min_query_count": 1},
            Scenario.Server: {"min_query_count": SERVER_MIN_QUERIES},
            Scenario.SingleStream: {"min_query_count": 64, "synthetic_sample_count": 64},
        },
        # --quick on a CPU: 8 samples per test (the set's size); Server and SingleStream are then INVALID (too few
        # queries for early stopping) but run the whole path.
        quick_scenario_fields={
            Scenario.Offline: {"min_query_count": 1},
            Scenario.Server: {"min_query_count": 8},
            Scenario.SingleStream: {"min_query_count": 8},
        },
    ),
}


def profile_of(benchmark: str) -> Profile:
    """``gptj-99.9`` -> the GPT-J profile."""
    return PROFILES[benchmark.split("-", 1)[0]]


# Fields the bench sets itself; given in --extra_run_args they are taken as hints or refused.
HINT_FIELDS = ("offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns")
REFUSED_FIELDS = {
    "min_duration": "use --min_duration_ms",
    "log_dir": "the bench puts every run under build/bench/<timestamp>/runs/",
    "input_data": "the bench runs synthetic inputs",
    "weights": "the bench runs random weights",
    "synthetic_lengths": "the bench runs its Offline cases (--offline_lengths)",
    "synthetic_output_lengths": "the bench runs its Offline cases (--offline_lengths)",
    "benchmarks": "use --benchmarks",
    "scenarios": "use --scenarios",
    "action": "the bench chooses the action",
    "test_run": "use --min_duration_ms",
}


class BenchError(RuntimeError):
    """A bad option; the message names the fix."""
