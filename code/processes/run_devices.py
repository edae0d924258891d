"""The devices of one test: one runner in this process, or one worker process per device.

One device runs in the LoadGen process, its runner called by the core's threads. Several run one worker each
(code/processes/device_worker.py), pinned to their GPU's NUMA node, exchanging batches and responses with the core over
sockets; all must be ready before LoadGen starts, and one that fails during the test ends it with its device named.
documentation/multi_gpu.md and documentation/cluster.md explain the design.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common.log import get_logger
from code.common.placement import allowed_cpu_set, cpu_shares, format_cpu_list, gpu_placement
from code.common.systems import cuda_visible_entries, detect_gpus
from code.harness.cluster import ClusterPool, ClusterSettings, join, leave
from code.harness.core import device_error
from code.harness.workers import WorkerPlan, WorkerPool, WorkerStartError, cpu_figures
from code.mlperf.benchmarks import BenchmarkError, PreparedTest
from code.mlperf.devices import torch_device, visible_gpus
from code.processes.device_worker import DEVICE_WORKER_MODULE

log = get_logger("run_single_test")


class DeviceFailedError(BenchmarkError):
    """A worker failed during the test: the samples after it were answered empty, and LoadGen's logs are invalid."""


@dataclass
class DevicesReport:
    """What the devices said of the test, for metadata.json."""

    devices: list[str] = field(default_factory=list)  # the devices that ran, as the core and the logs name them
    workers: list[dict[str, Any]] = field(default_factory=list)  # per worker: placement, load time, host CPU
    engine_stats: dict[str, Any] | None = None  # the engines' counters (GPT-J inflight), summed over devices
    loadgen_host: dict[str, float] = field(default_factory=dict)  # the LoadGen process's CPU during the test


def run_on_devices(prepared: PreparedTest, spec_file: Path, num_workers: int, round_name: str,
                   run: Callable[[list[Any], list[str]], None],
                   cluster: ClusterSettings | None = None) -> DevicesReport:
    """Build the runners (here, or in one worker process per device: of this machine, or of every node of
    ``cluster``), then ``run(runners, device names)``: the LoadGen test."""
    if cluster is None and len(prepared.devices) == 1:
        name = prepared.devices[0]
        runner = prepared.runner_on(torch_device(name), name)
        loadgen_host = _timed(lambda: run([runner], [name]))
        stats = runner.stats() if callable(getattr(runner, "stats", None)) else None
        return DevicesReport(devices=[name], engine_stats=stats, loadgen_host=loadgen_host)
    command = [sys.executable, "-m", DEVICE_WORKER_MODULE]
    if cluster is None:
        pool = WorkerPool([*command, str(spec_file)], worker_plans(prepared.devices), connections=num_workers)
    else:
        on_gpus = prepared.devices[0].startswith("cuda")
        plans = join(cluster, on_gpus, cpu_workers=1 if on_gpus else len(prepared.devices))
        pool = ClusterPool(command, plans, num_workers, cluster, spec_file.read_text())
    try:
        return _run_pool(pool, round_name, run, ready_timeout_s=cluster.ready_timeout_s if cluster else None)
    finally:
        if cluster is not None:
            leave()


def _run_pool(pool: WorkerPool, round_name: str, run: Callable[[list[Any], list[str]], None],
              ready_timeout_s: float | None) -> DevicesReport:
    with pool:
        log.info("starting %d worker processes, one per device", len(pool.plans))
        ready = pool.wait_ready(ready_timeout_s)
        plans = [worker.plan for worker in pool.workers]  # a cluster's workers named their devices in their HELLO
        for plan, said in zip(plans, ready, strict=True):
            if said.get("local_device") != plan.local_device:
                raise WorkerStartError(f"the worker of {plan.device} runs on {said.get('local_device')}, not on "
                                       f"{plan.local_device} (CUDA_VISIBLE_DEVICES={plan.cuda_visible_devices} "
                                       "shows it no GPU PyTorch can use); check that GPU with nvidia-smi, or leave "
                                       "it out with --devices")
            _check_placement(plan, said)
        kinds = {said["continuous"] for said in ready}
        if len(kinds) != 1:
            raise BenchmarkError(f"the workers run different kinds of runner ({ready}); one test runs one kind")
        names = [plan.device for plan in plans]
        try:
            loadgen_host = _timed(lambda: run(pool.connections_for_core(kinds.pop()), names))
        except device_error(round_name) as error:  # raised after the test, for a worker that failed in it
            raise device_failure(error, pool.exit_notes()) from error
        finished = pool.finish()
        for note in pool.exit_notes():  # after a test that passed: its figures stand, but say what went wrong
            log.warning("after the test, %s", note)
    workers = [{"device": plan.device, "numa_node": plan.numa_node, "cpus": format_cpu_list(plan.cpus), **said,
                **stats} for plan, said, stats in zip(plans, ready, finished, strict=True)]
    return DevicesReport(devices=names, workers=workers, engine_stats=engine_stats_of(finished),
                         loadgen_host=loadgen_host)


