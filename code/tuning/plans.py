"""What every action needs: the system to use and the resolved config of each (benchmark, scenario)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from code.common.constants import Scenario
from code.common.gpu_models import by_name
from code.common.rounds import RoundError, default_scenarios, get_round
from code.common.system_description import system_type
from code.common.systems import SystemDetectionError, detect_system, gpu_system_name
from code.config.resolve import resolve_config
from code.config.resolved import ResolvedConfig, WorkloadSetting, check_run_args_used
from code.mlperf.arguments import ArgumentError, BenchmarkRequest, RunRequest

if TYPE_CHECKING:
    from code.tuning.accuracy_gate import GatePlan


def system_name(request: RunRequest) -> str:
    """--system_name, else the detected system; with --gpu_as, as many GPUs of the stand-in model (one on a machine
    without a GPU, where only ``make info`` can use it)."""
    stand_in = request.overrides.get("gpu_as")
    if request.system_name and stand_in:
        raise ArgumentError(f"--system_name={request.system_name} and --gpu_as={stand_in} both name the system; give "
                            "one: --gpu_as runs as that GPU model here, --system_name only reads another's configs")
    if request.system_name:
        return request.system_name
    detected = detect_system()
    if stand_in:
        return gpu_system_name(by_name(stand_in).name, max(1, len(detected.gpus)))
    return detected.name


def scenarios_of(request: RunRequest, bench: BenchmarkRequest, system: str) -> list[Scenario]:
    """The scenarios RUN_ARGS name, or with --scenarios=all those the round accepts of the benchmark on the system's
    type (systems/<system>.json), so `all` never runs a test the round would refuse; all three without a type. With
    no round named, the round is the newest buildable one that accepts the benchmark there (``default_scenarios``),
    which is then each of those tests' default round too, so `all` runs one round."""
    if not request.all_scenarios:
        return request.scenarios
    try:
        kind = system_type(system)
    except SystemDetectionError:
        return list(Scenario)
    if "round" not in request.overrides:
        try:
            return list(default_scenarios(bench.name, kind)[1])
        except RoundError as error:
            raise ArgumentError(f"--scenarios=all on {system} (systems/{system}.json): {error}") from None
    round_ = get_round(request.overrides["round"])
    accepted = round_.scenarios_for(kind, bench.name)
    if not accepted:
        raise ArgumentError(f"--scenarios=all: round {round_.name} accepts no {bench.name} scenario on {kind} systems "
                            f"({system}, systems/{system}.json); name the scenarios (--scenarios=offline) or another "
                            "round (--round=...)")
    return list(accepted)


def resolved_configs(request: RunRequest, system: str, whole_run: bool = True) -> Iterator[ResolvedConfig]:
    """Every (benchmark, scenario) the request names, resolved with the engine a run starts with (``gate_plans``)."""
    return (gate_plan.config for gate_plan in gate_plans(request, system, whole_run=whole_run))


def gate_plans(request: RunRequest, system: str, clear_stale: bool = False,
               whole_run: bool = True) -> Iterator[GatePlan]:
    """Each (benchmark, scenario) the request names, with the rung the run starts at and whether the accuracy gate
    decides its engine (``clear_stale``: a run's, which clears misses recorded for another checkpoint).
    ``whole_run``: the request is the whole run, so a field none of its tests reads is refused first."""
    from code.tuning.accuracy_gate import plan

    configs = []
    for bench in request.benchmarks:
        workload = WorkloadSetting(request.harness_type, bench.accuracy_target, request.power_setting)
        for scenario in scenarios_of(request, bench, system):
            configs.append(resolve_config(bench.benchmark, scenario, system, workload, request.overrides,
                                          warn_tuned=False))
    if whole_run:
        check_run_args_used(request.overrides, configs, request.all_scenarios)
    for config in configs:
        yield plan(config, request.overrides, clear_stale)
