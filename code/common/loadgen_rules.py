"""What LoadGen does with a performance test's settings, where the harness must predict it (the config checks, the
probes, the summaries): the Offline query it plans, and the INVALID reasons of a query sized for a slower machine."""

from __future__ import annotations

OFFLINE_SLACK = 1.1
"""LoadGen plans an Offline query of floor(1.1 x min_duration x expected QPS) samples (test_settings_internal.cc's
kSlack), so that the system runs past the minimum duration."""


def offline_query_samples(expected_qps: float, duration_ms: float) -> int:
    """The samples of the Offline query LoadGen plans (truncated, as LoadGen's conversion to an integer does)."""
    return int(OFFLINE_SLACK * duration_ms / 1000 * expected_qps)


def ended_early(reasons: list[str]) -> bool:
    """LoadGen's 'min duration not met' / 'min queries not met': the expected rate or latency was wrong."""
    return any("min duration" in reason or "min queries" in reason for reason in reasons)
