"""Workers on the nodes of a Ray cluster: one LoadGen process, one worker per GPU (or CPU share) of every node.

Ray starts, places and supervises the workers; the batches travel over this harness's own framed protocol
(workers.py), on TCP connections the workers open back to the LoadGen process instead of inherited socketpairs,
which the C++ core cannot tell apart. ``ClusterPool`` runs each worker program (``code.processes.device_worker
--connect``) as a Ray task pinned to its node and never retried, takes each worker's HELLO (the run's token, its
slot, its device as ``cuda:3@node``), then waits for READY as on one machine. Every wait has a deadline, so a
worker that never connects or a node that leaves stops the run before LoadGen starts, naming the node.
documentation/cluster.md says how to start a cluster, and what each node needs.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from code.common.benchmark_errors import BenchmarkError
from code.common.log import VERBOSE_ENV
from code.common.paths import REPO_ROOT
from code.harness.workers import (
    STOP_GRACE_S,
    ConnectionClosed,
    Message,
    WorkerPlan,
    WorkerPool,
    _Worker,
    receive,
    tune_tcp,
)

# An address a TCP connection can be made to: host:port (Ray's client addresses, ray://..., are not checked here).
HOST_PORT = re.compile(r"[A-Za-z0-9._-]+:[0-9]{1,5}")
# How long the cluster's head may take to accept a connection before the run is refused.
JOIN_TIMEOUT_S = 10.0
# How long a connection may take to send its HELLO once accepted (a stranger that says nothing is dropped).
HELLO_TIMEOUT_S = 10.0
# Environment variables of the LoadGen process that its workers get on every node; the rest is each node's own
# (MLPERF_BUILD_DIR included: where a node keeps its data and engines is its own).
PASSED_ENV = ("PYTHONUNBUFFERED", VERBOSE_ENV)


class ClusterError(BenchmarkError):
    """The cluster cannot run the test (not reachable, no node with the devices the run needs)."""


@dataclass(frozen=True)
class ClusterSettings:
    """The config's cluster fields: where Ray is, where the workers connect, and how long they may take."""

    address: str  # Ray's address: host:port of the head node's GCS, or "auto"
    host: str | None  # the address the workers connect to (None: the address Ray knows this node by)
    port: int  # the listening port (0: a free one)
    ready_timeout_s: float  # how long every worker has to connect and say ready


@dataclass(frozen=True)
class RemotePlan(WorkerPlan):
    """One worker on a node of the cluster: its slot among all workers, and the node as Ray and the run name it."""

    slot: int = 0
    node_id: str = ""
    node: str = ""


