"""Worker processes: one per device, each running that device's backend, fed by the C++ core over sockets.

LoadGen, the queue and the dispatch stay in one process (LoadGen's settings and logs are per process); each
device's backend runs in a process of its own, so no two GPUs share one Python interpreter
(documentation/multi_gpu.md). The core talks to a worker over connected stream sockets in its own message format
(worker_channel.h, whose numbers ``core.worker_messages`` exports); this module is the Python end: ``WorkerPool``
in the LoadGen process (start, wait ready, hand the sockets to the core, collect statistics, stop), ``serve`` in
the worker. A worker dies with the LoadGen process (``supervision.die_with_parent``) and sits in its process
group, so Ctrl-C, SIGTERM or SIGKILL of the run leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import struct
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from code.common.benchmark_errors import BenchmarkError
from code.common.gc_pauses import frozen_heap
from code.common.supervision import how_it_ended, start_child

HEADER = struct.Struct("<IIQQ")  # type, reserved, count, payload bytes (worker_channel.h's MessageHeader)
TIMEOUT = struct.Struct("<d")
MAX_PIECES = 256
FINISH_TIMEOUT_S = 60.0  # how long ``finish`` waits for the workers' statistics and exits before it stops them
STOP_GRACE_S = 5.0  # how long stopped workers may take to exit after SIGTERM before they get SIGKILL

# The core's message numbers, 1 to 13 in this order (worker_channel.h); tests check them against the core's.
Message = IntEnum("Message",
                  "BATCH RESPONSES ERROR TAKE TAKEN CLOSED COMPLETE DONE READY END STATS HELLO FIRST_TOKENS")


class ConnectionClosed(ConnectionError):
    """The other end closed the connection (its process ended)."""


class WorkerStartError(BenchmarkError):
    """A worker could not start its device (or died before it was ready); the message names the device."""


class TestEnded(Exception):
    """Worker side: the LoadGen process ended the test while the engine waited for an answer."""


def byte_view(piece: bytes | bytearray | memoryview | np.ndarray) -> memoryview:
    """The raw bytes of a payload piece, copied only where the piece is not contiguous."""
    if isinstance(piece, np.ndarray):
        return memoryview(np.ascontiguousarray(piece).reshape(-1).view(np.uint8))
    return memoryview(piece).cast("B")


def send(sock: socket.socket, message: Message, count: int = 0, *payload: bytes | memoryview | np.ndarray) -> None:
    """One framed message: the header, then the payload pieces (sent without joining them)."""
    pieces = [byte_view(piece) for piece in payload]
    size = sum(piece.nbytes for piece in pieces)
    if len(pieces) > MAX_PIECES:  # one system call takes at most IOV_MAX (1,024) pieces: join many small ones
        pieces = [memoryview(b"".join(pieces))]
    pending = [memoryview(HEADER.pack(int(message), 0, count, size)), *(piece for piece in pieces if piece.nbytes)]
    while pending:
        sent = sock.sendmsg(pending)
        while pending and sent >= pending[0].nbytes:
            sent -= pending[0].nbytes
            pending.pop(0)
        if pending and sent:
            pending[0] = pending[0][sent:]


def receive(sock: socket.socket) -> tuple[Message, int, bytearray]:
    """One framed message: (type, count, payload); ``ConnectionClosed`` when the other end has gone."""
    kind, _, count, size = HEADER.unpack(_receive_exactly(sock, HEADER.size))
    return Message(kind), count, _receive_exactly(sock, size)


def _receive_exactly(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    while view.nbytes:
        got = sock.recv_into(view)
        if got == 0:
            raise ConnectionClosed("the connection closed")
        view = view[got:]
    return data


def responses_payload(result: Any, batch_size: int) -> list[np.ndarray]:
    """A runner's answer as a RESPONSES payload (uint64 sizes, then each response's bytes); it accepts, and refuses
    in the same words, what the core does of an in-process runner (core.BatchRunner)."""
    if isinstance(result, np.ndarray):
        if result.ndim == 0 or result.shape[0] != batch_size:
            raise ValueError(f"run_batch returned one array of shape {result.shape} for a batch of {batch_size} "
                             "samples; its first dimension must be the batch size (or return one array per sample)")
        stacked = np.ascontiguousarray(result)
        sizes = np.full(batch_size, stacked.nbytes // max(batch_size, 1), dtype=np.uint64)
        return [sizes, stacked]
    if isinstance(result, str | bytes) or not isinstance(result, Sequence):
        raise ValueError("run_batch must return a sequence of numpy arrays (one per sample) or one numpy array whose "
                         f"first dimension is the batch, not {type(result).__name__}")
    if len(result) != batch_size:
        raise ValueError(f"run_batch returned {len(result)} responses for a batch of {batch_size} samples")
    for position, item in enumerate(result):
        if not isinstance(item, np.ndarray):
            raise ValueError(f"run_batch returned an item that is not a numpy array at position {position} "
                             f"(type {type(item).__name__})")
    arrays = [np.ascontiguousarray(item) for item in result]
    return [np.array([array.nbytes for array in arrays], dtype=np.uint64), *arrays]


# -- the LoadGen process's side ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerPlan:
    """One worker: the device it runs, as the run names it and as the worker sees it, and where it runs."""

    device: str  # the run's name: "cuda:1", "cpu:0"
    local_device: str  # the torch device inside the worker: "cuda:0" (it sees one GPU), "cpu"
    cuda_visible_devices: str  # CUDA_VISIBLE_DEVICES for the worker: its one GPU, or "" (no GPU) for a CPU worker
    cpus: tuple[int, ...]  # the CPUs it is pinned to
    numa_node: int | None  # its GPU's NUMA node, where the machine says
    pci_bus_id: str = ""  # its GPU as NVML places it ("00000000:1B:00.0"), to check the worker got that one


@dataclass
class WorkerSockets:
    """What the core is handed for one device (``core.WorkerConnections``)."""

    worker_fds: list[int]
    continuous: bool


@dataclass
class _Worker:
    plan: WorkerPlan
    process: subprocess.Popen
    sockets: list[socket.socket]
    ready: dict[str, Any] | None = None


class WorkerPool:
    """The workers of one test, started by ``__enter__`` and stopped (whatever still runs) by ``__exit__``.
    ``command`` starts one worker, ``--device``, ``--fds`` and ``--cpus`` appended; ``connections``: sockets per
    worker, one per batcher thread of the device (a continuous engine uses the first)."""

    def __init__(self, command: list[str], plans: list[WorkerPlan], connections: int,
                 env: dict[str, str] | None = None) -> None:
        self.command, self.plans, self.connections = command, plans, connections
        self.env = dict(os.environ if env is None else env)
        self.workers: list[_Worker] = []

    def __enter__(self) -> WorkerPool:
        try:
            for plan in self.plans:
                self.workers.append(self._start(plan))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _start(self, plan: WorkerPlan) -> _Worker:
        ours, theirs = zip(*(socket.socketpair() for _ in range(self.connections)), strict=True)
        fds = [end.fileno() for end in theirs]
        env = {**self.env, "CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices}
        command = [*self.command, f"--device={plan.device}", f"--fds={','.join(map(str, fds))}",
                   f"--cpus={','.join(map(str, plan.cpus))}"]
        try:
            process = start_child(command, env=env, pass_fds=fds)
        except BaseException:
            for end in ours:
                end.close()
            raise
        finally:
            for end in theirs:
                end.close()
        return _Worker(plan, process, list(ours))

    def wait_ready(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """What each worker said ready (device, placement, load time). A worker that reports an error, ends first
        or is late (``timeout_s``; None for local workers, whose death the kernel reports at once) stops them all
        with ``WorkerStartError`` naming its device."""
        waiting = {worker.sockets[0]: worker for worker in self.workers}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            for sock in waiting:
                selector.register(sock, selectors.EVENT_READ)
            while waiting:
                if deadline is not None and time.monotonic() > deadline:
                    raise self._start_failed(next(iter(waiting.values())), f"it was not ready within {timeout_s:.0f} "
                                             "s (raise --cluster_ready_timeout_s if loading takes longer)")
                for key, _ in selector.select(timeout=1.0):
                    worker = waiting.pop(key.fileobj)  # type: ignore[arg-type]
                    selector.unregister(key.fileobj)
                    worker.ready = self._first_word(worker)
                for worker in list(waiting.values()):
                    if worker.process.poll() is not None:  # ended without a word (killed before it could say)
                        raise self._start_failed(worker, f"its process ended ({exit_status(worker.process)}) before "
                                                 "it was ready")
        return [worker.ready or {} for worker in self.workers]

    def _first_word(self, worker: _Worker) -> dict[str, Any]:
        try:
            message, _, payload = receive(worker.sockets[0])
        except ConnectionClosed:
            _ended(worker.process, 10.0)  # one that closed its end and lives on is ended by stop()
            raise self._start_failed(worker, f"its process ended ({exit_status(worker.process)}) before it was "
                                     "ready") from None
        if message is Message.ERROR:
            raise self._start_failed(worker, payload.decode(errors="replace"))
        if message is not Message.READY:
            raise self._start_failed(worker, f"it sent message {int(message)} before it was ready")
        return json.loads(payload)

    def _start_failed(self, worker: _Worker, why: str) -> WorkerStartError:
        self.stop()
        return WorkerStartError(f"the worker of {worker.plan.device} could not start: {why}")

    def connections_for_core(self, continuous: bool) -> list[WorkerSockets]:
        """Each worker's connections as the core takes them (a continuous engine uses the first)."""
        return [WorkerSockets([sock.fileno() for sock in (worker.sockets[:1] if continuous else worker.sockets)],
                              continuous) for worker in self.workers]

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> list[dict[str, Any]]:
        """After the test: END to each worker, then its statistics (``{"error": ...}`` when gone or silent), then
        its exit."""
        for sock in (sock for worker in self.workers for sock in worker.sockets):
            with contextlib.suppress(OSError):  # gone: its exit status says why
                send(sock, Message.END)
        deadline = time.monotonic() + timeout_s  # one for all: the workers finish side by side
        results = [self._stats(worker, deadline) for worker in self.workers]
        for worker in self.workers:
            _ended(worker.process, max(0.1, deadline - time.monotonic()))  # stop() ends one that is not
        return results

    def _stats(self, worker: _Worker, deadline: float) -> dict[str, Any]:
        sock = worker.sockets[0]
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            message, _, payload = receive(sock)
            while message is not Message.STATS:  # what an engine said after the core stopped listening
                message, _, payload = receive(sock)
            return json.loads(payload)
        except (OSError, ConnectionClosed, ValueError) as error:
            worker.process.poll()
            status = f"; {exit_status(worker.process)}" if worker.process.returncode is not None else ""
            return {"error": f"no statistics ({type(error).__name__}: {error}{status})"}
        finally:
            sock.settimeout(None)

    def exit_notes(self) -> list[str]:
        """One line per worker that ended badly; all get 2 s together to end (one that just failed may be on its way
        out)."""
        notes = []
        deadline = time.monotonic() + 2.0
        for worker in self.workers:
            if _ended(worker.process, deadline - time.monotonic()) and worker.process.returncode != 0:
                notes.append(f"the worker of {worker.plan.device} (pid {worker.process.pid}) "
                             f"{exit_status(worker.process)}")
        return notes

    def stop(self) -> None:
        """End every worker still running (SIGTERM, then SIGKILL after a grace) and close the sockets."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in self.workers:
            if not _ended(worker.process, deadline - time.monotonic()):
                worker.process.kill()
                worker.process.wait()
            for sock in worker.sockets:
                sock.close()


def _ended(process: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the process has ended, waiting up to ``timeout_s`` for it."""
    try:
        process.wait(timeout=max(0.0, timeout_s))
    except subprocess.TimeoutExpired:
        return False
    return True


