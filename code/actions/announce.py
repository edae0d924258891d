"""What a run will do, said before anything slow starts: its tests, test mode, length and an estimated time.

A newcomer who types ``make run`` with no RUN_ARGS, or with a typo that happens to be valid, learns at once what is
about to run and for about how long, instead of after a C++ build and a model load. The make targets that run tests
say it before building the core (``--check_args``); a run says it again as it starts, for ``python -m code.main``.
The time is a rough lower bound: each LoadGen test at the config's expected rate for its minimum duration or
sample count; engine builds, model loading, a --test_run probe and a rate far from the machine's come on top.
"""

from __future__ import annotations

import os

from code.common.constants import Scenario, TestMode
from code.common.log import get_logger
from code.config.fields import MLPERF_MIN_DURATION_MS, min_duration_ms, planned_samples
from code.config.resolve import RATE_FIELDS, dataset_size
from code.config.resolved import ResolvedConfig
from code.mlperf.arguments import MAIN_DEFAULTS, RunRequest
from code.mlperf.verdicts import round_reason
from code.tuning.accuracy_gate import GatePlan

log = get_logger("plan")
# The main arguments a newcomer most often leaves out; the plan names the value each took by default.
SAID_DEFAULTS = ("benchmarks", "scenarios")


def seconds_of_test(config: ResolvedConfig, mode: TestMode) -> float:
    """The seconds one LoadGen test takes at the config's expected rate: an accuracy test issues each sample once; a
    performance test the samples LoadGen plans, at least the data set in a full-length Offline query."""
    values = config.values
    if mode is TestMode.AccuracyOnly:
        samples = values.get("num_samples") or dataset_size(config)
    else:
        samples = planned_samples(config.scenario, values)
        full_offline = config.scenario is Scenario.Offline and not values.get("test_run")
        if full_offline and values.get("min_query_count") is None:
            samples = max(samples, dataset_size(config))
    rate = RATE_FIELDS.get(config.scenario)  # samples/s; SingleStream: 1 / its latency
    seconds = samples / (float(config[rate]) if rate else 1e9 / int(config["single_stream_expected_latency_ns"]))
    if mode is not TestMode.AccuracyOnly and values.get("max_duration"):
        seconds = min(seconds, values["max_duration"] / 1000)
    return seconds


def planned_tests(gate_plan: GatePlan) -> list[TestMode]:
    """The LoadGen tests a config runs, in order: the accuracy gate's AccuracyOnly test first where the gate decides
    the engine and the mode has none of its own."""
    modes = TestMode.parse(gate_plan.config["test_mode"]).loadgen_modes
    return [TestMode.AccuracyOnly, *modes] if gate_plan.applies and TestMode.AccuracyOnly not in modes else modes


def duration_text(seconds: float) -> str:
    """42 s, 3 min, 1.5 h: as precise as an estimate deserves."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _length(configs: list[ResolvedConfig]) -> str:
    """Full length or --test_run, and the minimum duration of the performance tests."""
    durations = sorted({min_duration_ms(config.values) // 1000 for config in configs})
    each = " or ".join(f"{seconds} s" for seconds in durations)
    if any(config["test_run"] for config in configs):
        return f"--test_run: short, min_duration {each}; not a submission"
    if durations == [MLPERF_MIN_DURATION_MS // 1000]:
        return f"full length: min_duration {each}, as a submission needs"
    return f"full length, min_duration {each}"


def plan_lines(request: RunRequest, system: str, gate_plans: list[GatePlan]) -> list[str]:
    """The announcement: what runs where, each test with its estimate, the defaults taken, and the total."""
    configs = [gate_plan.config for gate_plan in gate_plans]
    what = "find_performance (measure, then store build/tuned/)" if request.find_performance else request.action
    rounds = ", ".join(dict.fromkeys(config["round"] for config in configs))
    lines = [f"{what} on {system}, round {rounds}, {_length(configs)}; "
             f"{sum(len(planned_tests(gate_plan)) for gate_plan in gate_plans)} LoadGen test(s):"]
    total = 0.0
    for gate_plan in gate_plans:
        config = gate_plan.config
        for mode in planned_tests(gate_plan):
            seconds = seconds_of_test(config, mode)
            total += seconds
            gate = " (the accuracy gate's)" if gate_plan.applies and mode is TestMode.AccuracyOnly else ""
            lines.append(f"  {config.benchmark_name} {config.scenario.value} {mode.value}{gate}: about "
                         f"{duration_text(seconds)}")
    lines += [f"  {reason}" for reason in dict.fromkeys(round_reason(config) for config in configs)]
    taken = [f"--{name}={MAIN_DEFAULTS[name]}" for name in SAID_DEFAULTS if name in request.defaulted]
    if "test_mode" not in request.overrides:
        taken.append(f"--test_mode={configs[0]['test_mode']}" if configs else "")
    if "test_run" not in request.overrides:
        taken.append("full length (add --test_run for a short run)")
    if any(taken):
        lines.append(f"taken by default: {', '.join(item for item in taken if item)} (make run RUN_ARGS=--help "
                     "lists every flag and its default)")
    tries = "; find_performance repeats tests while it searches, so more" if request.find_performance else ""
    lines.append(f"estimated time: at least {duration_text(total)} of LoadGen tests (an estimate from the configs' "
                 f"expected rates and min_duration; engine builds and model loading come on top{tries})")
    return lines


# Set by make for a run whose ``check_args`` step said the plan before the build: the run checks again, silently.
PLAN_SAID_ENV = "MLPERF_PLAN_SAID"


def announce(request: RunRequest) -> None:
    """Resolve what the request runs and say it, one ``[plan]`` line each; refuse first what the run itself would
    refuse before its first test (a config error, a round's refusal), so a check before the build catches it too."""
    from code.processes.test_process import check_round
    from code.tuning.plans import gate_plans, system_name

    system = system_name(request)
    plans = list(gate_plans(request, system))
    for gate_plan in plans:
        check_round(gate_plan.config)
    if os.environ.get(PLAN_SAID_ENV) and not request.check_args:
        return
    for line in plan_lines(request, system, plans):
        log.info("%s", line)
