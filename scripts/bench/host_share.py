"""How much host CPU one device's backend needs per second of running: the figure that decides whether one process
(the C++ core's threads, one Python GIL) can feed every GPU of a machine, or each GPU needs a process of its own.

Runs one LoadGen test per (benchmark, scenario) through the product's own path (config, ``prepare_test``, the C++
core) with every runner wrapped to add up its threads' CPU time. CUDA waits are made to block instead of spin
(``cudaDeviceScheduleBlockingSync``), so a thread's CPU time is its work: Python, torch's dispatch, kernel and
graph launches, copies. A runner's CPU share (CPU seconds per wall second) bounds from above the GIL it holds, so
one process can feed about ``1 / share`` such devices before the GIL, not the GPUs, sets the pace.

    python -m scripts.bench.host_share --benchmarks=bert-99 --scenarios=offline [RUN_ARGS fields ...]
        [--duration_ms=20000] [--out=DIR]

Prints one row per test and writes ``host_share.json`` in a new ``build/host_share/<timestamp>/``.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from code.common.constants import TestMode
from code.common.paths import BUILD_DIR
from code.config.resolved import ResolvedConfig
from code.mlperf.arguments import parse_run_args
from code.mlperf.benchmarks import load_benchmark
from code.mlperf.devices import torch_device
from code.mlperf.run_logs import new_timestamped_dir

BLOCKING_SYNC = 0x04  # cudaDeviceScheduleBlockingSync


def block_on_cuda_waits() -> str:
    """Make CUDA waits sleep instead of spin, before torch creates its contexts; says what was done. Event waits
    follow the event's own flag, not the device's, so every torch.cuda.Event is made a blocking one too."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA: CPU time is all work"

    class BlockingEvent(torch.cuda.Event):
        def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):  # noqa: ANN204
            return super().__new__(cls, enable_timing=enable_timing, blocking=True, interprocess=interprocess)

    torch.cuda.Event = BlockingEvent
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line}
    if not paths:
        return "libcudart not found: waits may spin, so CPU shares are upper bounds"
    runtime = ctypes.CDLL(sorted(paths)[0])
    for device in range(torch.cuda.device_count()):
        runtime.cudaSetDevice(device)
        status = runtime.cudaSetDeviceFlags(BLOCKING_SYNC)
        if status != 0:
            return f"cudaSetDeviceFlags returned {status}: waits may spin, so CPU shares are upper bounds"
    return "blocking sync: CUDA waits sleep"


class CpuClock:
    """CPU seconds of the threads that ran a runner, added up call by call (each call on one thread)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one call of the runner: add the CPU seconds of this thread, also when the call raises."""
        started = time.thread_time()
        try:
            yield
        finally:
            with self._lock:
                self.cpu_s += time.thread_time() - started
                self.calls += 1


class TimedBatchRunner:
    def __init__(self, inner: Any) -> None:
        self.inner, self.clock = inner, CpuClock()

    def run_batch(self, sample_indices: Any) -> Any:
        with self.clock.call():
            return self.inner.run_batch(sample_indices)


class TimedContinuousRunner:
    def __init__(self, inner: Any) -> None:
        self.inner, self.clock = inner, CpuClock()

    def run_continuous(self, session: Any) -> None:
        with self.clock.call():
            self.inner.run_continuous(session)


def timed(runner: Any) -> TimedBatchRunner | TimedContinuousRunner:
    return TimedContinuousRunner(runner) if hasattr(runner, "run_continuous") else TimedBatchRunner(runner)


def measure(config: ResolvedConfig, log_dir: Path) -> dict[str, Any]:
    """One PerformanceOnly test with timed runners: throughput, wall time and each runner's CPU share."""
    from code.common.systems import detect_system
    from code.config.resolve import device_share, scales_qps
    from code.harness.core import run_test, timeline
    from code.processes.run_single_test import test_settings

    benchmark = load_benchmark(config.benchmark)
    prepared = benchmark.prepare_test(config, TestMode.PerformanceOnly)
    device = prepared.devices[0]  # one device's backend, in this process: what one worker process costs
    runners = [timed(prepared.runner_on(torch_device(device), device))]
    log_dir.mkdir(parents=True)
    # One GPU of the system: its share of the system's rate, as a run on one GPU of it expects.
    share = device_share([device], len(detect_system().gpus)) / config.device_share if scales_qps(config) else 1.0
    user_conf, settings = test_settings(config, TestMode.PerformanceOnly, prepared, log_dir, share)
    started = time.perf_counter()
    from code.harness.core import progress
    from code.harness.progress import PERIOD_S, ProgressReporter
    from code.processes.run_single_test import progress_shape

    with ProgressReporter(lambda: progress(config["round"]), progress_shape(config, user_conf), PERIOD_S):
        run_test(settings, prepared.sample_lengths, runners, device_names=[device])
    wall = time.perf_counter() - started
    times = timeline(config["round"])
    duration = float(times.completed_s.max() - times.issued_s.min()) if len(times.index) else wall
    shares = [runner.clock.cpu_s / duration for runner in runners]
    return {"benchmark": config.benchmark_name, "scenario": config.scenario.value, "devices": [device],
            "samples": len(times.index), "duration_s": round(duration, 2),
            "samples_per_s": round(len(times.index) / duration, 2),
            "runner_cpu_s": [round(runner.clock.cpu_s, 2) for runner in runners],
            "runner_calls": [runner.clock.calls for runner in runners], "cpu_share": [round(s, 4) for s in shares],
            "devices_one_process_feeds": round(1 / max(shares), 1) if max(shares) > 0 else None,
            "log_dir": str(log_dir)}


def main(argv: list[str]) -> int:
    options = {arg.split("=", 1)[0]: arg.split("=", 1)[1] for arg in argv if arg.startswith(("--duration_ms=",
                                                                                               "--out="))}
    run_args = [arg for arg in argv if arg.split("=", 1)[0] not in options]
    duration_ms = int(options.get("--duration_ms", "20000"))
    request = parse_run_args([*run_args, f"--min_duration={duration_ms}", "--min_query_count=1"])
    from code.common.log import configure

    configure()
    how = block_on_cuda_waits()
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting
    from code.tuning.plans import scenarios_of, system_name

    system = system_name(request)
    out = Path(options["--out"]) if "--out" in options else new_timestamped_dir(BUILD_DIR / "host_share")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for wanted in request.benchmarks:
        for scenario in scenarios_of(request, wanted, system):
            workload = WorkloadSetting(request.harness_type, wanted.accuracy_target, request.power_setting)
            config = resolve_config(wanted.benchmark, scenario, system, workload, request.overrides)
            rows.append(measure(config, out / f"{config.benchmark_name}_{scenario.value}"))
    (out / "host_share.json").write_text(json.dumps({"system": system, "cuda_waits": how, "tests": rows},
                                                    indent=2) + "\n")
    print(f"{system}; {how}; {out}")
    print("| benchmark | scenario | samples/s | runner CPU s / wall s | devices one process feeds |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['benchmark']} | {row['scenario']} | {row['samples_per_s']:,.2f} | "
              f"{', '.join(f'{s:.3f}' for s in row['cpu_share'])} | {row['devices_one_process_feeds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
