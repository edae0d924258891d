"""The Python face of the C++ core (``_mlperf_harness``): settings, the runner protocol, ``run_test``.

The core knows sample indices, lengths and byte buffers, never models: a benchmark passes a ``BatchRunner`` whose
``run_batch`` turns QSL indices into response arrays, one runner per device (documentation/multi_gpu.md).
Arguments are checked here so mistakes fail with a message naming the field before LoadGen starts. One
``run_test`` per process (LoadGen's ``FromConfig`` rule), and one round's build of the core per process (each round
compiles in its own LoadGen); see documentation/harness.md.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from code.common.constants import EDGE_SETS, Benchmark
from code.common.gc_pauses import frozen_heap
from code.common.paths import harness_lib_dir
from code.common.rounds import get_round
from code.harness.build import MODULE_NAME, module_path, runtime_mlperf_conf

# The mlperf.conf keys a run passes: each benchmark's, and each edge set's own (llama3_1-8b-edge).
MODELS = (*(b.loadgen_model for b in Benchmark), *(e.loadgen_model for e in EDGE_SETS.values()))
SCENARIOS = ("Offline", "Server", "SingleStream")
MODES = ("PerformanceOnly", "AccuracyOnly")


class HarnessNotBuiltError(ImportError):
    """The extension module is missing, stale or cannot be loaded."""


@dataclass(frozen=True)
class CoreSettings:
    """Everything the core needs for one LoadGen test; validated on construction. The one definition of the core's
    settings: ``run_test`` hands this object to the C++ core, whose binding (src/bindings.cc) reads each field by
    its name into the RunConfig field of the same name, so a new setting is a field here plus its use in C++."""

    model: str  # mlperf.conf key (MODELS): "bert" | "gptj" | "llama3_1-8b" | "llama3_1-8b-edge"
    scenario: str  # "Offline" | "Server" | "SingleStream"
    mode: str  # "PerformanceOnly" | "AccuracyOnly"
    user_conf: Path  # read once with TestSettings::FromConfig(user_conf, model, scenario)
    log_dir: Path  # created if missing; LoadGen writes mlperf_log_* here
    total_sample_count: int
    performance_sample_count: int
    max_batch_size: int
    # Which round's build of the core (and so which LoadGen and seeds) runs the test; no default: each test has its
    # own (code/common/rounds.py's default_round).
    round: str
    num_workers: int = 1  # batcher threads per device, each calls its device's runner
    sort_by_length: bool = True
    batch_timeout_us: int = 0  # Server: how long a worker waits to fill a batch once it holds one sample
    log_enable_trace: bool = False  # LoadGen's mlperf_log_trace.json; GBs at GPU rates, written during the timed run
    token_responses: bool = False  # responses are int32 token ids: the core reports each one's count to LoadGen

    def __post_init__(self) -> None:
        get_round(self.round)
        for name, choices in (("model", MODELS), ("scenario", SCENARIOS), ("mode", MODES)):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"CoreSettings.{name} must be one of {', '.join(choices)}, not {value!r}")
        for name in ("user_conf", "log_dir"):  # str paths too; frozen, so set through object
            value = getattr(self, name)
            if not isinstance(value, str | Path):
                raise ValueError(f"CoreSettings.{name} must be a path, not {type(value).__name__}")
            object.__setattr__(self, name, Path(value))
        for name, minimum in (("total_sample_count", 1), ("performance_sample_count", 1), ("max_batch_size", 1),
                              ("num_workers", 1), ("batch_timeout_us", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
                raise ValueError(f"CoreSettings.{name} must be an integer >= {minimum}, not {value!r}")
            object.__setattr__(self, name, int(value))
        if self.performance_sample_count > self.total_sample_count:
            raise ValueError(
                f"CoreSettings.performance_sample_count ({self.performance_sample_count}) must not exceed "
                f"total_sample_count ({self.total_sample_count})"
            )
        for name in ("sort_by_length", "log_enable_trace"):
            value = getattr(self, name)
            if not isinstance(value, bool | np.bool_):
                raise ValueError(f"CoreSettings.{name} must be a bool, not {value!r}")
            object.__setattr__(self, name, bool(value))


class BatchRunner(Protocol):
    """What the core calls for each batch the batcher cuts, on its worker threads with the GIL held."""

    def run_batch(self, sample_indices: np.ndarray) -> Sequence[np.ndarray]:
        """One array per int64 QSL index (or one whose first dimension is the batch); the raw bytes of each are that
        sample's LoadGen response (BERT: float32 [384, 2]; GPT-J: int32 generated token ids)."""
        ...


