"""Whether a test's figure could go into a submission, beyond LoadGen's VALID or accuracy's PASS.

A figure is submittable only when it was run as the rules require: the real data set and model, full length, and
the round's LoadGen (its seeds) for a benchmark and scenario the round accepts on the system's type. The summary
shows both answers (``VALID but not submittable (reasons)``), so a quick run is never mistaken for a result.
"""

from __future__ import annotations

from typing import Any

from code.common.constants import Scenario, TestMode
from code.common.rounds import RoundError, get_round, round_choice
from code.common.system_description import system_type
from code.common.systems import SystemDetectionError
from code.config.resolve import dataset_size
from code.config.resolved import ResolvedConfig

# mlperf.conf's min_duration: the submission checker rejects a performance run with a shorter one.
SUBMISSION_MIN_DURATION_MS = 600_000
SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")


def round_refusal(config: ResolvedConfig) -> str | None:
    """Why the config's round does not take this benchmark and scenario on this system's type; None if it does.
    Raises SystemDetectionError or RoundError when systems/<system>.json does not say the system's type."""
    return get_round(config["round"]).refusal(config.benchmark_name, config.scenario, system_type(config.system))


def round_reason(config: ResolvedConfig) -> str:
    """Which round the test is for, where that came from, and the newest round that takes it (with a known system
    type)."""
    source = config.sources.get("round", "default")
    try:
        kind = system_type(config.system)
    except (SystemDetectionError, RoundError):
        return f"round {config['round']} ({source})"
    return round_choice(config["round"], source, config.benchmark_name, config.scenario, kind)


def not_submittable_reasons(config: ResolvedConfig, mode: TestMode, provenance: dict[str, Any],
                            detail: dict[str, Any], sample_count: int, audit_test: str | None = None) -> list[str]:
    """Every reason this test's figure could not be submitted as it is; empty when it could. ``detail``: the
    test's ``read_detail_log``; ``audit_test``: TEST05 runs with other seeds than the round's on purpose."""
    reasons = list(provenance.get("invalid_because", []))
    if config["test_run"]:
        reasons.append("test run (--test_run)")
    if config.values.get("gpu_as"):
        reasons.append(f"stand-in: ran as {config['gpu_as']} on another GPU (--gpu_as)")
    full_size = dataset_size(config)  # an edge set's own: its checker's
    if mode is TestMode.AccuracyOnly:
        if sample_count < full_size:
            reasons.append(f"accuracy over {sample_count} of the {full_size} samples")
    else:
        reasons += _shortened(config.scenario, detail, full_size)
    if (detail.get("requested_use_token_latencies") and config.scenario is not Scenario.Offline
            and provenance.get("first_tokens") != "streamed"):
        # A batch backend hands over whole responses and the core reports each first token with its response.
        reasons.append("first tokens reported with whole responses: TTFT is each sample's whole latency and the "
                       "time per output token is not measured")
    round_ = get_round(config["round"])
    seeds = {key: detail.get(f"effective_{key}") for key in SEED_KEYS}
    if audit_test != "TEST05" and None not in seeds.values() and seeds != vars(round_.seeds):
        reasons.append(f"LoadGen's RNG seeds are not round {round_.name}'s (rebuild: make build ROUND={round_.name})")
    try:
        refusal = round_refusal(config)
    except (SystemDetectionError, RoundError) as error:
        reasons.append(f"system type unknown: {error}")
    else:
        if refusal:
            reasons.append(f"wrong round: {refusal}")
    return reasons


def _shortened(scenario: Scenario, detail: dict[str, Any], full_size: int) -> list[str]:
    """What made a performance run shorter or smaller than the submission checker accepts."""
    reasons = []
    min_duration = detail.get("effective_min_duration_ms")
    if min_duration is not None and min_duration < SUBMISSION_MIN_DURATION_MS:
        reasons.append(f"shortened: min_duration {min_duration} ms (a submission needs "
                       f"{SUBMISSION_MIN_DURATION_MS})")
    # LoadGen logs an equal-issue query (``EQUAL_ISSUE``) padded to a multiple of the loaded samples as
    # generated_samples_per_query; the effective setting is the size before padding.
    per_query = detail.get("generated_samples_per_query", detail.get("effective_samples_per_query"))
    if scenario is Scenario.Offline and per_query is not None and per_query < full_size:
        reasons.append(f"shortened: {per_query} samples in the Offline query (a submission needs {full_size})")
    loaded = detail.get("effective_performance_sample_count")
    if loaded is not None and loaded < full_size:
        reasons.append(f"performance_sample_count {loaded} (a submission needs {full_size})")
    return reasons