def engine_stats_of(finished: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The workers' engine counters for metadata.json, or None: several engines' summed (side by side, so the time
    is the longest), each beside them. A worker that sent none makes the sum a part, said so."""
    engines = [stats["engine"] for stats in finished if "engine" in stats]
    if not engines:
        return None
    combined = engines[0]
    if len(engines) > 1:
        total = {key: sum(one.get(key, 0) for one in engines) for key, value in engines[0].items()
                 if isinstance(value, int | float) and not isinstance(value, bool) and key != "seconds"}
        combined = {**total, "seconds": max(one.get("seconds", 0.0) for one in engines), "per_device": engines}
    silent = [stats.get("error", "") for stats in finished if "engine" not in stats]
    if silent:
        combined = {"incomplete": f"{len(silent)} of {len(finished)} workers sent no counters ({'; '.join(silent)})",
                    **combined}
    return combined


def worker_plans(devices: list[str]) -> list[WorkerPlan]:
    """One worker per device: a GPU's worker sees that GPU alone and runs on its NUMA node's CPUs; CPU workers
    (``cpu:N``) share the allowed CPUs between them."""
    allowed = allowed_cpu_set()
    if all(device.startswith("cpu") for device in devices):
        return [WorkerPlan(device, "cpu", "", placement.cpus, None)
                for device, placement in zip(devices, cpu_shares(allowed, len(devices)), strict=True)]
    gpus, _ = detect_gpus()  # in the order CUDA_VISIBLE_DEVICES shows them, as PyTorch numbers them
    entries = cuda_visible_entries(max(len(gpus), visible_gpus()))
    plans = []
    for device in devices:
        index = int(device.split(":")[1])
        bus_id = gpus[index].pci_bus_id if index < len(gpus) else ""
        placement = gpu_placement(bus_id or None, allowed)
        plans.append(WorkerPlan(device, "cuda:0", entries[index], placement.cpus, placement.numa_node, bus_id))
    return plans


def _check_placement(plan: WorkerPlan, said: dict[str, Any]) -> None:
    """A worker whose GPU is not the one NVML placed (CUDA and NVML number GPUs differently) runs pinned to the
    wrong node's CPUs: said, not fatal."""
    got = said.get("pci_bus_id", "")
    if plan.pci_bus_id and got and got.upper() != plan.pci_bus_id.upper():
        log.warning("the worker of %s got the GPU at %s, not %s as planned: its CPU pinning may be off "
                    "(set CUDA_DEVICE_ORDER=PCI_BUS_ID)", plan.device, got, plan.pci_bus_id)
    # The CPUs the worker runs on, as it says: a worker on another node pins itself there, unplanned here.
    log.info("%s: %s, ready in %.1f s, NUMA node %s, CPUs %s", plan.device, said.get("gpu", said.get("local_device")),
             said.get("load_s", 0.0), plan.numa_node if plan.numa_node is not None else "not reported",
             said.get("cpus") or format_cpu_list(plan.cpus))


def device_failure(error: BaseException, exit_notes: list[str]) -> DeviceFailedError:
    """One line for a device that failed during the test: where, the error's last line, and how each worker ended."""
    text = str(error).strip()
    head, _, trace = text.partition("Traceback (most recent call last):")
    lines = [line for line in trace.splitlines() if line.strip()]
    summary = f"{head.rstrip(': ')}: {lines[-1].strip()}" if lines else text.splitlines()[0] if text else repr(error)
    ended = f" ({'; '.join(exit_notes)})" if exit_notes else ""
    return DeviceFailedError(f"{summary}{ended}; the test ended there and is not valid: the samples after the "
                             "failure were answered empty (LoadGen's logs are kept)")


def _timed(call: Callable[[], None]) -> dict[str, float]:
    """Run ``call``; the CPU this (LoadGen) process used meanwhile, per wall second."""
    cpu, wall = time.process_time(), time.monotonic()
    call()
    return cpu_figures(time.process_time() - cpu, time.monotonic() - wall)