class Session(Protocol):
    """The C++ core's ``ContinuousSession``: the queue of issued samples and their completion."""

    def take(self, max_samples: int, timeout_s: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Up to ``max_samples`` issued samples as (response ids uint64, QSL indices int64), waiting up to
        ``timeout_s`` for the first; None once the test is over and nothing is left."""
        ...

    def complete(self, ids: np.ndarray, responses: Sequence[np.ndarray]) -> None: ...

    def in_flight(self) -> int: ...


class ContinuousRunner(Protocol):
    """A continuous-batching engine: the core calls ``run_continuous`` once, on its own thread with the GIL held,
    and the engine pulls samples (``session.take``) whenever it has room and completes each one as soon as it is
    done (``session.complete``), until ``take`` returns None. It must not return before that, nor with samples
    taken and not completed. ``max_batch_size``, ``num_workers`` and ``batch_timeout_us`` do not apply."""

    def run_continuous(self, session: Session) -> None: ...


def _module(round_name: str) -> ModuleType:
    """Import the round's extension from build/lib/<round>/, with a message that says how to fix a missing or stale
    build. A process holds one round's core: the modules of two rounds share a name and LoadGen's globals."""
    path = module_path(harness_lib_dir(round_name))
    how = f"run `make build ROUND={round_name}` (or `python -m code.harness.build --round={round_name}`)"
    loaded = sys.modules.get(MODULE_NAME)
    if loaded is None:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
        if not path.is_file() or spec is None or spec.loader is None:
            raise HarnessNotBuiltError(f"the C++ harness of round {round_name} is not built: {how}; looked for {path}")
        loaded = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(loaded)
        except ImportError as exc:
            raise HarnessNotBuiltError(f"the C++ harness at {path} does not load ({exc}): {how}") from exc
        sys.modules[MODULE_NAME] = loaded
    elif Path(str(loaded.__file__)).resolve() != path.resolve():
        raise RuntimeError(f"this process already runs the core at {loaded.__file__}; round {round_name}'s core "
                           "needs a process of its own")
    expected = get_round(round_name).loadgen.version
    if loaded.loadgen_version() != expected:
        raise HarnessNotBuiltError(f"{path} has LoadGen {loaded.loadgen_version()}, round {round_name} needs "
                                   f"{expected}: {how}")
    return loaded


def loadgen_version(round_name: str) -> str:
    """The version of the LoadGen compiled into the round's core (e.g. "5.0.21")."""
    return str(_module(round_name).loadgen_version())


def progress(round_name: str) -> dict[str, Any]:
    """Counters of the test running in this process, safe to read while ``run_test`` blocks: issued, completed,
    late (Server: past the latency bound), elapsed_s, completed_by_device."""
    return dict(_module(round_name).progress())


def timeline(round_name: str) -> SampleTimes:
    """Every completed sample of the last test."""
    index, issued, completed, device = _module(round_name).timeline()
    return SampleTimes(index=index, issued_s=issued, completed_s=completed, device=device)


SAMPLE_TIMES_FILE = "sample_times.npz"  # beside LoadGen's logs; staging never copies it


@dataclass(frozen=True)
class SampleTimes:
    """The core's own record of a test's samples, in completion order (LoadGen's trace is off by default)."""

    index: np.ndarray  # int64 QSL index
    issued_s: np.ndarray  # float64 s since the test started
    completed_s: np.ndarray
    length: np.ndarray | None = None  # int64 input length of each sample (tokens), when the caller adds it
    device: np.ndarray | None = None  # int32 index of the device that completed each sample (None: one device)
    device_names: tuple[str, ...] = ()  # the name of each device index ("cuda:0", ...), when the caller adds them

    def with_lengths(self, sample_lengths: np.ndarray) -> SampleTimes:
        return replace(self, length=np.asarray(sample_lengths)[self.index])

    def with_device_names(self, names: Sequence[str]) -> SampleTimes:
        return replace(self, device_names=tuple(names))

    def per_device(self) -> list[dict[str, Any]]:
        """Each device's samples (and input tokens), rate over the whole test and share of the samples, so an
        imbalance shows; empty without a device column."""
        if self.device is None or len(self.index) == 0:
            return []
        duration = float(self.completed_s.max() - self.issued_s.min())
        count = max(int(self.device.max()) + 1, len(self.device_names))
        rows = []
        for d in range(count):
            mine = self.device == d
            samples = int(mine.sum())
            row: dict[str, Any] = {"device": self.device_names[d] if d < len(self.device_names) else f"device {d}",
                                   "samples": samples, "samples_per_s": samples / duration if duration > 0 else 0.0,
                                   "share": samples / len(self.index)}
            if self.length is not None:
                row["input_tokens"] = int(self.length[mine].sum())
            rows.append(row)
        return rows

    def save(self, path: Path) -> None:
        """Each array that is there; the device names only with the device column."""
        arrays = {name: value for name, value in vars(self).items() if name != "device_names" and value is not None}
        if self.device is not None:
            arrays["device_names"] = np.array(self.device_names, dtype=str)
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> SampleTimes:
        with np.load(path) as data:
            arrays = {name: data[name] for name in data.files}
        names = tuple(str(name) for name in arrays.pop("device_names", ()))
        return cls(**arrays, device_names=names)


class WorkerConnections(Protocol):
    """A device whose backend runs in a worker process (``workers.WorkerSockets``): the core talks to it over these
    sockets, with no Python in this process's per-sample path."""

    worker_fds: list[int]  # one socket per batcher thread of the device (a continuous engine uses one)
    continuous: bool  # whether the worker runs a continuous engine (it pulls samples) or answers batches


Runner = BatchRunner | ContinuousRunner | WorkerConnections


def is_continuous(runner: Runner) -> bool:
    """Whether a runner pulls samples itself (continuous batching) rather than answering the batcher's batches."""
    if hasattr(runner, "worker_fds"):
        return bool(runner.continuous)
    return callable(getattr(runner, "run_continuous", None))


def device_error(round_name: str) -> type[RuntimeError]:
    """The class of what ``run_test`` raises after a test in which a device failed, so a caller tells it from a
    mistake in the arguments."""
    error: type[RuntimeError] = _module(round_name).DeviceError
    return error


def worker_messages(round_name: str) -> dict[str, int]:
    """The worker protocol's message numbers as the core defines them, and the header's size (``HEADER_BYTES``)."""
    module = _module(round_name)
    return {**dict(module.WORKER_MESSAGES), "HEADER_BYTES": int(module.WORKER_HEADER_BYTES)}


def run_test(
    settings: CoreSettings,
    sample_lengths: np.ndarray,
    runner: Runner | Sequence[Runner],
    load_samples: Callable[[list[int]], None] | None = None,
    unload_samples: Callable[[list[int]], None] | None = None,
    device_names: Sequence[str] | None = None,
) -> None:
    """Run one LoadGen test (once per process) and block until it ends; LoadGen's logs land in settings.log_dir.

    runner: one runner, or one per device, all of one kind: a Python runner or a worker process's connections
    (``WorkerConnections``), fed from one queue (the least loaded device takes the next batch; a continuous engine
    takes what it has room for); device_names name them in errors and per-device figures (default "device 0", ...).
    sample_lengths: one per QSL sample (Offline cuts batches longest first when settings.sort_by_length).
    load_samples / unload_samples get the QSL indices LoadGen loads or unloads. A runner's or callback's exception
    is re-raised after LoadGen ends the test (the rest are answered empty meanwhile, so the logs are not valid;
    with several devices, a note names the device). The heap is frozen for the test (``code/common/gc_pauses.py``);
    a worker process freezes its own in ``workers.serve``.
    """
    if not isinstance(settings, CoreSettings):
        raise ValueError(f"settings must be a CoreSettings, not {type(settings).__name__}")
    lengths = np.ascontiguousarray(sample_lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"sample_lengths must be a 1-D integer array, not {lengths.dtype} of shape {lengths.shape}")
    if lengths.shape[0] != settings.total_sample_count:
        raise ValueError(
            f"sample_lengths has {lengths.shape[0]} entries; it needs one per QSL sample "
            f"(total_sample_count = {settings.total_sample_count})"
        )
    runners = list(runner) if isinstance(runner, list | tuple) else [runner]
    if not runners:
        raise ValueError("runner: give one runner per device, at least one")
    for each in runners:
        if not (hasattr(each, "worker_fds") or is_continuous(each) or callable(getattr(each, "run_batch", None))):
            raise ValueError(f"runner must have a run_batch or run_continuous method, or be a worker's connections "
                             f"({type(each).__name__} is none of them)")
    if len({is_continuous(each) for each in runners}) > 1:
        raise ValueError("the runners mix run_batch and run_continuous; one test runs one kind on every device")
    names = [f"device {i}" for i in range(len(runners))] if device_names is None else [str(n) for n in device_names]
    if len(names) != len(runners):
        raise ValueError(f"device_names has {len(names)} names for {len(runners)} runners; give one per runner")
    for name, callback in (("load_samples", load_samples), ("unload_samples", unload_samples)):
        if callback is not None and not callable(callback):
            raise ValueError(f"{name} must be callable or None")
    if not settings.user_conf.is_file():
        raise FileNotFoundError(f"user.conf not found: {settings.user_conf}")

    mlperf_conf = runtime_mlperf_conf(get_round(settings.round))  # a LoadGen that does not compile it in (v4.1)
    with frozen_heap():  # no collector pass over the loaded data and engines stalls the test (gc_pauses.py)
        _module(settings.round).run_test(settings, sample_lengths=lengths.astype(np.int64, copy=False),
                                         runners=runners, device_names=names, load_samples=load_samples,
                                         unload_samples=unload_samples, mlperf_conf=str(mlperf_conf or ""))
