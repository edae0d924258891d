"""Every GPU of the machine: BERT and GPT-J, Offline and Server, on one GPU and on all of them, through ``make run``
on the detected system; prints the scaling table and each GPU's share. Run it on a machine of several GPUs whenever
GPU or device code changes (CI has no GPU).

    python3 -m scripts.gpu.check_devices [--workloads=bert-offline,bert-server,gptj-offline,gptj-server]
        [--gpus=1,2,all] [--steps=runs,same_process,cluster] [--min_duration_ms=30000]
        [--make="make IN_CONTAINER=1"] [--out=DIR]

Steps (a failing one does not stop the others; each run's figures land in ``DIR/check_devices.json`` as they come):

- ``runs``: for each workload and GPU count, ``make run`` on a machine of that many GPUs (``CUDA_VISIBLE_DEVICES``
  shows the first N: the system detected is then ``<GPU>xN``, with no config written for it), each a shortened
  ``--test_run`` with the rate given for the count (``RATES_PER_GPU`` x GPUs: an Offline probe would load every
  model twice). Reads each test's metadata.json: the figure, the verdict, each device's share, and the host CPU
  each GPU's process used.
- ``same_process``: nothing in the backends assumes one GPU per process. BERT's packed runner (the bert-99 engine)
  and GPT-J's in-flight engine (the real architecture with random weights, in bf16 and in FP8) are built on cuda:0
  and cuda:1 in this one process and run the same 8 inputs, cuda:0 twice: BERT's outputs must agree, GPT-J's tokens
  must be equal on the two GPUs wherever cuda:0 repeats itself. The step records what it found; it fails nothing.
- ``cluster`` (needs Ray, ``make setup_cluster``): each workload on all the GPUs again, through the several-nodes
  path: a Ray cluster on 127.0.0.1 of one node per GPU (each node's Ray sees only its GPU), and ``make run`` with
  ``--cluster``. Beside the ``runs`` step's figure on as many GPUs, it gives the cost of the distributed path.

The table printed last has one row per workload and GPU count: figure, verdict, the ratio to a base (one GPU; for a
``cluster`` row, the same GPUs without Ray), the spread of the per-GPU shares, and CPU seconds per second of each
GPU's process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from code.common.paths import BUILD_DIR, REPO_ROOT
from code.mlperf.run_record import read_record
from scripts.gpu.steps import run_steps
from scripts.local_cluster import LOOPBACK_ENV, local_cluster

# What each workload runs (RUN_ARGS without the rate): the bert-99 engine of the configs, and GPT-J's FP8 engine
# with float32 accumulation (the ladder's `fp8`, whose rates below were measured) with 256 slots and output lengths
# forced at a realistic mean (random weights never choose EOS).
WORKLOADS: dict[str, str] = {
    "bert-offline": "--benchmarks=bert-99 --scenarios=offline",
    "bert-server": "--benchmarks=bert-99 --scenarios=server",
    "gptj-offline": "--benchmarks=gptj-99 --scenarios=offline --precision=fp8 --kv_cache_dtype=fp8 "
                    "--gpu_batch_size=256 --synthetic_output_lengths=forced --synthetic_sample_count=1000",
    "gptj-server": "--benchmarks=gptj-99 --scenarios=server --precision=fp8 --kv_cache_dtype=fp8 "
                   "--gpu_batch_size=256 --synthetic_output_lengths=forced --synthetic_sample_count=1000",
}
# The rate each workload is given per GPU, by GPU model: Offline above what one GPU does (the query must outlast the
# minimum duration), Server a target one GPU sustains (documentation/notes/journal/2026-11-26.md). The H100's come from
# runs on
# one H100; its GPT-J Server target sits below the 32.87 measured at the config's 192 slots, as these runs force 256
# (the engine ran 4% slower there).
RATES_PER_GPU: dict[str, dict[str, tuple[str, float]]] = {
    "H200": {"bert-offline": ("offline_expected_qps", 8500.0), "bert-server": ("server_target_qps", 6500.0),
             "gptj-offline": ("offline_expected_qps", 44.0), "gptj-server": ("server_target_qps", 28.0)},
    "H100": {"bert-offline": ("offline_expected_qps", 8700.0), "bert-server": ("server_target_qps", 7000.0),
             "gptj-offline": ("offline_expected_qps", 40.0), "gptj-server": ("server_target_qps", 30.0)},
}
RUN_TIMEOUT_S = 300  # one make run; a hung run must not cost the other runs of the call


def gpu_model() -> str:
    import torch

    name = torch.cuda.get_device_name(0)
    return next((model for model in RATES_PER_GPU if model in name), "H200")


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def run_args(workload: str, gpus: int, min_duration_ms: int, log_dir: Path) -> str:
    rate_field, per_gpu = RATES_PER_GPU[gpu_model()][workload]
    return (f"{WORKLOADS[workload]} --test_run --min_duration={min_duration_ms} --{rate_field}={per_gpu * gpus:g} "
            f"--log_dir={log_dir}")


def latencies(folder: Path) -> dict[str, float]:
    """LoadGen's mean and 99th-percentile latency of a test (its mlperf_log_summary.txt), in ms: a Server run at a
    given rate shows the cost of a path in its latencies, not in its figure."""
    summary = folder / "mlperf_log_summary.txt"
    text = summary.read_text() if summary.is_file() else ""
    found = {}
    for key, label in (("mean_ms", "Mean latency (ns)"), ("p99_ms", "99.00 percentile latency (ns)")):
        match = re.search(rf"^{re.escape(label)}\s*:\s*(\d+)", text, re.MULTILINE)
        if match:
            found[key] = round(int(match.group(1)) / 1e6, 3)
    return found


def read_test(log_dir: Path) -> dict[str, Any]:
    """The figures of the one test of a run folder (its metadata.json and LoadGen's summary)."""
    found = sorted(log_dir.glob("*/*/*/metadata.json"))
    if not found:
        return {"error": f"no metadata.json under {log_dir}"}
    record = read_record(found[0].parent)
    result = record.result_dict
    devices = record.devices
    shares = [row.get("share", 0.0) for row in devices.get("completed", [])]
    workers = devices.get("workers") or []
    host = [round(worker.get("host", {}).get("cpu_per_s", 0.0), 3) for worker in workers]
    if not workers:  # one GPU: its runner ran in the LoadGen process
        host = [round(devices.get("loadgen_process", {}).get("cpu_per_s", 0.0), 3)]
    return {"value": result.get("value"), "unit": result.get("unit"), "valid": result.get("valid"),
            "invalid_reasons": result.get("invalid_reasons", []), "shares": shares, "host_cpu_per_s": host,
            "loadgen_cpu_per_s": devices.get("loadgen_process", {}).get("cpu_per_s"),
            "placement": [{key: worker.get(key) for key in ("device", "gpu", "pci_bus_id", "numa_node", "cpus",
                                                            "load_s")} for worker in workers],
            "engine_stats": record.engine_stats or None, "folder": str(found[0].parent),
            **latencies(found[0].parent)}


def run_workload(workload: str, gpus: int, args: argparse.Namespace, details: dict[str, Any],
                 cluster: str | None = None) -> None:
    """``make run`` on a machine of ``gpus`` GPUs: all of them, or the first ``gpus`` shown by CUDA_VISIBLE_DEVICES
    (which is what makes a smaller machine: detection names the system after the GPUs it sees); with ``cluster``,
    through that Ray cluster's nodes (its figures under ``details["cluster"]``)."""
    log_dir = args.out / f"{workload}-{gpus}gpu{'-cluster' if cluster else ''}"
    given = run_args(workload, gpus, args.min_duration_ms, log_dir)
    if cluster:
        given += f" --cluster={cluster} --cluster_host=127.0.0.1"
    if shutil.which(shlex.split(args.make)[0]):
        command = [*shlex.split(args.make), "run", f"RUN_ARGS={given}"]
    else:  # no make on this machine: what `make run` runs
        subprocess.run([sys.executable, "-m", "code.harness.build"], cwd=REPO_ROOT, check=True)
        command = [sys.executable, "-m", "code.main", "--action=run", *shlex.split(given)]
    env = {**os.environ, **LOOPBACK_ENV} if cluster else dict(os.environ)
    if gpus < gpu_count() and not cluster:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in range(gpus))
    shown = f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} " if "CUDA_VISIBLE_DEVICES" in env else ""
    print(f"\n=== {workload} on {gpus} GPU(s): {shown}{shlex.join(command)}", flush=True)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True)
    try:
        status = process.wait(timeout=args.run_timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        status = f"killed after {args.run_timeout_s} s"
    figures = {"command": f"{shown}{shlex.join(command)}", "exit": status,
               "seconds": round(time.perf_counter() - started, 1), **read_test(log_dir)}
    details.setdefault("cluster" if cluster else "runs", {}).setdefault(workload, {})[str(gpus)] = figures


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES names them (all of the machine's when it is unset)."""
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    return shown.split(",") if shown else [str(index) for index in range(gpu_count())]


def cluster_workload(workload: str, gpus: int, args: argparse.Namespace, details: dict[str, Any]) -> None:
    """The workload on ``gpus`` GPUs through ``--cluster``: a local cluster of one node per GPU."""
    # One node per GPU, each node's Ray shown only its GPU, as a node of a real cluster sees its own.
    nodes = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in visible_gpus()[:gpus]]
    with local_cluster(nodes, num_cpus=max(1, (os.cpu_count() or gpus) // gpus), num_gpus=1) as (cluster, _):
        run_workload(workload, gpus, args, details, cluster=cluster.address)


def same_process(details: dict[str, Any]) -> None:
    """BERT's packed runner and GPT-J's in-flight engine on cuda:0 and cuda:1 of one process: equal outputs."""
    import numpy as np
    import torch

    from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario, TestMode
    from code.common.systems import detect_system
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting
    from code.mlperf.benchmarks import load_benchmark

    if gpu_count() < 2:
        raise RuntimeError("same_process needs two GPUs")
    system = detect_system().name
    workload = WorkloadSetting(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    found: dict[str, Any] = {}
    cases = (
        (Benchmark.BERT, {"test_run": True}),
        # The real architecture: the decode kernel's tensor-core tiles need head_dim >= 32 (the tiny model has 16).
        (Benchmark.GPTJ, {"backend": "inflight", "precision": "bf16", "kv_cache_dtype": "auto", "gpu_batch_size": 16,
                          "synthetic_sample_count": 16, "synthetic_output_lengths": "forced"}),
        (Benchmark.GPTJ, {"backend": "inflight", "precision": "fp8", "kv_cache_dtype": "fp8", "gpu_batch_size": 16,
                          "synthetic_sample_count": 16, "synthetic_output_lengths": "forced"}),
    )
    for benchmark, overrides in cases:
        config = resolve_config(benchmark, Scenario.Offline, system, workload, overrides, warn_tuned=False)
        try:
            prepared = load_benchmark(benchmark).prepare_test(config, TestMode.PerformanceOnly)
            runners = [prepared.runner_on("cuda:0", "cuda:0")]
        except Exception:  # no engine yet (the runs step builds BERT's): build it, then load
            load_benchmark(benchmark).generate_engine(config)
            prepared = load_benchmark(benchmark).prepare_test(config, TestMode.PerformanceOnly)
            runners = [prepared.runner_on("cuda:0", "cuda:0")]
        runners.append(prepared.runner_on("cuda:1", "cuda:1"))
        indices = np.arange(8, dtype=np.int64)
        if benchmark is Benchmark.BERT:
            outputs = [runner.run_batch(indices) for runner in runners]
            difference = float(np.abs(outputs[0] - outputs[1]).max())
            found["bert"] = {"max_abs_difference": difference, "agree": difference < 0.05}
        else:
            prompts = [runners[0].samples.prompt(int(i)) for i in indices]
            tokens = []
            for device in (0, 1, 0):
                with torch.cuda.device(device):
                    tokens.append(runners[device].backend.run_batch(indices, prompts))

            def equal(a: list[np.ndarray], b: list[np.ndarray]) -> int:
                return sum(np.array_equal(x, y) for x, y in zip(a, b, strict=True))

            # The same GPU twice first: a difference across GPUs only counts where one GPU repeats itself.
            found[f"gptj-{overrides['precision']}"] = {
                "samples": len(indices), "equal_cuda0_twice": equal(tokens[0], tokens[2]),
                "equal_cuda0_cuda1": equal(tokens[0], tokens[1]),
                "tokens_equal": equal(tokens[0], tokens[1]) == len(indices)}
        details["same_process"] = found
        del runners, prepared  # each case starts with both GPUs as empty as the first case found them
        torch.cuda.empty_cache()


def _row(workload: str, label: str, run: dict[str, Any], base: float | None, last: str) -> str:
    """One row of the table: ``run``'s figure and verdict, its ratio to ``base``, its shares, and ``last``."""
    value = run.get("value")
    ratio = f"{value / base:.3f}" if value and base else "-"
    verdict = {True: "VALID", False: "INVALID"}.get(run.get("valid"), "FAILED")
    shares = ",".join(f"{share:.3f}" for share in run.get("shares", []))
    return (f"{workload:<14} {label:>8} {value or 0:>12,.2f} {run.get('unit') or '':<10} {verdict:<8} {ratio:>8} "
            f"{shares:<16} {last}")


def table(details: dict[str, Any]) -> list[str]:
    rows = [f"{'workload':<14} {'GPUs':>8} {'figure':>12} {'unit':<10} {'verdict':<8} {'x base':>8} "
            f"{'shares':<16} host CPU s/s per GPU"]
    for workload, by_count in details.get("runs", {}).items():
        one = (by_count.get("1") or {}).get("value")
        for count, run in sorted(by_count.items(), key=lambda item: int(item[0])):
            rows.append(_row(workload, count, run, one, str(run.get("host_cpu_per_s"))))
    for workload, by_count in details.get("cluster", {}).items():
        for count, run in by_count.items():
            local = (details.get("runs", {}).get(workload, {}).get(count) or {}).get("value")
            rows.append(_row(workload, f"{count} Ray", run, local, "(base: the same GPUs without Ray)"))
    for kind in ("runs", "cluster"):
        for workload, by_count in details.get(kind, {}).items():
            for count, run in by_count.items():
                if "p99_ms" in run:
                    rows.append(f"{workload:<14} {count:>4} {kind:<8} latency mean {run.get('mean_ms')} ms, "
                                f"p99 {run['p99_ms']} ms")
    if "same_process" in details:
        rows.append(f"same process, cuda:0 and cuda:1: {details['same_process']}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--gpus", default="1,all", help="GPU counts to run, comma-separated: numbers, or all")
    parser.add_argument("--steps", default="runs,same_process")
    parser.add_argument("--min_duration_ms", type=int, default=30000)
    parser.add_argument("--make", default="make IN_CONTAINER=1")
    parser.add_argument("--run_timeout_s", type=int, default=RUN_TIMEOUT_S)
    parser.add_argument("--out", type=Path, default=BUILD_DIR / "check_devices" / time.strftime("%Y.%m.%d-%H.%M.%S"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    details: dict[str, Any] = {"gpus": gpu_count(), "gpu_model": gpu_model()}
    rows: list[str] = []
    counts = [gpu_count() if count == "all" else int(count) for count in args.gpus.split(",")]

    def save() -> None:
        (args.out / "check_devices.json").write_text(json.dumps(details, indent=1, default=str))

    steps = []
    for step in args.steps.split(","):
        if step == "runs":
            steps += [(f"{workload}-{count}", lambda w=workload, c=count: run_workload(w, c, args, details))
                      for workload in args.workloads.split(",") for count in counts]
        elif step == "cluster":
            steps += [(f"{workload}-{max(counts)}-cluster",
                       lambda w=workload, c=max(counts): cluster_workload(w, c, args, details))
                      for workload in args.workloads.split(",")]
        elif step == "same_process":
            steps.append(("same_process", lambda: same_process(details)))
        else:
            parser.error(f"unknown step {step!r}")
    run_steps(steps, set(), details, rows, save)
    print("\n".join(["", *table(details), *rows]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
