"""What the worker processes' sockets cost: the most samples per second the core moves through each path, with a
runner that does no work.

Runs one LoadGen Offline test per path (each in a child process: one test per process) with a runner that answers
every batch with a ready-made response of BERT's size (384 x 2 float32 = 3,072 bytes a sample): in the LoadGen
process (the one-device path), and through 1 and 2 worker processes (the several-device path: the indices go out
over a socket, every response's bytes come back over it). The figure is LoadGen's samples per second; the
difference between the paths is what the transport costs, against what a device needs (BERT: ~8,000 samples/s per
H200).

    python -m scripts.bench.worker_overhead [--samples=1000000] [--batch=512] [--response_bytes=3072]
        [--paths=in-process,1-worker,2-workers] [--round=<round>]

It loads the core of ``--round`` (default: BERT Offline's default round), built by ``make build``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from code.common.constants import Scenario
from code.common.paths import REPO_ROOT
from code.common.rounds import ROUNDS, default_round

PATHS = {"in-process": 0, "1-worker": 1, "2-workers": 2}  # path -> worker processes (0: the runner runs here)


class ReadyAnswers:
    """A runner that does no work: every batch gets slices of one ready-made response array."""

    def __init__(self, batch: int, response_bytes: int) -> None:
        self.answers = np.random.default_rng(0).integers(0, 255, (batch, response_bytes), dtype=np.uint8)

    def run_batch(self, sample_indices: np.ndarray) -> np.ndarray:
        return self.answers[: len(sample_indices)]


def child(job: dict[str, Any]) -> int:
    """One Offline test through one path; writes LoadGen's samples per second to job["result"]."""
    from code.harness.core import CoreSettings, run_test
    from code.harness.workers import WorkerPlan, WorkerPool

    log_dir = Path(job["log_dir"])
    log_dir.mkdir(parents=True, exist_ok=True)
    samples, batch = job["samples"], job["batch"]
    conf = log_dir / "user.conf"
    conf.write_text(f"bert.Offline.target_qps = {samples}\nbert.Offline.min_duration = 1000\n"
                    f"bert.Offline.min_query_count = 1\nbert.*.performance_sample_count_override = {samples}\n")
    settings = CoreSettings(model="bert", scenario="Offline", mode="PerformanceOnly", user_conf=conf,
                            log_dir=log_dir, total_sample_count=samples, performance_sample_count=samples,
                            max_batch_size=batch, round=job["round"], num_workers=2)
    lengths = np.ones(samples, dtype=np.int64)
    workers = job["workers"]
    started = time.perf_counter()
    if workers == 0:
        run_test(settings, lengths, ReadyAnswers(batch, job["response_bytes"]))
    else:
        plans = [WorkerPlan(f"worker:{i}", "cpu", "", (), None) for i in range(workers)]
        command = [sys.executable, "-m", "scripts.bench.worker_overhead", "--serve", json.dumps(job)]
        with WorkerPool(command, plans, connections=2) as pool:
            pool.wait_ready()
            run_test(settings, lengths, pool.connections_for_core(False),
                     device_names=[plan.device for plan in plans])
            pool.finish()
    wall = time.perf_counter() - started
    summary = (log_dir / "mlperf_log_summary.txt").read_text()
    rate = float(next(line for line in summary.splitlines() if line.startswith("Samples per second")).split(":")[1])
    Path(job["result"]).write_text(json.dumps({"samples_per_s": rate, "wall_s": wall}))
    return 0


def serve_worker(job: dict[str, Any], argv: list[str]) -> int:
    """A worker that answers with ready-made responses (the product's ``serve``)."""
    from code.common.supervision import die_with_parent
    from code.harness.workers import serve

    die_with_parent()
    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv)
    sockets = [socket.socket(fileno=int(fd)) for fd in options["fds"].split(",")]
    serve(sockets, ReadyAnswers(job["batch"], job["response_bytes"]), {"device": options["device"]})
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child(json.loads(argv[1]))
    if argv and argv[0] == "--serve":
        return serve_worker(json.loads(argv[1]), argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--response_bytes", type=int, default=384 * 2 * 4)
    parser.add_argument("--paths", default=",".join(PATHS))
    # The core of BERT Offline's default round on a system of any type: the one `make build` builds for BERT.
    parser.add_argument("--round", default=default_round("bert-99", Scenario.Offline, None), choices=list(ROUNDS))
    args = parser.parse_args(argv)
    rows = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="worker-overhead-") as scratch:
        for path in args.paths.split(","):
            job = {"samples": args.samples, "batch": args.batch, "response_bytes": args.response_bytes,
                   "workers": PATHS[path], "round": args.round, "log_dir": f"{scratch}/{path}",
                   "result": f"{scratch}/{path}.json"}
            done = subprocess.run([sys.executable, "-m", "scripts.bench.worker_overhead", "--child", json.dumps(job)],
                                  cwd=REPO_ROOT, env=env)
            if done.returncode != 0:
                rows.append(f"{path:<10} FAILED (exit {done.returncode})")
                continue
            result = json.loads(Path(job["result"]).read_text())
            per_batch_us = 1e6 * args.batch / result["samples_per_s"]
            rows.append(f"{path:<10} {result['samples_per_s']:>12,.0f} samples/s   {per_batch_us:8.1f} us per batch "
                        f"of {args.batch}")
    print(f"\n{'path':<10} {'LoadGen rate':>12}             ({args.samples:,} samples, {args.response_bytes} bytes "
          "each, no work)")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
