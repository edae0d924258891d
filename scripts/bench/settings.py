"""The bench's fixed numbers: durations, the H200 targets, the search's steps, and the fields it sets itself.

Why one module: every other bench module reads them, and a reader checks a figure's conditions in one place.
"""

from __future__ import annotations

from code.common.constants import Scenario

BENCHMARKS = ("bert-99", "bert-99.9")
SCENARIO_NAMES = {Scenario.Offline: "offline", Scenario.Server: "server", Scenario.SingleStream: "singlestream"}
DEFAULT_DURATION_MS = {Scenario.Offline: 20_000, Scenario.Server: 30_000, Scenario.SingleStream: 20_000}
QUICK_DURATION_MS = 1_000
MLPERF_DURATION_MS = 600_000
SERVER_LATENCY_BOUND_MS = 130.0
# The H200 targets (one GPU), above the best published per-GPU results: throughput at least, latency at most (ms).
TARGETS: dict[tuple[str, Scenario], tuple[str, float]] = {
    ("bert-99", Scenario.Offline): (">=", 9_300.0),
    ("bert-99.9", Scenario.Offline): (">=", 8_300.0),
    ("bert-99", Scenario.Server): (">=", 7_400.0),
    ("bert-99.9", Scenario.Server): (">=", 6_700.0),
    ("bert-99", Scenario.SingleStream): ("<=", 1.5),
    ("bert-99.9", Scenario.SingleStream): ("<=", 1.5),
}
QPS_MARGIN = 1.1
"""offline_expected_qps = measured samples/s x this (LoadGen adds its own 10% slack on top)."""
SERVER_START_FRACTION = 0.8
SERVER_STEP = 1.25
SERVER_MIN_QUERIES = 1_000
"""Server min_query_count: LoadGen's early stopping at p99 needs ~500 queries even when none is late."""
SINGLE_STREAM_HINT_NS = 1_000_000
"""SingleStream expected latency: LoadGen generates 2 x min_duration / hint queries and stops issuing once the
minimum duration is met, so a low hint only generates unused queries while a high one can end the run early."""
QUICK_RUN_ARGS = ["--model_name=tiny", "--device=cpu", "--precision=fp32", "--synthetic_sample_count=256"]
QUICK_OFFLINE_MIN_QUERIES = 64
"""--quick: Offline's mlperf.conf minimum of 10,833 samples would dominate a one-second CPU run."""
# Fields the bench sets itself; given in --extra_run_args they are taken as hints or refused.
HINT_FIELDS = ("offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns")
REFUSED_FIELDS = {
    "min_duration": "use --min_duration_ms",
    "log_dir": "the bench puts every run under build/bench/<timestamp>/runs/",
    "input_data": "the bench runs synthetic inputs",
    "weights": "the bench runs random weights",
    "synthetic_lengths": "the bench runs both (dataset and max)",
    "benchmarks": "use --benchmarks",
    "scenarios": "use --scenarios",
    "action": "the bench chooses the action",
    "test_run": "use --min_duration_ms",
}


class BenchError(RuntimeError):
    """A bad option; the message names the fix."""
