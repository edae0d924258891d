"""One device of a several-device test: ``python -m code.processes.device_worker <test_spec.json> --device=cuda:1
--fds=3,4 --cpus=0,1,2,3``; on a cluster node ``--connect=host:port --token=... --slot=N --connections=N`` instead of
``--fds`` (code/harness/cluster.py).

It pins itself to its CPUs before anything loads (later threads inherit the mask), builds the one-device backend on
the GPU it is shown (or the CPU), loads its samples, says it is ready and serves the core until the test ends; a
failure to start reaches the LoadGen process with the device named, before LoadGen starts.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from code.common.constants import ExitCode
from code.common.placement import format_cpu_list

DEVICE_WORKER_MODULE = "code.processes.device_worker"
# How long a cluster worker tries to reach the LoadGen process (its listening socket is open before any starts).
CONNECT_TIMEOUT_S = 30.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {DEVICE_WORKER_MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="the test's test_spec.json")
    parser.add_argument("--device", required=True, help="the device as the run names it: cuda:1, cpu:0")
    parser.add_argument("--fds", default="", help="the inherited sockets' file descriptors, comma-separated")
    parser.add_argument("--cpus", default="", help="the CPUs to run on, comma-separated (empty: all allowed); on a "
                        "cluster node: gpu (the NUMA node of its GPU) or share:I/N (share I of N of the node's CPUs)")
    parser.add_argument("--connect", default="", help="on a cluster node: the LoadGen process's host:port")
    parser.add_argument("--token", default="", help="on a cluster node: the run's token, said in each HELLO")
    parser.add_argument("--slot", type=int, default=0, help="on a cluster node: the worker's slot in the run")
    parser.add_argument("--connections", type=int, default=1, help="on a cluster node: connections to open")
    args = parser.parse_args(argv)
    if bool(args.fds) == bool(args.connect):
        parser.error("give --fds (a worker of this machine) or --connect (a worker on a cluster node), one of them")
    return args


def open_connections(args: argparse.Namespace) -> list[socket.socket]:
    """The worker's connections to the core: inherited socketpairs, or TCP connections it opens to the LoadGen
    process (each starting with its HELLO: the run's token, its slot, device and pid)."""
    if args.fds:
        sockets = [socket.socket(fileno=int(fd)) for fd in args.fds.split(",")]
        for sock in sockets:  # a process this worker starts must not hold its connections open after it dies
            sock.set_inheritable(False)
        return sockets
    from code.harness.workers import connect

    host, _, port = args.connect.rpartition(":")
    hello = {"token": args.token, "slot": args.slot, "device": args.device, "pid": os.getpid(),
             "host": socket.gethostname()}
    return connect((host, int(port)), args.connections, hello, timeout_s=CONNECT_TIMEOUT_S)


def worker_overrides(overrides: dict[str, Any], device: str) -> dict[str, Any]:
    """The test's RUN_ARGS for the worker of ``device``: one device, the GPU it sees (cuda, never ``auto``: a worker
    that sees no usable GPU must fail, not run on the CPU) or its CPU share."""
    # It never joins the cluster, so it takes none of the cluster's fields (given without --cluster, they are refused).
    own = {name: value for name, value in overrides.items() if name != "cluster" and not name.startswith("cluster_")}
    return {**own, "devices": "all", "cpu_workers": 1, "device": "cuda" if device.startswith("cuda") else "cpu"}


def gpu_identity(local_device: str) -> dict[str, Any]:
    """The GPU the worker got (name and PCI bus id), to check against the plan; {} on a CPU."""
    if not local_device.startswith("cuda"):
        return {}
    import torch

    props = torch.cuda.get_device_properties(torch.device(local_device))
    place = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if None in place:  # an older torch: the name alone
        return {"gpu": props.name}
    return {"gpu": props.name, "pci_bus_id": f"{place[0]:08x}:{place[1]:02x}:{place[2]:02x}.0".upper()}


def start_device(spec: dict[str, Any], device: str) -> tuple[Any, dict[str, Any]]:
    """The runner of this worker's one device, and what the worker reports when ready."""
    from code.common.constants import TestMode
    from code.mlperf.benchmarks import load_benchmark
    from code.mlperf.devices import torch_device
    from code.processes.test_process import resolve_from_spec

    started = time.monotonic()
    config = resolve_from_spec({**spec, "overrides": worker_overrides(spec["overrides"], device)})
    prepared = load_benchmark(config.benchmark).prepare_test(config, TestMode(spec["mode"]))
    local_device = torch_device(prepared.devices[0])
    runner = prepared.runner_on(local_device, device)
    ready = {"device": device, "local_device": local_device, "pid": os.getpid(), "load_s": round(time.monotonic() -
             started, 1), "cpus": format_cpu_list(sorted(os.sched_getaffinity(0))), **gpu_identity(local_device)}
    return runner, ready


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from code.common.supervision import die_with_parent

    die_with_parent()  # a worker never outlives the process that started it (the test's, or its Ray task's)
    if args.cpus:
        from code.harness.cluster import worker_cpus

        cpus = worker_cpus(args.cpus)
        os.sched_setaffinity(0, cpus if cpus is not None else [int(cpu) for cpu in args.cpus.split(",")])
    from code.common.faults import describe
    from code.common.log import configure, get_logger
    from code.harness.workers import Message, send, serve, worker_error

    configure()
    log = get_logger(f"worker {args.device}")
    sockets = open_connections(args)
    try:
        runner, ready = start_device(json.loads(args.spec.read_text()), args.device)
    except Exception as error:
        send(sockets[0], Message.ERROR, 0, worker_error(args.device, error, describe).encode())
        return ExitCode.TEST_FAILED
    log.info("ready in %.1f s (%s, CPUs %s)", ready["load_s"], ready.get("gpu", ready["local_device"]),
             ready["cpus"])
    serve(sockets, runner, ready)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
