"""What every action needs: the system to use and the resolved config of each (benchmark, scenario)."""

from __future__ import annotations

from collections.abc import Iterator

from code.common.arguments import RunRequest
from code.common.config import ResolvedConfig, WorkloadSetting
from code.common.systems import detect_system
from configs.configuration import resolve_config


def system_name(request: RunRequest) -> str:
    """--system_name when given, else the detected system (GPU model and count, or CPU)."""
    return request.system_name or detect_system().name


def resolved_configs(request: RunRequest, system: str) -> Iterator[ResolvedConfig]:
    """Every (benchmark, scenario) the request names, resolved RUN_ARGS > config > default."""
    for bench in request.benchmarks:
        workload = WorkloadSetting(request.harness_type, bench.accuracy_target, request.power_setting)
        for scenario in request.scenarios:
            yield resolve_config(bench.benchmark, scenario, system, workload, request.overrides)
