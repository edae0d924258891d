"""``--action=info``: the detected system and the fully resolved config, with where each value came from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

from code.common.constants import TestMode
from code.common.system_description import (
    DescriptionFiles,
    SystemDescriptionError,
    description_problems,
    load_description,
    shown,
)
from code.common.systems import detect_system, gpu_model_for_system
from code.config.resolve import RATE_FIELDS
from code.config.resolved import NoEngineError, ResolvedConfig, check_run_args_used, where_from
from code.mlperf.arguments import RunRequest
from code.mlperf.benchmarks import InputsUnavailableError, load_benchmark
from code.mlperf.verdicts import round_reason
from code.tuning.plans import resolved_configs, scenarios_of, system_name


def describe_description(system: str) -> str:
    """Whether systems/<system>.json (with its user file and SUBMITTER) would pass the submission checker."""
    files = DescriptionFiles.of(system)
    try:
        problems = description_problems(load_description(system), files)
    except SystemDescriptionError as error:
        return f"System description: {error}"
    if not problems:
        return f"System description {shown(files.base)}: complete (make check_system_json)"
    missing = ", ".join(problem.split(":", 1)[0] for problem in problems)
    return (f"System description {shown(files.base)}: {len(problems)} field(s) to fill before submitting: {missing} "
            "(make check_system_json says where)")


def _each_config(request: RunRequest, system: str) -> Iterator[ResolvedConfig | str]:
    """Each (benchmark, scenario)'s resolved config, or a line saying that no engine of it runs on the system's GPU
    (GPT-J on a GPU too small for it): one benchmark that does not fit says so and the others are still shown."""
    for bench in request.benchmarks:
        for scenario in scenarios_of(request, bench, system):
            one = replace(request, benchmarks=[bench], scenarios=[scenario], all_scenarios=False)
            try:
                yield from resolved_configs(one, system, whole_run=False)
            except NoEngineError as error:
                yield f"\n== {system} {bench.name} {scenario.value}: {error}"


def info(request: RunRequest) -> None:
    print("Detected system:\n" + json.dumps(detect_system().describe(), indent=2))
    system = system_name(request)
    if request.system_name:
        print(f"Using configs of --system_name={system}")
    if request.overrides.get("gpu_as"):
        print(f"Standing in for {system} (--gpu_as): its configs, engines and memory, on this machine's GPUs")
    gpu = gpu_model_for_system(system)
    if gpu is not None:
        print(f"GPU model {gpu.name}: {gpu.describe()} ({gpu.source})")
    print(describe_description(system))
    each = list(_each_config(request, system))
    resolved = [config for config in each if not isinstance(config, str)]
    if len(resolved) == len(each):  # a test that could not resolve might have read a field the others do not
        check_run_args_used(request.overrides, resolved, request.all_scenarios)
    for config in each:
        if isinstance(config, str):
            print(config)
            continue
        print(f"\n== {system} {config.benchmark_name} {config.scenario.value} "
              f"({config.workload.shortname()}, config class {config.config_class})")
        width = max(len(name) for name in config.values)
        for name, value in sorted(config.values.items()):
            print(f"  {name:<{width}} = {value!r:<24} [{config.sources[name]}]")
        rate = RATE_FIELDS.get(config.scenario)
        if rate is not None:  # the number a run's LoadGen plan follows, as the run uses it (share included)
            print(f"  -> {where_from(config, rate)}")
        print(f"  -> {round_reason(config)}")
        if config.ladder:  # which engine a run starts with, and whether its accuracy run decides it
            print(f"  -> engine ladder: {', '.join(rung.name for rung in config.ladder)}; a run starts with "
                  f"{config.engine_choice['summary']}")
        for name, why in config.skipped:
            print(f"  -> skipped engine {name}: {why}")
        mode = TestMode.parse(config["test_mode"])
        try:
            inputs = load_benchmark(config.benchmark).describe_inputs(config, mode)
            for key, value in inputs.items():
                print(f"  -> {key}: {value}")
        except InputsUnavailableError as error:
            print(f"  -> cannot run {mode.value}: {error}")
