"""``make add_system``: stub config classes and a system description for this machine.

Detects the system (GPU model and count through NVML, or CPU), then for each benchmark and scenario appends a
registered class named after it to ``configs/<bench>/<Scenario>/custom.py`` (loaded automatically when present),
and writes ``systems/<name>.json`` with the fields the MLPerf submission checker requires. The stubs run as they
are; tune ``gpu_batch_size`` and the target QPS/latency with ``make run RUN_ARGS="... --test_run"``.

Usage: ``python -m scripts.add_system [--system_name NAME] [--benchmarks bert,gptj] [--dry_run]``
"""

from __future__ import annotations

import argparse
import json
import sys

from code.common.constants import Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.common.systems import CPU_SYSTEM, DetectedSystem, detect_system
from configs.configuration import ConfigRegistry, WorkloadSetting

# Starting values per benchmark and scenario for a GPU and for a CPU-only machine: meant to run, then be tuned.
STUB_VALUES = {
    Benchmark.BERT: {
        Scenario.Offline: {"gpu": {"gpu_batch_size": 64, "offline_expected_qps": 500.0},
                           "cpu": {"gpu_batch_size": 8, "offline_expected_qps": 2.0}},
        Scenario.Server: {"gpu": {"gpu_batch_size": 32, "server_target_qps": 200.0},
                          "cpu": {"gpu_batch_size": 4, "server_target_qps": 0.5}},
        Scenario.SingleStream: {"gpu": {"single_stream_expected_latency_ns": 10_000_000},
                                "cpu": {"single_stream_expected_latency_ns": 500_000_000}},
    },
    # GPT-J-6B does not run usefully on a CPU: CPU stubs use the tiny model on random weights (like the CPU class).
    Benchmark.GPTJ: {
        Scenario.Offline: {"gpu": {"gpu_batch_size": 16, "offline_expected_qps": 2.0},
                           "cpu": {"model_name": "tiny", "synthetic_sample_count": 64, "gpu_batch_size": 16,
                                   "offline_expected_qps": 2.0}},
        Scenario.Server: {"gpu": {"gpu_batch_size": 8, "server_target_qps": 1.0},
                          "cpu": {"model_name": "tiny", "synthetic_sample_count": 64, "gpu_batch_size": 8,
                                  "server_target_qps": 0.5}},
        Scenario.SingleStream: {"gpu": {"single_stream_expected_latency_ns": 5_000_000_000},
                                "cpu": {"model_name": "tiny", "synthetic_sample_count": 64,
                                        "single_stream_expected_latency_ns": 2_000_000_000}},
    },
}
# Engine precision of the stubs: (99% class, 99.9% class) on a GPU and on a CPU.
STUB_PRECISION = {
    Benchmark.BERT: {"gpu": ("fp16", "fp16"), "cpu": ("bf16", "fp32")},
    Benchmark.GPTJ: {"gpu": ("bf16", "bf16"), "cpu": ("fp32", "fp32")},
}
# Fields that differ between the 99% and the 99.9% class: BERT's GELU epilogue (tanh form) keeps the 99% bar only
# (documentation/bert_gpu.md).
STUB_BY_TARGET = {Benchmark.BERT: {"gpu": ({"gelu_in_gemm": True}, {"gelu_in_gemm": False})}}
HEADER = '''"""Configs of systems added with `make add_system` (scripts/add_system.py); edit them freely.

This file is imported after the scenario's own configs. Each class is one machine, named after its GPU model
and count; fields are listed in documentation/configs.md.
"""

from code.common.constants import AccuracyTarget, HarnessType, PowerSetting
from configs.configuration import ConfigRegistry
from configs.{bench}.{scenario} import {base}
'''


def stub_classes(system: str, benchmark: Benchmark, scenario: Scenario, on_gpu: bool) -> str:
    kind = "gpu" if on_gpu else "cpu"
    values = STUB_VALUES[benchmark][scenario][kind]
    precision, high_accuracy_precision = STUB_PRECISION[benchmark][kind]
    lines = [
        "",
        "",
        "@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)",
        f"class {system}({scenario.value}BaseConfig):",
        '    """Added by make add_system: starting values, to be tuned with --test_run runs."""',
        "",
        f'    precision = "{precision}"',
        f'    device = "{"cuda" if on_gpu else "cpu"}"',
    ]
    by_target, high_accuracy_by_target = STUB_BY_TARGET.get(benchmark, {}).get(kind, ({}, {}))
    lines += [f"    {name} = {value!r}" for name, value in {**values, **by_target}.items()]
    lines += [
        "",
        "",
        "@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)",
        f"class {system}_HighAccuracy({system}):",
        f'    precision = "{high_accuracy_precision}"',
    ]
    lines += [f"    {name} = {value!r}" for name, value in high_accuracy_by_target.items()]
    return "\n".join(lines) + "\n"


