"""The cluster path's pieces that need no Ray: the plan of workers over the nodes Ray reports, the names of nodes,
a cluster worker's CPUs, its TCP connections and HELLO, the LoadGen process's check of each HELLO, and the ready
deadline. (The whole path on a real local Ray cluster: tests/actions/test_cluster.py.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from code.common.placement import allowed_cpu_set, cpu_shares
from code.harness import cluster
from code.harness.workers import Message, WorkerPlan, WorkerPool, WorkerStartError, _Worker, connect, receive, send


def _node(node_id: str, host: str, gpus: int = 0, alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeManagerHostname": host, "Alive": alive,
            "Resources": {"CPU": 8.0, **({"GPU": float(gpus)} if gpus else {})}}


def test_nodes_are_named_by_host_and_told_apart_where_hosts_repeat() -> None:
    assert cluster.node_names([_node("aa11", "gpu-a"), _node("bb22", "gpu-b")]) == {"aa11": "gpu-a", "bb22": "gpu-b"}
    assert cluster.node_names([_node("aa1122", "vm"), _node("bb2233", "vm")]) == {"aa1122": "vm-aa1122",
                                                                                  "bb2233": "vm-bb2233"}


def test_a_gpu_run_plans_one_worker_per_gpu_of_every_alive_node() -> None:
    nodes = [_node("n2", "gpu-b", gpus=2), _node("n0", "loadgen"), _node("n1", "gpu-a", gpus=1),
             _node("n3", "gone", gpus=8, alive=False)]
    plans = cluster.plan_cluster(nodes, on_gpus=True, cpu_workers=1)
    assert [plan.device for plan in plans] == ["cuda:0@gpu-a", "cuda:0@gpu-b", "cuda:1@gpu-b"]
    assert [plan.slot for plan in plans] == [0, 1, 2]
    assert [plan.node_id for plan in plans] == ["n1", "n2", "n2"]
    assert {plan.local_device for plan in plans} == {"cuda:0"}, "each worker sees its one GPU"


def test_a_cpu_run_plans_cpu_workers_per_node() -> None:
    plans = cluster.plan_cluster([_node("n1", "b"), _node("n0", "a")], on_gpus=False, cpu_workers=2)
    assert [plan.device for plan in plans] == ["cpu:0@a", "cpu:1@a", "cpu:0@b", "cpu:1@b"]
    assert {plan.local_device for plan in plans} == {"cpu"}


def test_a_cluster_without_gpus_is_refused_with_the_fix() -> None:
    with pytest.raises(cluster.ClusterError, match="no GPUs .*documentation/cluster.md"):
        cluster.plan_cluster([_node("n0", "a")], on_gpus=True, cpu_workers=1)


def test_a_cluster_worker_pins_itself_to_its_share() -> None:
    allowed = allowed_cpu_set()
    assert cluster.worker_cpus("share:0/1") == list(allowed)
    assert cluster.worker_cpus("share:1/2") == list(cpu_shares(allowed, 2)[1].cpus)
    assert cluster.worker_cpus("0,1") is None, "a plain list is the worker's own"


def test_a_worker_takes_fds_or_an_address_not_both() -> None:
    from code.processes.device_worker import parse_args

    assert parse_args(["spec.json", "--device=cpu:0@a", "--connect=127.0.0.1:5000", "--slot=3"]).slot == 3
    for wrong in ([], ["--fds=3", "--connect=127.0.0.1:5000"]):
        with pytest.raises(SystemExit):
            parse_args(["spec.json", "--device=cpu:0", *wrong])


def _pool() -> cluster.ClusterPool:
    plans = cluster.plan_cluster([_node("n0", "a")], on_gpus=False, cpu_workers=1)
    settings = cluster.ClusterSettings("127.0.0.1:6379", "127.0.0.1", 0, 5.0)
    return cluster.ClusterPool(["python"], plans, 2, settings, "{}")


def test_each_connection_opens_with_its_hello() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        hello = {"token": "t", "slot": 4, "device": "cpu:0@a", "pid": 42}
        sockets = connect(listener.getsockname()[:2], 2, hello, timeout_s=5.0)
        try:
            for index in range(2):
                accepted, _ = listener.accept()
                with accepted:
                    message, count, payload = receive(accepted)
                    assert (message, count) == (Message.HELLO, index)
                    assert json.loads(payload) == {**hello, "index": index}
            assert sockets[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        finally:
            for sock in sockets:
                sock.close()


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two connected TCP sockets on 127.0.0.1: the LoadGen process's end and a worker's."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname()[:2])
        ours, _ = listener.accept()
    return ours, theirs


@pytest.mark.parametrize("what", ["right", "wrong token", "not a hello", "silent-closed"])
def test_the_loadgen_process_takes_only_its_own_workers(what: str) -> None:
    pool = _pool()
    ours, theirs = _tcp_pair()
    with ours, theirs:
        if what == "right":
            send(theirs, Message.HELLO, 0, json.dumps({"token": pool.token, "slot": 0}).encode())
        elif what == "wrong token":
            send(theirs, Message.HELLO, 0, json.dumps({"token": "guess", "slot": 0}).encode())
        elif what == "not a hello":
            send(theirs, Message.READY, 0, json.dumps({"token": pool.token}).encode())
        else:
            theirs.close()
        said = pool._hello(ours)
    assert (said is not None) == (what == "right")


def test_no_wait_for_ready_is_unbounded() -> None:
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]  # never says ready, never exits
    plan = WorkerPlan("cpu:0", "cpu", "", (), None)
    with WorkerPool(silent, [plan], connections=1) as pool:
        with pytest.raises(WorkerStartError, match="the worker of cpu:0 could not start: it was not ready within 1 s"):
            pool.wait_ready(timeout_s=1.0)


def test_a_cluster_address_where_nothing_listens_is_refused_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        free = probe.getsockname()[1]  # closed below: nothing listens there any more
    with pytest.raises(cluster.ClusterError, match=f"--cluster=127.0.0.1:{free}: nothing answers there .*ray start"):
        cluster.reachable(f"127.0.0.1:{free}", timeout_s=2.0)
    with socket.create_server(("127.0.0.1", 0)) as head:
        cluster.reachable(f"127.0.0.1:{head.getsockname()[1]}")


def test_a_stale_auto_address_is_refused_at_once_naming_where_it_came_from(tmp_path, monkeypatch) -> None:
    """--cluster=auto leads where the last `ray start` on this node wrote (<RAY_TMPDIR>/ray/ray_current_cluster), a
    file a head that died without `ray stop` leaves behind; Ray retries its address for minutes. Nothing listens
    there: refused at once, naming the file and the fix."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    cluster.reachable("auto")  # no file: Ray looks for a running cluster itself
    with socket.create_server(("127.0.0.1", 0)) as probe:
        free = probe.getsockname()[1]  # closed below: nothing listens there any more
    written = tmp_path / "ray" / "ray_current_cluster"
    written.parent.mkdir()
    written.write_text(f"127.0.0.1:{free}\n")
    with pytest.raises(cluster.ClusterError) as refused:
        cluster.reachable("auto", timeout_s=2.0)
    assert str(refused.value).startswith(
        f"--cluster=auto leads to 127.0.0.1:{free} (from {written}, which the last `ray start` on this node wrote), "
        "and nothing answers there (")
    assert str(refused.value).endswith("that cluster has stopped; start it again (ray start --head: "
                                       "documentation/cluster.md), or give a running head's host:port with "
                                       "--cluster=<host:port>")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free}")  # Ray reads RAY_ADDRESS first
    with pytest.raises(cluster.ClusterError, match=f"leads to 127.0.0.1:{free} \\(from RAY_ADDRESS\\)"):
        cluster.reachable("auto", timeout_s=2.0)
    with socket.create_server(("127.0.0.1", 0)) as head:
        written.write_text(f"127.0.0.1:{head.getsockname()[1]}")
        monkeypatch.delenv("RAY_ADDRESS")
        cluster.reachable("auto")