def node_names(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Ray node id -> the name the run gives the node: its host name, with the id's first characters where hosts
    share a name (several nodes of one machine, as in tests)."""
    hosts = [node["NodeManagerHostname"] for node in nodes]
    return {node["NodeID"]: node["NodeManagerHostname"] if hosts.count(node["NodeManagerHostname"]) == 1 else
            f"{node['NodeManagerHostname']}-{node['NodeID'][:6]}" for node in nodes}


def plan_cluster(nodes: list[dict[str, Any]], on_gpus: bool, cpu_workers: int) -> list[RemotePlan]:
    """One worker per GPU of every alive node (a node without GPUs runs none), or ``cpu_workers`` per node on the
    CPU; in the order of the nodes' names, so that the plan is the same from run to run."""
    alive = [node for node in nodes if node.get("Alive")]
    names = node_names(alive)
    kind, local = ("cuda", "cuda:0") if on_gpus else ("cpu", "cpu")
    plans: list[RemotePlan] = []
    for node in sorted(alive, key=lambda node: names[node["NodeID"]]):
        name = names[node["NodeID"]]
        for index in range(int(node.get("Resources", {}).get("GPU", 0)) if on_gpus else cpu_workers):
            plans.append(RemotePlan(f"{kind}:{index}@{name}", local, "", (), None, slot=len(plans),
                                    node_id=node["NodeID"], node=name))
    if not plans:
        what = "GPUs (Ray counts none: start each node's Ray with its GPUs visible)" if on_gpus else "nodes"
        raise ClusterError(f"the cluster has no {what}; documentation/cluster.md says how to start it")
    return plans


def join(settings: ClusterSettings, on_gpus: bool, cpu_workers: int) -> list[RemotePlan]:
    """Connect this process to the Ray cluster and plan its workers."""
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray, an optional install: make setup_cluster") from None
    reachable(settings.address)
    try:
        ray.init(address=settings.address, log_to_driver=True, logging_level="warning")
    except Exception as error:  # ConnectionError, or Ray's own for an address that is not a cluster
        raise ClusterError(f"--cluster={settings.address}: could not join the Ray cluster ({type(error).__name__}: "
                           f"{error}); start it first (ray start --head on one node, ray start --address=... on the "
                           "others: documentation/cluster.md)") from error
    return plan_cluster(ray.nodes(), on_gpus, cpu_workers)


def passed_env(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """What of this process's environment its workers get on their nodes (``PASSED_ENV``)."""
    return {name: environ[name] for name in PASSED_ENV if name in environ}


def auto_address() -> tuple[str, str] | None:
    """Where ``--cluster=auto`` leads, found in Ray's order (ray._private.services.get_ray_address_from_environment)
    and what names it: RAY_ADDRESS, else the file the last ``ray start`` on this node wrote
    (``<RAY_TMPDIR, else TMPDIR, else /tmp>/ray/ray_current_cluster``). None when neither names a host:port: Ray
    then looks for a running cluster itself, and says at once when it finds none."""
    given = os.environ.get("RAY_ADDRESS", "")
    if given and given != "auto":
        return (given, "RAY_ADDRESS") if HOST_PORT.fullmatch(given) else None
    temp = os.environ.get("RAY_TMPDIR", os.environ.get("TMPDIR", "/tmp"))
    written = os.path.join(temp, "ray", "ray_current_cluster")
    try:
        with open(written) as file:
            found = file.read().strip()
    except OSError:
        return None
    return (found, f"{written}, which the last `ray start` on this node wrote") if HOST_PORT.fullmatch(found) else None


def reachable(address: str, timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Refuse at once a cluster address where nothing listens: Ray itself retries such an address for minutes, and
    ``auto`` leads to the cluster this node last joined, which may have stopped since (a stale address)."""
    where, named_by = address, ""
    if address == "auto":
        found = auto_address()
        if found is None:
            return
        where, named_by = found
    host, _, port = where.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        if named_by:
            raise ClusterError(f"--cluster=auto leads to {where} (from {named_by}), and nothing answers there "
                               f"({error}): that cluster has stopped; start it again (ray start --head: "
                               "documentation/cluster.md), or give a running head's host:port with "
                               "--cluster=<host:port>") from None
        raise ClusterError(f"--cluster={address}: nothing answers there ({error}); start the cluster first (ray "
                           "start --head on one node: documentation/cluster.md), or give its head's host:port") \
            from None


def run_worker_task(command: list[str], cwd: str, spec_text: str, args: list[str], env: dict[str, str],
                    device: str) -> int:
    """The Ray task of one worker, on its node: write the test's spec there, name a GPU worker's device by the GPU
    Ray gave it (``cuda:<id>@node``), run the worker program until it exits, and return its exit status. Only the
    standard library here: the task is sent by value and runs before anything of the harness is imported on the
    node."""
    import os as task_os
    import subprocess as task_subprocess
    import tempfile

    if device.startswith("cuda:"):
        gpu = task_os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
        device = f"cuda:{gpu}@{device.partition('@')[2]}"
    with tempfile.TemporaryDirectory(prefix="mlperf-worker-") as folder:
        spec = task_os.path.join(folder, "test_spec.json")
        with open(spec, "w") as file:
            file.write(spec_text)
        process = task_subprocess.Popen([*command, spec, f"--device={device}", *args], cwd=cwd,
                                        env={**task_os.environ, **env})
        return process.wait()


class RayTaskProcess:
    """A worker's Ray task as the ``subprocess.Popen`` a ``WorkerPool`` supervises, with ``why`` where the task ended
    without an exit status (its node left, or it was stopped); ``pid`` is the worker's, once its HELLO said it."""

    def __init__(self, ref: Any, node: str) -> None:
        self.ref, self.node = ref, node
        self.returncode: int | None = None
        self.why = ""
        self.pid = 0

    def poll(self) -> int | None:
        if self.returncode is None:
            import ray

            done, _ = ray.wait([self.ref], timeout=0)
            if done:
                self._collect()
        return self.returncode

    def _collect(self) -> None:
        import ray

        try:
            self.returncode = int(ray.get(self.ref))
        except ray.exceptions.TaskCancelledError:
            self.returncode, self.why = -9, "was stopped"
        except ray.exceptions.NodeDiedError:
            self.returncode, self.why = -9, f"ended: its node {self.node} left the cluster"
        except ray.exceptions.RayError as error:
            self.returncode = -9
            self.why = f"ended: its Ray worker on node {self.node} died ({type(error).__name__})"

    def wait(self, timeout: float | None = None) -> int:
        """As ``Popen.wait``; without a timeout (after a kill) it waits ``STOP_GRACE_S`` at most, then counts the
        task as stopped: a node that cannot answer must not hold the run."""
        import ray

        if self.returncode is None:
            done, _ = ray.wait([self.ref], timeout=STOP_GRACE_S if timeout is None else timeout)
            if done:
                self._collect()
            elif timeout is None:
                self.returncode, self.why = -9, f"was stopped (node {self.node} did not confirm it ended)"
            else:
                raise subprocess.TimeoutExpired(f"the worker on {self.node}", timeout)
        return self.returncode  # type: ignore[return-value]

    def terminate(self) -> None:
        import ray

        if self.returncode is None:
            ray.cancel(self.ref, force=True)  # ends the task's Ray worker; the worker program dies with it

    kill = terminate


class ClusterPool(WorkerPool):
    """The workers of one test on the cluster's nodes (``plans`` from ``join``): started as Ray tasks, connected
    back to this process's listening socket, then supervised as local workers are."""

    def __init__(self, command: list[str], plans: list[RemotePlan], connections: int, settings: ClusterSettings,
                 spec_text: str) -> None:
        super().__init__(command, list(plans), connections)
        self.settings, self.spec_text = settings, spec_text
        self.token = secrets.token_hex(16)  # a connection that does not know it is not one of this run's workers
        self.listener: socket.socket | None = None

    def __enter__(self) -> ClusterPool:
        import ray

        host = self.settings.host or ray.util.get_node_ip_address()
        self.listener = socket.create_server((host, self.settings.port), backlog=max(16, 2 * len(self.plans)))
        self.address = self.listener.getsockname()[:2]
        super().__enter__()
        return self

    def _start(self, plan: WorkerPlan) -> _Worker:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        assert isinstance(plan, RemotePlan)
        kind = "cuda" if plan.local_device.startswith("cuda") else "cpu"
        cpus = "gpu" if kind == "cuda" else f"share:{self._share(plan)}"
        args = [f"--connect={self.address[0]}:{self.address[1]}", f"--token={self.token}", f"--slot={plan.slot}",
                f"--connections={self.connections}", f"--cpus={cpus}"]
        env = passed_env(os.environ)
        # The task goes by value: a node's Ray worker cannot import this harness (it is not on Ray's path there).
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        task = ray.remote(run_worker_task).options(
            num_gpus=1 if kind == "cuda" else 0, num_cpus=0, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(plan.node_id, soft=False))
        ref = task.remote(self.command, str(REPO_ROOT), self.spec_text, args, env, plan.device)
        return _Worker(plan, RayTaskProcess(ref, plan.node), [])  # type: ignore[arg-type]

    def _share(self, plan: RemotePlan) -> str:
        """A CPU worker's share of its node's CPUs: ``index/count`` among the node's workers."""
        same = [other for other in self.plans if isinstance(other, RemotePlan) and other.node_id == plan.node_id]
        return f"{same.index(plan)}/{len(same)}"

    def wait_ready(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Accept every worker's connections, then wait for READY as on one machine, all within one deadline."""
        limit = self.settings.ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        self._accept_all(deadline)
        return super().wait_ready(max(1.0, deadline - time.monotonic()))

    def _accept_all(self, deadline: float) -> None:
        """Take connections until every worker has all of its own (a stranger's are closed); a worker whose task
        ends first, or that is late, stops the run naming its node."""
        assert self.listener is not None
        pending: dict[int, list[socket.socket | None]] = {_plan(w).slot: [None] * self.connections
                                                          for w in self.workers}
        by_slot = {_plan(worker).slot: worker for worker in self.workers}
        self.listener.settimeout(0.5)
        while any(None in connections for connections in pending.values()):
            waiting = [worker for worker in self.workers if None in pending[_plan(worker).slot]]
            for worker in waiting:
                if worker.process.poll() is not None:
                    raise self._start_failed(worker, f"its Ray task {getattr(worker.process, 'why', '') or 'ended'} "
                                             f"before it connected to {self._where()} (its output above says why)")
            if time.monotonic() > deadline:
                raise self._start_failed(waiting[0], f"it did not connect to {self._where()} within "
                                         f"{self.settings.ready_timeout_s:.0f} s: check that node "
                                         f"{_plan(waiting[0]).node} runs Ray with a free GPU for it (ray status) "
                                         "and reaches this address and port (firewall, --cluster_host, "
                                         "--cluster_port)")
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            hello = self._hello(sock)
            slot, index = (hello.get("slot"), hello.get("index")) if hello else (None, None)
            if slot not in pending or not isinstance(index, int) or not 0 <= index < self.connections or \
                    pending[slot][index] is not None:
                sock.close()  # not one of this run's workers' connections, or one it has already
                continue
            worker = by_slot[slot]
            pending[slot][index] = sock
            worker.process.pid = int(hello.get("pid", 0))  # type: ignore[union-attr]
            worker.plan = replace(worker.plan, device=str(hello.get("device", worker.plan.device)))  # type: ignore
        for worker in self.workers:
            worker.sockets = [sock for sock in pending[_plan(worker).slot] if sock is not None]

    def _hello(self, sock: socket.socket) -> dict[str, Any] | None:
        """The HELLO that opens a worker's connection, if it is one of this run's; None for anything else."""
        sock.settimeout(HELLO_TIMEOUT_S)
        try:
            message, _, payload = receive(sock)
            hello = json.loads(payload) if message is Message.HELLO else None
        except (OSError, ConnectionClosed, ValueError):
            return None
        if not isinstance(hello, dict) or hello.get("token") != self.token:
            return None
        sock.settimeout(None)
        tune_tcp(sock)
        return hello

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def stop(self) -> None:
        super().stop()
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _plan(worker: _Worker) -> RemotePlan:
    """A cluster worker's plan (a ``ClusterPool`` makes only ``RemotePlan``s)."""
    assert isinstance(worker.plan, RemotePlan)
    return worker.plan


def leave() -> None:
    """Disconnect from the cluster (Ray ends the tasks this process started that still run)."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def worker_cpus(spec: str) -> list[int] | None:
    """Worker side: the CPUs a cluster worker pins itself to, from ``--cpus``: ``gpu`` (the NUMA node of the one GPU
    it sees), ``share:I/N`` (share I of N of the node's allowed CPUs); None where the spec is a plain list."""
    from code.common.placement import allowed_cpu_set, cpu_shares, gpu_placement

    allowed = allowed_cpu_set()
    if spec == "gpu":
        from code.common.systems import detect_gpus

        gpus, _ = detect_gpus()
        return list(gpu_placement(gpus[0].pci_bus_id if gpus else None, allowed).cpus)
    if spec.startswith("share:"):
        index, count = (int(part) for part in spec.removeprefix("share:").split("/"))
        return list(cpu_shares(allowed, count)[index].cpus)
    return None