def exit_status(process: subprocess.Popen) -> str:
    """How a process ended, in words; a Ray task says itself (``why``: "its node left the cluster")."""
    if getattr(process, "why", ""):
        return process.why  # type: ignore[attr-defined]
    return "is still running" if process.returncode is None else how_it_ended(process.returncode)


# -- the worker's side ---------------------------------------------------------------------------------------------
class CpuWindow:
    """The worker's CPU and wall seconds from its first piece of work to the test's end: the host CPU one device
    costs, for metadata.json."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start: tuple[float, float] | None = None

    def started(self) -> None:
        with self._lock:
            if self._start is None:
                self._start = (time.process_time(), time.monotonic())

    def figures(self) -> dict[str, float]:
        if self._start is None:
            return cpu_figures(0.0, 0.0)
        return cpu_figures(time.process_time() - self._start[0], time.monotonic() - self._start[1])


def cpu_figures(cpu_s: float, wall_s: float) -> dict[str, float]:
    """A process's host cost as metadata.json records it: CPU seconds, wall seconds, CPU seconds per second."""
    return {"cpu_s": round(cpu_s, 3), "wall_s": round(wall_s, 3),
            "cpu_per_s": round(cpu_s / wall_s, 4) if wall_s else 0.0}


class RemoteSession:
    """The core's ``ContinuousSession`` across the socket, for an engine in a worker (the core checks the ids)."""

    def __init__(self, sock: socket.socket, window: CpuWindow) -> None:
        self.sock, self.window = sock, window
        self._in_flight = 0

    def take(self, max_samples: int, timeout_s: float) -> tuple[np.ndarray, np.ndarray] | None:
        if max_samples < 0:
            raise ValueError(f"session.take: max_samples must be >= 0, not {max_samples}")
        send(self.sock, Message.TAKE, max_samples, TIMEOUT.pack(float(timeout_s)))
        message, count, payload = receive(self.sock)
        if message is Message.CLOSED:
            return None
        if message is Message.END:
            raise TestEnded("the LoadGen process ended the test")
        if message is not Message.TAKEN:
            raise ValueError(f"session.take: the core answered with message {int(message)}")
        if count:
            self.window.started()
        self._in_flight += count
        ids = np.frombuffer(payload, dtype=np.uint64, count=count).copy()
        indices = np.frombuffer(payload, dtype=np.int64, count=count, offset=8 * count).copy()
        return ids, indices

    def complete(self, ids: np.ndarray, responses: Sequence[np.ndarray]) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        if len(responses) != len(ids):
            raise ValueError(f"session.complete: {len(ids)} ids but {len(responses)} responses")
        arrays = [np.ascontiguousarray(response) for response in responses]
        sizes = np.array([array.nbytes for array in arrays], dtype=np.uint64)
        send(self.sock, Message.COMPLETE, len(ids), ids, sizes, *arrays)
        self._in_flight -= len(ids)

    def first_tokens(self, ids: np.ndarray, tokens: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        if ids.ndim != 1 or tokens.shape != ids.shape:
            raise ValueError(f"session.first_tokens: {ids.size} ids but {tokens.size} tokens (one int32 token id per "
                             "sample expected)")
        send(self.sock, Message.FIRST_TOKENS, len(ids), ids, tokens)

    def in_flight(self) -> int:
        return self._in_flight


def serve(sockets: list[socket.socket], runner: Any, ready: dict[str, Any]) -> None:
    """Worker side, once the runner is built: say ready, serve the test, then send the statistics (the host CPU used,
    and the runner's own ``stats()`` if it has one)."""
    from code.harness.core import is_continuous

    window = CpuWindow()
    continuous = is_continuous(runner)
    where = worker_label(ready.get("device", "?"), ready.get("local_device", ""))
    with frozen_heap():  # no collector pass over the loaded engine and data mid-test (code/common/gc_pauses.py)
        send(sockets[0], Message.READY, 0, json.dumps({**ready, "continuous": continuous}).encode())
        if continuous:
            _serve_engine(sockets[0], runner, window, where)
        else:
            threads = [threading.Thread(target=_serve_batches, args=(sock, runner, window, where), daemon=True,
                                        name=f"batches-{i}") for i, sock in enumerate(sockets)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    stats: dict[str, Any] = {"host": window.figures()}
    if callable(getattr(runner, "stats", None)):
        stats["engine"] = runner.stats()
    send(sockets[0], Message.STATS, 0, json.dumps(stats).encode())


def connect(address: tuple[str, int], count: int, hello: dict[str, Any], timeout_s: float) -> list[socket.socket]:
    """Worker side, on another node: ``count`` TCP connections to the LoadGen process, each opened by a HELLO
    (``hello`` and the connection's ``index``), then carrying the same frames a socketpair does."""
    sockets = []
    for index in range(count):
        sock = socket.create_connection(address, timeout=timeout_s)
        sock.settimeout(None)
        tune_tcp(sock)
        send(sock, Message.HELLO, index, json.dumps({**hello, "index": index}).encode())
        sockets.append(sock)
    return sockets


def tune_tcp(sock: socket.socket) -> None:
    """A worker's TCP connection: no Nagle delay; keepalive probes after 10 s of silence, every 5 s, 3 of them, so
    a peer whose node vanished (no FIN, no RST) is noticed within about 25 s instead of never."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def worker_label(device: str, local_device: str) -> str:
    """How a worker's errors say where they happened: its device as the run names it, and as it sees it (a worker
    sees its one GPU as cuda:0, which a CUDA error message calls GPU 0)."""
    seen = f" (which sees its GPU as {local_device})" if device.startswith("cuda") and local_device != device else ""
    return f"in the worker of {device}{seen}"


def _error_text(where: str) -> bytes:
    return f"{where}: {traceback.format_exc()}".encode()


def _hang_up(sock: socket.socket) -> None:
    """End the connection, so the core sees an end of file at once instead of waiting for an answer that will
    not come (a thread of a living worker that ended unexpectedly)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _serve_batches(sock: socket.socket, runner: Any, window: CpuWindow, where: str) -> None:
    """One connection: every batch gets an answer or an error until END (or the LoadGen process goes away); a
    thread that ends any other way hangs up, so the core is never left waiting."""
    try:
        while True:
            try:
                message, count, payload = receive(sock)
            except ConnectionClosed:
                return
            if message is Message.END:
                return
            if message is not Message.BATCH:
                send(sock, Message.ERROR, 0, f"the worker got message {int(message)} where a batch was due".encode())
                continue
            window.started()
            try:
                indices = np.frombuffer(payload, dtype=np.int64, count=count)
                pieces = [byte_view(piece) for piece in responses_payload(runner.run_batch(indices), count)]
            except Exception:  # the core records it, naming the device, and answers the rest with empty responses
                send(sock, Message.ERROR, 0, _error_text(where))
                continue
            send(sock, Message.RESPONSES, count, *pieces)
    except BaseException:
        _hang_up(sock)
        raise


def _serve_engine(sock: socket.socket, runner: Any, window: CpuWindow, where: str) -> None:
    """The continuous engine runs against a ``RemoteSession``, then the worker waits for END (unless that came
    already); anything unexpected hangs up, as in ``_serve_batches``."""
    try:
        try:
            runner.run_continuous(RemoteSession(sock, window))
            send(sock, Message.DONE)
        except (TestEnded, ConnectionClosed):
            raise
        except Exception:
            send(sock, Message.ERROR, 0, _error_text(where))
        while True:
            message, _, _ = receive(sock)
            if message is Message.END:
                return
    except TestEnded:
        return
    except BaseException:
        _hang_up(sock)
        raise


def worker_error(device: str, error: BaseException, describe: Callable[[BaseException], str | None]) -> str:
    """The text a worker sends when it cannot start its device: the user's fix when ``describe`` knows the error,
    else the error and its traceback (a bug)."""
    known = describe(error)
    if known is not None:
        return known
    return f"{type(error).__name__}: {error} (in the worker of {device})\n{traceback.format_exc()}"