class _Task:
    """A worker's Ray task that runs on and on (what ``RayTaskProcess`` shows the pool), without Ray."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid, self.why = 0, ""

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 0
        return 0

    def terminate(self) -> None:
        self.returncode = -15

    kill = terminate


def _listening_pool(timeout_s: float) -> cluster.ClusterPool:
    """A pool of two workers on node ``a``, two connections each, listening on 127.0.0.1, its tasks not started."""
    plans = cluster.plan_cluster([_node("n0", "a")], on_gpus=False, cpu_workers=2)
    settings = cluster.ClusterSettings("127.0.0.1:6379", "127.0.0.1", 0, timeout_s)
    pool = cluster.ClusterPool(["python"], plans, 2, settings, "{}")
    pool.listener = socket.create_server(("127.0.0.1", 0))
    pool.address = pool.listener.getsockname()[:2]
    pool.workers = [_Worker(plan, _Task(), []) for plan in plans]  # type: ignore[arg-type]
    return pool


def test_the_loadgen_process_takes_each_workers_connections_and_its_name() -> None:
    pool = _listening_pool(timeout_s=30.0)
    stranger = socket.create_connection(pool.address)
    send(stranger, Message.HELLO, 0, json.dumps({"token": "guess", "slot": 0, "index": 0}).encode())
    bad_index = socket.create_connection(pool.address)
    send(bad_index, Message.HELLO, 7, json.dumps({"token": pool.token, "slot": 0, "index": 7}).encode())
    hello = {"token": pool.token, "device": "cpu:1@a", "pid": 4242}
    workers = [connect(pool.address, 2, {**hello, "slot": slot, "device": f"cpu:{slot}@a"}, timeout_s=5.0)
               for slot in (1, 0)]
    try:
        pool._accept_all(time.monotonic() + 30.0)
        assert [worker.plan.device for worker in pool.workers] == ["cpu:0@a", "cpu:1@a"]
        assert [len(worker.sockets) for worker in pool.workers] == [2, 2]
        assert pool.workers[0].process.pid == 4242
        assert stranger.recv(1) == b"", "a stranger's connection is closed"
        assert bad_index.recv(1) == b"", "so is a connection the worker does not have"
    finally:
        pool.stop()
        for sock in [stranger, bad_index, *workers[0], *workers[1]]:
            sock.close()


def test_a_worker_that_never_connects_stops_the_run_naming_its_node() -> None:
    pool = _listening_pool(timeout_s=1.0)
    with pytest.raises(WorkerStartError, match=r"the worker of cpu:0@a could not start: it did not connect to "
                                               r"127\.0\.0\.1:\d+ within 1 s: check that node a runs Ray"):
        pool._accept_all(time.monotonic() + 1.0)


def test_a_task_that_ends_before_it_connects_stops_the_run() -> None:
    pool = _listening_pool(timeout_s=30.0)
    pool.workers[1].process.returncode = -9
    pool.workers[1].process.why = "ended: its node a left the cluster"  # type: ignore[attr-defined]
    with pytest.raises(WorkerStartError, match="cpu:1@a could not start: its Ray task ended: its node a left"):
        pool._accept_all(time.monotonic() + 30.0)


def test_a_task_whose_node_never_answers_counts_as_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (make setup_cluster)")
    asked = []

    def never(refs: list, timeout: float | None = None) -> tuple[list, list]:
        asked.append(timeout)
        return [], refs

    monkeypatch.setattr(ray, "wait", never)
    task = cluster.RayTaskProcess(object(), "node2")
    with pytest.raises(subprocess.TimeoutExpired):
        task.wait(timeout=0.1)
    assert task.wait() == -9 and "node node2 did not confirm" in task.why
    assert asked == [0.1, cluster.STOP_GRACE_S], "a wait after a kill is bounded too"


def test_workers_get_the_runs_verbosity_but_each_node_keeps_its_own_paths() -> None:
    from code.common.log import VERBOSE_ENV

    given = {VERBOSE_ENV: "1", "PYTHONUNBUFFERED": "1", "MLPERF_BUILD_DIR": "/here/build", "PATH": "/usr/bin"}
    assert cluster.passed_env(given) == {VERBOSE_ENV: "1", "PYTHONUNBUFFERED": "1"}
