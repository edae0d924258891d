"""The worker processes' pieces that need no LoadGen test: the protocol's Python end against the core's numbers,
framing, serving threads that never leave the core waiting, placement, the devices a run gives its workers, and
what the LoadGen process says of them. (Whole tests through worker processes: test_multi_device.py with fake
runners, tests/actions/test_device_workers.py with the real backends.)"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from code.harness import workers
from code.harness.workers import Message, receive, send
from tests.conftest import CORE_ROUND


def test_the_python_end_uses_the_cores_numbers(harness_built: Path) -> None:
    from code.harness.core import worker_messages

    numbers = worker_messages(CORE_ROUND)
    assert numbers.pop("HEADER_BYTES") == workers.HEADER.size
    assert numbers == {message.name: int(message) for message in Message}


def test_pieces_of_any_shape_travel_whole() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        pieces = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 2), dtype=np.float32), b"abc",
                  np.arange(4, dtype=np.int64)[::2]]  # a strided view: sent as its elements, contiguous
        send(ours, Message.RESPONSES, 4, *pieces)
        message, count, payload = receive(theirs)
        assert (message, count) == (Message.RESPONSES, 4)
        assert bytes(payload) == (pieces[0].tobytes() + b"abc" + np.array([0, 2], dtype=np.int64).tobytes())
        many = [np.full(3, i % 256, dtype=np.uint8) for i in range(workers.MAX_PIECES + 10)]  # more than one call takes
        send(ours, Message.COMPLETE, len(many), *many)
        assert bytes(receive(theirs)[2]) == b"".join(piece.tobytes() for piece in many)


def test_responses_follow_the_runner_contract() -> None:
    sizes, stacked = workers.responses_payload(np.ones((4, 384, 2), dtype=np.float32), 4)
    assert sizes.tolist() == [3072] * 4 and stacked.shape == (4, 384, 2)
    sizes, *each = workers.responses_payload([np.arange(n, dtype=np.int32) for n in (1, 0, 5)], 3)
    assert sizes.tolist() == [4, 0, 20] and len(each) == 3
    with pytest.raises(ValueError, match="first dimension must be the batch size"):
        workers.responses_payload(np.ones((3, 2)), 4)
    with pytest.raises(ValueError, match="returned 2 responses for a batch of 3"):
        workers.responses_payload([np.ones(1), np.ones(1)], 3)
    with pytest.raises(ValueError, match="not a numpy array at position 1"):
        workers.responses_payload([np.ones(1), [1, 2]], 2)


class _Runner:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    def run_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        if self.fail is not None:
            raise self.fail
        return [np.array([int(i)], dtype=np.int64) for i in indices]


def _serve_one(runner: _Runner) -> tuple[socket.socket, threading.Thread]:
    core, worker = socket.socketpair()
    where = workers.worker_label("cuda:3", "cuda:0")
    thread = threading.Thread(target=lambda: _quietly(workers._serve_batches, worker, runner,
                                                      workers.CpuWindow(), where), daemon=True)
    thread.start()
    return core, thread


def _quietly(serve: object, *args: object) -> None:
    try:
        serve(*args)  # type: ignore[operator]
    except BaseException:  # the thread's end is what the test looks at
        pass


def test_a_serving_thread_answers_every_batch_or_hangs_up() -> None:
    core, thread = _serve_one(_Runner())
    send(core, Message.BATCH, 2, np.array([7, 9], dtype=np.int64))
    message, count, payload = receive(core)
    assert (message, count) == (Message.RESPONSES, 2)
    assert np.frombuffer(payload, dtype=np.uint64, count=2).tolist() == [8, 8]
    send(core, Message.END)
    thread.join(5)
    assert not thread.is_alive(), "END ends the thread"

    core, thread = _serve_one(_Runner(MemoryError("CUDA out of memory: GPU 0")))
    send(core, Message.BATCH, 1, np.array([1], dtype=np.int64))
    message, _, payload = receive(core)
    text = payload.decode()
    assert message is Message.ERROR
    assert text.startswith("in the worker of cuda:3 (which sees its GPU as cuda:0): Traceback"), text
    assert text.rstrip().endswith("MemoryError: CUDA out of memory: GPU 0")

    core, thread = _serve_one(_Runner(SystemExit(3)))  # anything else that ends the thread: the core must not wait
    send(core, Message.BATCH, 1, np.array([1], dtype=np.int64))
    with pytest.raises(workers.ConnectionClosed):
        receive(core)
    thread.join(5)


def test_placement_follows_the_gpus_node(tmp_path: Path) -> None:
    from code.common.placement import cpu_shares, format_cpu_list, gpu_placement, parse_cpu_list, sysfs_bus_id

    assert parse_cpu_list("0-3,8-9,5\n") == (0, 1, 2, 3, 5, 8, 9)
    assert format_cpu_list((9, 0, 1, 2, 3, 5, 8)) == "0-3,5,8-9"
    assert sysfs_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    devices, nodes = tmp_path / "pci", tmp_path / "nodes"
    for bus, node in (("0000:1b:00.0", "1"), ("0000:2c:00.0", "-1")):
        (devices / bus).mkdir(parents=True)
        (devices / bus / "numa_node").write_text(node + "\n")
    (nodes / "node1").mkdir(parents=True)
    (nodes / "node1" / "cpulist").write_text("4-7\n")
    allowed = tuple(range(8))
    near = gpu_placement("00000000:1B:00.0", allowed, devices, nodes)
    assert (near.cpus, near.numa_node) == ((4, 5, 6, 7), 1)
    assert gpu_placement("00000000:2C:00.0", allowed, devices, nodes).cpus == allowed, "no node: every CPU"
    assert gpu_placement("00000000:1B:00.0", (0, 1), devices, nodes).cpus == (0, 1), "none of its node's allowed"
    assert [share.cpus for share in cpu_shares((0, 1, 2, 3), 2)] == [(0, 1), (2, 3)]
    assert [share.cpus for share in cpu_shares((0,), 2)] == [(0,), (0,)], "fewer CPUs than workers: shared"


def test_one_reading_of_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from code.common.systems import cuda_visible_entries

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_visible_entries(3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, GPU-5f1e,0")
    assert cuda_visible_entries(4) == ["2", "GPU-5f1e", "0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # CUDA stops at the first entry it cannot use
    assert cuda_visible_entries(4) == ["1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_visible_entries(4) == []


def test_a_worker_runs_its_own_device_and_nothing_else() -> None:
    from code.processes.device_worker import worker_overrides

    given = {"devices": "0,1", "device": "auto", "gpu_batch_size": 64}
    assert worker_overrides(given, "cuda:1") == {"devices": "all", "device": "cuda", "cpu_workers": 1,
                                                 "gpu_batch_size": 64}
    assert worker_overrides({"cpu_workers": 2}, "cpu:1") == {"devices": "all", "device": "cpu", "cpu_workers": 1}
    # A worker on a cluster node runs its one device there: it never joins the cluster itself.
    cluster = {"cluster": "head:6379", "cluster_host": "10.0.0.2", "cluster_port": 7000, "gpu_batch_size": 8}
    assert worker_overrides(cluster, "cuda:3@node2") == {"devices": "all", "device": "cuda", "cpu_workers": 1,
                                                         "gpu_batch_size": 8}  # nor takes the cluster's fields
    assert worker_overrides({}, "cuda:3@node2")["device"] == "cuda"


def test_what_the_loadgen_process_says_of_its_workers() -> None:
    from code.processes.run_devices import device_failure, engine_stats_of

    one = {"completed": 10, "generated_tokens": 700, "seconds": 3.0}
    two = {"completed": 12, "generated_tokens": 800, "seconds": 3.5}
    combined = engine_stats_of([{"engine": one}, {"engine": two}])
    assert combined["generated_tokens"] == 1500 and combined["seconds"] == 3.5 and combined["per_device"] == [one, two]
    assert engine_stats_of([{"host": {}}, {"host": {}}]) is None, "runners that count nothing"
    part = engine_stats_of([{"engine": one}, {"error": "no statistics (timeout)"}])
    assert part["incomplete"] == "1 of 2 workers sent no counters (no statistics (timeout))"
    error = RuntimeError("run_batch on cuda:1 (device 2 of 2): in the worker of cuda:1 (which sees its GPU as "
                         "cuda:0): Traceback (most recent call last):\n  File x\nMemoryError: out of memory\n")
    text = str(device_failure(error, ["the worker of cuda:1 (pid 42) exited with status 1"]))
    assert text.startswith("run_batch on cuda:1 (device 2 of 2): in the worker of cuda:1 (which sees its GPU as "
                           "cuda:0): MemoryError: out of memory (the worker of cuda:1 (pid 42) exited with status 1)")
    assert text.endswith("the test ended there and is not valid: the samples after the failure were answered "
                         "empty (LoadGen's logs are kept)")


def test_a_ready_worker_is_logged_with_the_cpus_it_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker on another node of a cluster pins itself there: the LoadGen process planned no CPUs for it.
    from code.harness.workers import WorkerPlan
    from code.processes import run_devices

    lines: list[str] = []

    class Log:
        def info(self, message: str, *args: object) -> None:
            lines.append(message % args)

    monkeypatch.setattr(run_devices, "log", Log())
    run_devices._check_placement(WorkerPlan("cuda:1@node2", "cuda:0", "", (), None),
                                 {"gpu": "NVIDIA H200", "load_s": 12.7, "cpus": "0-31"})
    run_devices._check_placement(WorkerPlan("cuda:0", "cuda:0", "", (0, 1, 2, 3), 0),
                                 {"gpu": "NVIDIA H200", "load_s": 15.0})
    assert lines == ["cuda:1@node2: NVIDIA H200, ready in 12.7 s, NUMA node not reported, CPUs 0-31",
                     "cuda:0: NVIDIA H200, ready in 15.0 s, NUMA node 0, CPUs 0-3"]
