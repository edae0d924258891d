"""What every action needs: the system to use and the resolved config of each (benchmark, scenario)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from code.common.arguments import RunRequest
from code.common.config import ResolvedConfig, WorkloadSetting
from code.common.systems import detect_system
from configs.configuration import resolve_config

if TYPE_CHECKING:
    from code.actions.accuracy_gate import GatePlan


def system_name(request: RunRequest) -> str:
    """--system_name when given, else the detected system (GPU model and count, or CPU)."""
    return request.system_name or detect_system().name


def resolved_configs(request: RunRequest, system: str) -> Iterator[ResolvedConfig]:
    """Every (benchmark, scenario) the request names, resolved RUN_ARGS > tuned > rung > config > default, with the
    engine a run starts with (``gate_plans`` says how it was chosen)."""
    for gate_plan in gate_plans(request, system):
        yield gate_plan.config


def gate_plans(request: RunRequest, system: str, clear_stale: bool = False) -> Iterator[GatePlan]:
    """Each (benchmark, scenario) the request names, with the rung of its engine ladder the run starts at and
    whether the accuracy gate decides its engine (code/actions/accuracy_gate.py; ``clear_stale``: a run's, which
    clears the misses recorded for another checkpoint)."""
    from code.actions.accuracy_gate import plan

    for bench in request.benchmarks:
        workload = WorkloadSetting(request.harness_type, bench.accuracy_target, request.power_setting)
        for scenario in request.scenarios:
            config = resolve_config(bench.benchmark, scenario, system, workload, request.overrides, warn_tuned=False)
            yield plan(config, request.overrides, clear_stale)
