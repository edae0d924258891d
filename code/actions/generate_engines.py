"""``--action=generate_engines``: build each (benchmark, scenario)'s engine under build/engines/."""

from __future__ import annotations

from code.actions.common import resolved_configs, system_name
from code.common.arguments import RunRequest
from code.common.benchmarks import load_benchmark
from code.common.devices import release_cached_gpu_memory
from code.common.log import get_logger

log = get_logger("generate_engines")


def generate_engines(request: RunRequest) -> None:
    system = system_name(request)
    for config in resolved_configs(request, system):
        report = load_benchmark(config.benchmark).generate_engine(config)
        details = ", ".join(f"{key}: {value}" for key, value in report.items())
        log.info("%s %s %s: %s", system, config.benchmark_name, config.scenario.value, details)
    release_cached_gpu_memory()  # the tests that follow run in other processes, on the same GPUs
