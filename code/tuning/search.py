"""The probes and the Server search, independent of how a try runs, so the product (find_performance.py) and the
bench (scripts/bench) share them.

Every search takes ``run(label, fields) -> Outcome``: one LoadGen performance test with these fields over the
caller's own, returning ``valid`` (None: it crashed), ``value`` (samples/s, scheduled QPS, latency), ``reasons`` (why
INVALID) and ``extra`` (LoadGen's other figures: ``result_mean_latency_ns``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from code.common.loadgen_rules import OFFLINE_SLACK, ended_early

# offline_expected_qps = measured samples/s x this; a run that still ends early is repeated at 1.1 x its rate.
QPS_MARGIN = 1.1
# A --test_run's Offline query holds its probe's samples/s x its minimum duration x this. A probe's short query
# carries the start-up a longer run spreads thin, so it reads low: BERT-large on 2 cores of an AMD EPYC (Zen 5) ran
# its 60 s test 1.68x faster than its probe. Too large a query only lengthens a run, too small a one voids it.
PROBE_QPS_MARGIN = 2.0
# A --test_run's Offline probe starts with one batch and grows its query at most this many times a probe, so no
# probe runs much past the probe duration whatever the config's rate says.
PROBE_GROWTH = 64
# A --test_run whose Offline query still ended early runs once more with at least this many times its samples.
RERUN_GROWTH = 2
# single_stream_expected_latency_ns = measured mean latency x this: a lower hint only makes LoadGen generate queries
# it never issues, a higher one can end the run before its minimum duration.
SINGLESTREAM_MARGIN = 0.9
SERVER_START_FRACTION = 0.8  # of the Offline throughput: Server adds a latency bound
SERVER_STEP = 1.25  # up by this after a VALID try until one is INVALID (then bisect)
SERVER_DOWN_STEP = 2.0  # down by this while no try is VALID: a start far too high finds a VALID rate in a few tries
SERVER_TOLERANCE = 0.05  # the search stops when the VALID and INVALID rates are this close
SERVER_MAX_TRIES = 6
# A Server try counts as VALID only if it completed this share of the samples/s it scheduled (``unsustained_reason``).
SUSTAINED_SHARE = 0.97
# Server min_query_count of a try: LoadGen's early stopping at p99 needs ~500 queries even when none is late.
SERVER_MIN_QUERIES = 1_000
# Offline: a VALID run whose rate x 1.1 is below this share of its expected QPS ran far longer than needed, and is
# repeated once at 1.1 x its own rate.
OVERESTIMATE = 0.75
MAX_RERUNS = 2  # Offline and SingleStream: confirming runs repeated at most this many times when they end early


class Outcome(Protocol):
    valid: bool | None
    value: float | None
    reasons: list[str]
    extra: dict[str, Any]


R = TypeVar("R", bound=Outcome)


def round_qps(qps: float) -> float:
    """Readable QPS values for user.conf and reports: whole numbers above 100, else 3 significant digits."""
    if qps >= 100:
        return float(round(qps))
    if qps <= 0:
        return qps
    return round(qps, 2 - int(math.floor(math.log10(qps))))


def qps_for_query(samples: int, duration_ms: int) -> float:
    """The smallest ``offline_expected_qps`` of 3 significant digits for which LoadGen plans at least ``samples``."""
    exact = (samples + 0.5) / (OFFLINE_SLACK * duration_ms / 1000)
    step = 10.0 ** (math.floor(math.log10(exact)) - 2)
    return round(math.ceil(exact / step) * step, 10)


def whole_batches(samples: float, batch: int) -> int:
    """``samples`` rounded up to whole batches (at least one): a partial batch runs about as long as a full one."""
    batch = max(1, batch)
    return max(1, math.ceil(samples / batch)) * batch


def equal_issue_samples(samples: int, loaded: int) -> int:
    """An Offline query in equal-issue mode (GPT-J's mlperf.conf), padded to a multiple of the ``loaded`` samples so
    every sample is issued equally often (loadgen.cc, GenerateQueries)."""
    if loaded <= 0 or samples % loaded == 0:
        return samples
    return samples + loaded - samples % loaded


def next_probe_samples(samples: int, rate: float, batch: int, probe_ms: int) -> int:
    """The whole batches ``rate`` runs in the probe duration, more than ``samples`` and at most ``PROBE_GROWTH`` x."""
    batch = max(1, batch)
    fits = math.floor(rate * probe_ms / 1000 / batch) * batch
    return max(whole_batches(samples + 1, batch), min(samples * PROBE_GROWTH, fits))


def sustained_rate(queries: list[tuple[int, float]]) -> float | None:
    """The samples/s of Offline probe queries (samples, seconds) past their start-up: the last two queries'
    difference in samples over their difference in time, which the start-up each pays cancels out of."""
    if len(queries) < 2:
        return None
    (before, before_s), (last, last_s) = queries[-2], queries[-1]
    if last <= before or last_s <= before_s:
        return None
    return (last - before) / (last_s - before_s)


def probed_test_samples(rate: float, probe_samples: int, batch: int, duration_ms: int) -> int:
    """A --test_run's Offline query: rate x duration x ``PROBE_QPS_MARGIN``, at least the probe's, in whole batches."""
    return whole_batches(max(rate * duration_ms / 1000 * PROBE_QPS_MARGIN, probe_samples), batch)


def rerun_query_samples(samples: int, seconds: float, batch: int, duration_ms: int) -> int:
    """The re-run of a --test_run whose Offline query ended early: its own rate x the duration x
    ``PROBE_QPS_MARGIN``, at least ``RERUN_GROWTH`` x its samples, in whole batches."""
    scaled = samples * duration_ms / 1000 / max(seconds, 1e-3) * PROBE_QPS_MARGIN
    return whole_batches(max(scaled, RERUN_GROWTH * samples), batch)


def offline_expected_qps(measured_qps: float) -> float:
    return round_qps(measured_qps * QPS_MARGIN)


def singlestream_expected_latency_ns(mean_latency_ns: float) -> int:
    return max(1, int(mean_latency_ns * SINGLESTREAM_MARGIN))


@dataclass
class Measurement(Generic[R]):
    """A probe-then-confirm measurement: every try in order, the value found and the try that confirms it."""

    field: str
    tries: list[tuple[str, R]] = field(default_factory=list)
    value: float | None = None  # the setting the last confirming run used (None: nothing was measured)
    confirmed: R | None = None  # the last confirming run (None: the probe failed)
    probe_value: float | None = None  # what the probe measured: samples/s (Offline), mean latency ns (SingleStream)

    @property
    def valid(self) -> bool:
        return self.confirmed is not None and bool(self.confirmed.valid)

    def why_not(self) -> str:
        """Why no value stands, in a line (empty when one does)."""
        if self.valid:
            return ""
        label, last = self.tries[-1] if self.tries else ("", None)
        if last is None:
            return "no try ran"
        if last.valid is None:
            return f"the {label} try did not finish ({'; '.join(last.reasons) or 'no result'})"
        return f"the {label} try was INVALID ({'; '.join(last.reasons) or 'no reason given'})"


def _run(measurement: Measurement[R], run: Callable[[str, dict[str, Any]], R], label: str,
         fields: dict[str, Any]) -> R:
    outcome = run(label, fields)
    measurement.tries.append((label, outcome))
    return outcome


def measure_offline(run: Callable[[str, dict[str, Any]], R], probe_ms: int, duration_ms: int,
                    hint_qps: float | None = None) -> Measurement[R]:
    """Probe (unless ``hint_qps`` is known), run at 1.1 x the measured samples/s, and repeat at 1.1 x the run's own
    rate while it ends early, or once when it ran far slower than expected (an unsteady probe would make every run
    longer than needed). The value kept is the last VALID run's."""
    measurement: Measurement[R] = Measurement("offline_expected_qps")
    if hint_qps is None:
        probe = _run(measurement, run, "probe", {"min_duration": probe_ms})
        if not probe.value:
            return measurement
        measurement.probe_value = probe.value
        hint_qps = probe.value
    qps = offline_expected_qps(hint_qps)
    lowered = False
    for attempt in range(MAX_RERUNS + 1):
        label = "confirm" if attempt == 0 else f"rerun{attempt}"
        outcome = _run(measurement, run, label, {"min_duration": duration_ms, "offline_expected_qps": qps})
        if outcome.valid or measurement.confirmed is None or not measurement.confirmed.valid:
            measurement.value, measurement.confirmed = qps, outcome
        if not outcome.value:
            break
        if outcome.valid is False and ended_early(outcome.reasons):
            qps = offline_expected_qps(max(outcome.value, qps))
        elif outcome.valid and not lowered and offline_expected_qps(outcome.value) < OVERESTIMATE * qps:
            qps, lowered = offline_expected_qps(outcome.value), True
        else:
            break
    return measurement


def measure_singlestream(run: Callable[[str, dict[str, Any]], R], probe_ms: int, duration_ms: int,
                         hint_ns: int | None = None) -> Measurement[R]:
    """Probe the mean latency (unless ``hint_ns`` is known), run expecting 0.9 x it, and halve the expectation while
    the run ends early."""
    measurement: Measurement[R] = Measurement("single_stream_expected_latency_ns")
    if hint_ns is None:
        probe = _run(measurement, run, "probe", {"min_duration": probe_ms})
        mean_ns = probe.extra.get("result_mean_latency_ns")
        if probe.valid is None or not mean_ns:
            return measurement
        measurement.probe_value = float(mean_ns)
        hint_ns = singlestream_expected_latency_ns(float(mean_ns))
    expected = int(hint_ns)
    for attempt in range(MAX_RERUNS + 1):
        label = "confirm" if attempt == 0 else f"rerun{attempt}"
        outcome = _run(measurement, run, label,
                       {"min_duration": duration_ms, "single_stream_expected_latency_ns": expected})
        measurement.value, measurement.confirmed = expected, outcome
        mean_ns = outcome.extra.get("result_mean_latency_ns")
        if outcome.valid is not False or not ended_early(outcome.reasons) or not mean_ns:
            break
        expected = max(1, min(expected, int(float(mean_ns))) // 2)
    return measurement


@dataclass
class ServerTry:
    target_qps: float
    valid: bool | None
    reasons: list[str] = field(default_factory=list)
    p99_ms: float | None = None
    scheduled_qps: float | None = None
    log_dir: str | None = None
    tokens_per_sample: float | None = None  # what its tokens/s counts (the bench's RunOutcome.tokens_per_sample)


@dataclass
class ServerSearch:
    """Every try in order, and the highest target QPS that was VALID (None if none was)."""

    tries: list[ServerTry]
    best_qps: float | None
    stopped_because: str
    tolerance: float = SERVER_TOLERANCE

    def best_try(self) -> ServerTry | None:
        return next((t for t in self.tries if t.valid and t.target_qps == self.best_qps), None)

    def nothing_valid(self) -> str:
        """The line that says no rate was VALID, with the lowest rate tried and why it failed."""
        lowest = min(self.tries, key=lambda t: t.target_qps, default=None)
        if lowest is None:
            return "no Server try ran"
        why = "; ".join(lowest.reasons) or ("it did not finish" if lowest.valid is None else "INVALID")
        return (f"no Server rate was VALID, not even the lowest tried, {lowest.target_qps:g} QPS ({why}); "
                f"{self.stopped_because}")


def search_server_qps(
    run_try: Callable[[float], ServerTry],
    start_qps: float,
    max_runs: int = SERVER_MAX_TRIES,
    tolerance: float = SERVER_TOLERANCE,
    down_step: float | None = None,
    floor_qps: float = 0.0,
) -> ServerSearch:
    """The highest VALID target QPS, validity falling monotonically with QPS: up by ``SERVER_STEP`` after a VALID try,
    down by ``down_step`` after an INVALID one until the answer is bracketed, then bisect to within ``tolerance`` or
    until ``max_runs`` are spent. A crashed try ends the search; so does a rate below ``floor_qps``, nothing VALID."""
    down = down_step or SERVER_STEP
    tries: list[ServerTry] = []
    low: float | None = None  # highest VALID
    high: float | None = None  # lowest INVALID

    def done(why: str) -> ServerSearch:
        return ServerSearch(tries, low, why, tolerance)

    qps = round_qps(start_qps)
    while len(tries) < max_runs:
        outcome = run_try(qps)
        tries.append(outcome)
        if outcome.valid is None:
            return done(f"a try failed at {qps:g} QPS")
        if outcome.valid:
            low = qps if low is None else max(low, qps)
        else:
            high = qps if high is None else min(high, qps)
        if low is not None and high is not None:
            if (high - low) <= tolerance * low:
                return done(f"bracketed within {tolerance:.0%}")
            qps = round_qps((low + high) / 2)
            if qps in (low, high):
                return done("bracket cannot be split further")
        elif low is not None:
            qps = round_qps(low * SERVER_STEP)
        else:
            qps = round_qps(high / down)
            if qps <= 0 or qps < floor_qps:
                return done(f"the next rate, {qps:g} QPS, is below the lowest worth trying ({floor_qps:.3g} QPS)"
                            if qps > 0 else "no positive QPS left to try")
    bracket = f"; VALID at {low:g}, INVALID at {high:g}" if low is not None and high is not None else ""
    return done(f"used all {max_runs} runs{bracket}")


def unsustained_reason(scheduled_qps: float | None, completed_qps: float | None) -> str | None:
    """Why a VALID try would not hold for 600 s: it completed clearly fewer samples/s than scheduled, so its queue
    grew and a longer run would reach the latency bound."""
    if not scheduled_qps or completed_qps is None or completed_qps >= SUSTAINED_SHARE * scheduled_qps:
        return None
    return (f"not sustained: completed {completed_qps:.4g} samples/s of {scheduled_qps:.4g} scheduled (below "
            f"{SUSTAINED_SHARE:.0%}); the queue grew, so a 600 s run would break the latency bound")


TOO_SHORT = ("too few queries for LoadGen's early stopping at this rate: give the tries more queries "
             "(--min_query_count) or time (--min_duration)")


def judge_server_try(qps: float, outcome: Outcome, log_dir: str | None = None,
                     tokens_per_sample: float | None = None) -> ServerTry:
    """A Server try from its run: LoadGen's verdict, refused when the queue grew; one INVALID only for early stopping
    was too short to judge its rate, so it stops the search (valid None, ``TOO_SHORT``)."""
    p99 = outcome.extra.get("result_99.00_percentile_latency_ns")
    reasons = [r for r in outcome.reasons if not r.startswith("not a valid MLPerf result")]
    valid = outcome.valid
    if valid is False and reasons and all("early stopping" in reason for reason in reasons):
        # The latency bound held, but too few queries ran to be sure at p99, and a lower rate would run fewer.
        valid = None
        reasons.append(TOO_SHORT)
    unsustained = unsustained_reason(outcome.value, outcome.extra.get("result_completed_samples_per_sec"))
    if valid and unsustained:
        valid = False
        reasons.append(unsustained)
    return ServerTry(qps, valid, reasons, None if p99 is None else float(p99) / 1e6, outcome.value, log_dir,
                     tokens_per_sample)
