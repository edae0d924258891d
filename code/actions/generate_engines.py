"""``--action=generate_engines``: build each (benchmark, scenario)'s engine under build/engines/: with an engine
ladder, the engine a run starts with (the first that has not missed its accuracy target here: accuracy_gate.py)."""

from __future__ import annotations

from code.common.log import get_logger
from code.mlperf.arguments import RunRequest
from code.mlperf.benchmarks import load_benchmark
from code.mlperf.devices import release_cached_gpu_memory
from code.tuning.plans import gate_plans, system_name

log = get_logger("generate_engines")


def generate_engines(request: RunRequest) -> None:
    system = system_name(request)
    for gate_plan in gate_plans(request, system):
        config = gate_plan.config
        if gate_plan.exhausted:  # the run refuses it, naming the fix: nothing of it is worth building
            log.info("%s %s %s: nothing built: %s", system, config.benchmark_name, config.scenario.value,
                     config.engine_choice["summary"])
            continue
        report = load_benchmark(config.benchmark).generate_engine(config)
        details = ", ".join(f"{key}: {value}" for key, value in report.items())
        log.info("%s %s %s: %s", system, config.benchmark_name, config.scenario.value, details)
    release_cached_gpu_memory()  # the tests that follow run in other processes, on the same GPUs
