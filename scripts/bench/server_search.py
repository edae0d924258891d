"""The Server search: the highest ``server_target_qps`` that stays VALID, by stepping until bracketed, then bisecting.

Why a search: Server validity depends on the p99 latency at a load, which only a LoadGen run can tell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from code.common.constants import Scenario
from scripts.bench.runs import HarnessRunner, round_qps
from scripts.bench.settings import SERVER_STEP, SUSTAINED_SHARE


@dataclass
class ServerTry:
    target_qps: float
    valid: bool | None
    reasons: list[str] = field(default_factory=list)
    p99_ms: float | None = None
    scheduled_qps: float | None = None
    log_dir: str | None = None
    tokens_per_sample: float | None = None  # what its tokens/s counts (RunOutcome.tokens_per_sample)


@dataclass
class ServerSearch:
    """Every try in order, and the highest target QPS that was VALID (None if none was)."""

    tries: list[ServerTry]
    best_qps: float | None
    stopped_because: str

    def best_try(self) -> ServerTry | None:
        return next((t for t in self.tries if t.valid and t.target_qps == self.best_qps), None)


def search_server_qps(
    run_try: Callable[[float], ServerTry],
    start_qps: float,
    max_runs: int = 6,
    tolerance: float = 0.03,
    step: float = SERVER_STEP,
) -> ServerSearch:
    """Highest VALID target QPS, assuming validity falls monotonically with QPS.

    From ``start_qps``: multiply by ``step`` after a VALID try, divide after an INVALID one, until one of each
    brackets the answer; then bisect until the bracket is within ``tolerance`` (relative) or ``max_runs`` are spent.
    A crashed try (valid None) ends the search.
    """
    tries: list[ServerTry] = []
    low: float | None = None  # highest VALID
    high: float | None = None  # lowest INVALID
    qps = round_qps(start_qps)
    while len(tries) < max_runs:
        outcome = run_try(qps)
        tries.append(outcome)
        if outcome.valid is None:
            return ServerSearch(tries, low, f"a try failed at {qps:g} QPS")
        if outcome.valid:
            low = qps if low is None else max(low, qps)
        else:
            high = qps if high is None else min(high, qps)
        if low is not None and high is not None:
            if (high - low) <= tolerance * low:
                return ServerSearch(tries, low, f"bracketed within {tolerance:.0%}")
            qps = round_qps((low + high) / 2)
            if qps in (low, high):
                return ServerSearch(tries, low, "bracket cannot be split further")
        elif low is not None:
            qps = round_qps(low * step)
        else:
            qps = round_qps(high / step)
            if qps <= 0:
                return ServerSearch(tries, low, "no positive QPS left to try")
    bracket = f"; VALID at {low:g}, INVALID at {high:g}" if low is not None and high is not None else ""
    return ServerSearch(tries, low, f"used all {max_runs} runs{bracket}")


def unsustained_reason(scheduled_qps: float | None, completed_qps: float | None) -> str | None:
    """Why a VALID try would not hold for 600 s: the system completed clearly fewer samples per second than were
    scheduled, so its queue grew during the try and would reach the latency bound in a longer run. A short try
    ends before that happens, so LoadGen alone calls it VALID."""
    if not scheduled_qps or completed_qps is None or completed_qps >= SUSTAINED_SHARE * scheduled_qps:
        return None
    return (f"not sustained: completed {completed_qps:.4g} samples/s of {scheduled_qps:.4g} scheduled (below "
            f"{SUSTAINED_SHARE:.0%}); the queue grew, so a 600 s run would break the latency bound")


def server_try(runner: HarnessRunner, benchmark: str, duration_ms: int, base: dict[str, Any], qps: float) -> ServerTry:
    run = runner.run(
        f"qps{qps:g}", benchmark, Scenario.Server, {**base, "min_duration": duration_ms, "server_target_qps": qps}
    )
    p99 = run.extra.get("result_99.00_percentile_latency_ns")
    reasons = run.loadgen_reasons()
    valid = run.valid
    unsustained = unsustained_reason(run.value, run.extra.get("result_completed_samples_per_sec"))
    if valid and unsustained:
        valid = False
        reasons.append(unsustained)
    return ServerTry(
        qps,
        valid,
        reasons,
        None if p99 is None else float(p99) / 1e6,
        run.value,
        run.log_dir,
        run.tokens_per_sample,
    )