def add_configs(system: str, benchmark: Benchmark, on_gpu: bool, dry_run: bool) -> list[str]:
    """Append stubs where the system has no config yet; returns what was done per scenario."""
    done = []
    for scenario in Scenario:
        ConfigRegistry.load(benchmark, scenario)
        registered = {key[2] for key in ConfigRegistry.registered() if key[:2] == (benchmark, scenario)}
        path = REPO_ROOT / "configs" / benchmark.value / scenario.value / "custom.py"
        if system in registered:
            done.append(f"{path}: {system} already configured, left as is")
            continue
        if not dry_run:
            if not path.exists():
                path.write_text(HEADER.format(bench=benchmark.value, scenario=scenario.value,
                                              base=f"{scenario.value}BaseConfig"))
            with open(path, "a") as custom:
                custom.write(stub_classes(system, benchmark, scenario, on_gpu))
        done.append(f"{path}: added {system} and {system}_HighAccuracy")
    # Make sure what we wrote imports and validates (the registry checks every field).
    if not dry_run:
        for scenario in Scenario:
            ConfigRegistry.get(benchmark, scenario, system, WorkloadSetting())
    return done


def system_description(detected: DetectedSystem, system: str) -> dict[str, object]:
    """The submission checker's required fields, filled with what detection knows; the rest left to fill in."""
    gpu = detected.gpus[0] if detected.gpus else None
    return {
        "division": "closed",
        "submitter": "FILL_ME",
        "status": "available",
        "system_name": system,
        "system_type": "datacenter",
        "system_type_detail": "",
        "number_of_nodes": "1",
        "host_processor_model_name": detected.cpu_model,
        "host_processors_per_node": "FILL_ME",
        "host_processor_core_count": str(detected.cpu_cores),
        "host_processor_frequency": "",
        "host_processor_caches": "",
        "host_processor_interconnect": "",
        "host_memory_capacity": f"{round(detected.memory_bytes / 2**30)} GB",
        "host_memory_configuration": "",
        "host_storage_capacity": "FILL_ME",
        "host_storage_type": "FILL_ME",
        "host_networking": "",
        "host_networking_topology": "",
        "host_network_card_count": "",
        "accelerators_per_node": str(len(detected.gpus)),
        "accelerator_model_name": gpu.name if gpu else "N/A",
        "accelerator_memory_capacity": f"{round(gpu.memory_bytes / 2**30)} GB" if gpu else "N/A",
        "accelerator_memory_configuration": "",
        "accelerator_frequency": "",
        "accelerator_host_interconnect": "",
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
        "accelerator_on-chip_memories": "",
        "cooling": "",
        "framework": "PyTorch, our C++ LoadGen harness",
        "operating_system": "FILL_ME",
        "other_software_stack": "",
        "hw_notes": "",
        "sw_notes": "",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system_name", help="name to use instead of the detected one")
    parser.add_argument("--benchmarks", default="bert,gptj", help="comma list (default: bert,gptj)")
    parser.add_argument("--dry_run", action="store_true", help="say what would be written, write nothing")
    args = parser.parse_args(argv)
    detected = detect_system()
    system = args.system_name or detected.name
    if not system.isidentifier():
        parser.error(f"--system_name={system} must be a valid Python class name (letters, digits, _)")
    on_gpu = bool(detected.gpus) and system != CPU_SYSTEM
    print(f"[add_system] system: {system} ({json.dumps(detected.describe())})")
    for name in args.benchmarks.split(","):
        benchmark, _ = Benchmark.parse(name)
        for line in add_configs(system, benchmark, on_gpu, args.dry_run):
            print(f"[add_system] {line}")
    description = REPO_ROOT / "systems" / f"{system}.json"
    if description.exists():
        print(f"[add_system] {description} exists, left as is")
    elif not args.dry_run:
        description.write_text(json.dumps(system_description(detected, system), indent=2) + "\n")
        print(f"[add_system] wrote {description}: fill in the FILL_ME fields before submitting")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
