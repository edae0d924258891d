"""user.conf: the per-run LoadGen settings, generated from the resolved config.

LoadGen carries mlperf.conf; user.conf only adds what a submitter may set (target QPS, expected latency, and for
short test runs the durations). Each test writes its own into its log folder, which a submission ships, so runs at
the same time never read each other's settings.
"""

from __future__ import annotations

import time
from pathlib import Path

from code.common.constants import EQUAL_ISSUE, Scenario
from code.config.fields import TEST_RUN_MIN_DURATION_MS, TEST_RUN_MIN_QUERY_COUNT
from code.config.resolve import RATE_FIELDS, dataset_size, loadgen_model, scales_qps
from code.config.resolved import ResolvedConfig


def loaded_samples(config: ResolvedConfig, sample_count: int) -> int:
    """The samples LoadGen loads for a performance test: the override, else the set up to its full size."""
    override = config["performance_sample_count_override"]
    return int(override) if override is not None else min(sample_count, dataset_size(config))


def user_conf_entries(config: ResolvedConfig, sample_count: int, device_share: float = 1.0,
                      probe_samples: int | None = None) -> dict[str, str]:
    """The ``key = value`` pairs (without the ``model.scenario.`` prefix) this run needs. ``device_share``: what is
    left to scale the config's QPS by, beyond ``ResolvedConfig.device_share``. ``probe_samples``: the Offline query
    of a --test_run's probe, which loads only that many: in equal-issue mode (``EQUAL_ISSUE``) LoadGen pads an
    Offline query to a multiple of the loaded samples, so a probe that loaded the whole set would run it all; a probe
    is never a result."""
    entries: dict[str, str] = {}
    if config.scenario is Scenario.SingleStream:
        entries["target_latency"] = repr(config["single_stream_expected_latency_ns"] / 1e6)  # ms
    else:
        entries["target_qps"] = repr(float(config[RATE_FIELDS[config.scenario]]) * device_share)
    if config["test_run"]:
        entries["min_duration"] = str(TEST_RUN_MIN_DURATION_MS)
        entries["min_query_count"] = str(TEST_RUN_MIN_QUERY_COUNT)
    for name in ("min_duration", "max_duration", "min_query_count", "max_query_count"):
        if config[name] is not None:
            entries[name] = str(config[name])
    loaded = loaded_samples(config, sample_count)
    if probe_samples is not None:
        loaded = max(1, min(probe_samples, loaded))
    elif short_equal_issue(config):
        loaded = min(loaded, test_run_samples(config, entries))
    # Written where it differs from mlperf.conf's, or the config sets it: a data set smaller than the real one
    # (tests, a subset), since LoadGen can only load what exists; a probe's query.
    if config["performance_sample_count_override"] is not None or loaded < dataset_size(config):
        entries["performance_sample_count_override"] = str(loaded)
    return entries


def qsl_performance_sample_count(config: ResolvedConfig, sample_count: int, device_share: float = 1.0,
                                 probe_samples: int | None = None) -> int:
    """The performance sample count the QSL reports to LoadGen: the samples this test loads. In equal-issue mode
    LoadGen rounds a SingleStream test's min_query_count up to a multiple of the QSL's own count, not of user.conf's
    override, so a QSL that reported the whole set would make a probe or a short test issue every sample of it
    (13,368 one-second queries of llama3.1-8b)."""
    override = user_conf_entries(config, sample_count, device_share, probe_samples).get(
        "performance_sample_count_override")
    return min(sample_count, int(override)) if override is not None else loaded_samples(config, sample_count)


def short_equal_issue(config: ResolvedConfig) -> bool:
    """A --test_run of an equal-issue benchmark that names no sample count: LoadGen would pad its queries to the whole
    data set (13,368 samples: minutes on one GPU), so it loads what the test's duration issues instead."""
    return (bool(config["test_run"]) and config.benchmark in EQUAL_ISSUE
            and config["performance_sample_count_override"] is None and not config["synthetic_sample_count"])


def test_run_samples(config: ResolvedConfig, entries: dict[str, str]) -> int:
    """Samples a test of this rate and duration issues, as LoadGen sizes Offline's query (10% slack, truncated, in the
    same order of operations): loaded, they make Offline's query and the other scenarios' query count need no
    padding past the duration."""
    if config.scenario is Scenario.SingleStream:
        rate = 1e9 / float(config["single_stream_expected_latency_ns"])
    else:
        rate = float(entries["target_qps"])
    return max(1, int(1.1 * (int(entries["min_duration"]) / 1000) * rate))


def write_user_conf(config: ResolvedConfig, sample_count: int, directory: Path, device_share: float = 1.0,
                    probe_samples: int | None = None) -> Path:
    prefix = f"{loadgen_model(config)}.{config.scenario.value}"
    lines = [
        f"# Generated by `python -m code.main` on {time.strftime('%Y-%m-%d %H:%M:%S')} for {config.system}, "
        f"{config.benchmark_name}, {config.scenario.value} (config class {config.config_class}).",
        "# mlperf.conf is compiled into LoadGen; these lines only add the submitter's settings.",
    ]
    if config["test_run"]:
        lines.append("# --test_run: shortened durations; not a valid submission.")
    if probe_samples is not None:
        lines.append("# A --test_run's probe, never a result: it loads only the samples of its query.")
    share = config.device_share * device_share
    if share < 1.0 and scales_qps(config):
        lines.append(f"# target_qps: the config's whole-system value x {share:.4g} (the share of GPUs used).")
    lines += [f"{prefix}.{key} = {value}"
              for key, value in user_conf_entries(config, sample_count, device_share, probe_samples).items()]
    path = directory / "user.conf"
    path.write_text("\n".join(lines) + "\n")
    return path
