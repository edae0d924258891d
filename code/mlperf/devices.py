"""Where a model runs: the ``device``, ``devices``, ``cpu_workers`` and ``cpu_threads`` fields made concrete.

``auto`` means the same everywhere (a run, engine calibration, the fine-tuning tool): cuda when PyTorch sees a GPU, else
cpu. A run resolves and checks its device once, here, so that a missing GPU or a precision the device cannot run stops
it before it runs something other than what the config, the engine name and metadata.json say.

SingleStream has one sample in flight, so ``devices=all`` means the first GPU there. ``cpu_workers`` makes several CPU
devices (``cpu:0``, ...: worker processes that exercise the several-device path without GPUs). An instance is built, and
its runner called, with its GPU as the thread's current device, so kernels and streams created without one land there.

CPU threads: torch's default is capped at the CPUs this process may use (oversubscribed threads are slower), and Server
leaves one core free: LoadGen's issue thread and the C++ batchers must be scheduled the moment a query arrives, and with
every core busy in torch p99 latency swings by several times (``documentation/notes/journal/2026-11-22.md``, "CPU
threads in Server").

torch is imported inside the functions: only runs that resolve a device or a thread count pay for the import.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from code.common.benchmark_errors import BenchmarkError, InputsUnavailableError
from code.common.constants import Scenario
from code.common.gpu_models import GpuModel, by_name, capability_text
from code.common.placement import allowed_cpu_set
from code.config.capabilities import check_runs_on
from code.config.fields import FieldError, check_device
from code.config.resolved import ResolvedConfig


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def auto_device() -> str:
    return "cuda" if visible_gpus() else "cpu"


def resolve_device(config: ResolvedConfig) -> str:
    """The ``device`` field made concrete, checked against the GPUs present and the precision."""
    device = config["device"]
    gpus = 0 if device == "cpu" else visible_gpus()  # a CPU run never imports torch here
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    elif device != "cpu" and gpus == 0:
        import torch

        raise InputsUnavailableError(f"--device={device}: PyTorch sees no GPU here (torch {torch.__version__}, "
                                     f"CUDA {torch.version.cuda}); use --device=cpu or --device=auto")
    elif ":" in device and int(device.split(":")[1]) >= gpus:
        raise InputsUnavailableError(f"--device={device}: PyTorch sees {gpus} GPU(s), cuda:0 to cuda:{gpus - 1}")
    check_device(config.benchmark, config.values, config.sources, device)
    if device != "cpu":
        check_runs_on(config.benchmark, config.values, config.sources, running_as(config, device), device)
    elif stand_in_of(config) is not None:
        raise InputsUnavailableError(f"--gpu_as={config['gpu_as']} makes a GPU stand in for another, and this run is "
                                     "on the CPU; leave --gpu_as out, or run on a GPU")
    return device


def running_as(config: ResolvedConfig, device: str) -> GpuModel:
    """The stand-in model (``gpu_as``), else the GPU itself. A stand-in's compute capability must be no more than the
    GPU's: it would choose engines whose kernels the GPU does not have, which would fail in the middle of the run."""
    gpu = gpu_of(device)
    stand_in = stand_in_of(config)
    if stand_in is None:
        return gpu
    if stand_in.capability > gpu.capability:
        raise InputsUnavailableError(
            f"--gpu_as={stand_in.name} has compute capability {capability_text(stand_in.capability)} and {device} "
            f"({gpu.name}) {capability_text(gpu.capability)}: a stand-in can only have less than the GPU it runs on, "
            "or its engines would not run here; pick a GPU model of that capability or lower")
    return stand_in


def stand_in_of(config: ResolvedConfig) -> GpuModel | None:
    return by_name(config.values["gpu_as"]) if config.values.get("gpu_as") else None


def gpu_of(device: str) -> GpuModel:
    import torch

    properties = torch.cuda.get_device_properties(torch.device(device))
    return GpuModel(properties.name, (properties.name,), (properties.major, properties.minor),
                    properties.total_memory / 2**30, properties.multi_processor_count, 0, 0.0, source="PyTorch")


def cap_memory_as_stand_in(config: ResolvedConfig, device: str) -> None:
    """With ``gpu_as``, cap this process's memory on ``device`` at the stand-in's: its batch sizes, KV caches and
    OOMs."""
    stand_in = stand_in_of(config)
    if stand_in is None or not device.startswith("cuda"):
        return
    import torch

    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    if stand_in.memory_bytes > total:
        raise InputsUnavailableError(f"--gpu_as={stand_in.name} has {stand_in.memory_gib:.0f} GiB of memory and "
                                     f"{device} {total / 2**30:.0f} GiB: a stand-in can only have less memory than "
                                     "the GPU it runs on; pick a GPU model with less memory, or run without --gpu_as")
    torch.cuda.set_per_process_memory_fraction(stand_in.memory_bytes / total, torch.device(device))


def resolve_devices(config: ResolvedConfig) -> list[str]:
    """The devices a run puts one backend instance on: ``cpu``, ``cpu:N`` each, or ``cuda:N`` each."""
    device = resolve_device(config)
    devices = config["devices"]
    if device == "cpu":
        if devices != "all":
            raise InputsUnavailableError(f"--devices={devices} names GPUs, and this run is on the CPU "
                                         f"({'--device=cpu' if config['device'] == 'cpu' else 'PyTorch sees no GPU'})"
                                         "; leave --devices out, or run on a GPU")
        workers = config["cpu_workers"]
        if workers == 1 or config.scenario is Scenario.SingleStream:
            return ["cpu"]
        return [f"cpu:{i}" for i in range(workers)]
    if config["cpu_workers"] != 1:
        raise InputsUnavailableError(f"--cpu_workers={config['cpu_workers']} is for runs on the CPU, and this run is "
                                     f"on {device}; leave --cpu_workers out (a GPU run has one worker per GPU)")
    if ":" in device:
        index = device.split(":")[1]
        if devices not in ("all", index):
            raise InputsUnavailableError(f"--device={device} and --devices={devices} disagree; give one of them "
                                         f"(--devices={devices} alone, or --device={device} alone)")
        return [device]
    gpus = visible_gpus()
    if devices == "all":
        return [f"cuda:{i}" for i in range(1 if config.scenario is Scenario.SingleStream else gpus)]
    indices = [int(item) for item in devices.split(",")]
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise InputsUnavailableError(f"--devices={devices} names GPU {repeated[0]} more than once; list each GPU once")
    hidden = [i for i in indices if i >= gpus]
    if hidden:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f" (CUDA_VISIBLE_DEVICES={visible} shows {gpus})" if visible is not None else ""
        raise InputsUnavailableError(f"--devices={devices}: GPU {hidden[0]} is not there; PyTorch sees {gpus} GPU(s)"
                                     f"{why}, numbered 0 to {gpus - 1}; give indices in that range, or widen "
                                     "CUDA_VISIBLE_DEVICES")
    return [f"cuda:{i}" for i in indices]


def torch_device(name: str) -> str:
    """The torch device a run's device stands for: ``cpu:1`` (one of several CPU workers) is the CPU."""
    return "cpu" if name.startswith("cpu") else name


def placed_on(device: str, cpu_threads: int) -> Any:  # noqa: ANN401 - torch.device, torch imported lazily
    """The torch device a backend runs on; on the CPU, torch's intra-op threads set to ``cpu_threads`` (0: torch's
    default), for the reason the module docstring gives."""
    import torch

    placed = torch.device(device)
    if placed.type == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    return placed


def backend_on(device: str, config: ResolvedConfig, backend_class: Any, context: Any, name: str | None = None) -> Any:
    """One instance of the backend on ``device`` (a torch device), its options read from the config and the context;
    running out of memory while it loads names the device (as ``name``: a worker sees its GPU as cuda:0) and the
    fix."""
    try:
        with current_device(device):
            cap_memory_as_stand_in(config, device)
            return backend_class(backend_class.options_from(config, replace(context, device=device)))
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        cuda = device.startswith("cuda")
        fix = ("free that GPU (nvidia-smi shows what holds it), leave it out with --devices, or lower "
               "--gpu_batch_size" if cuda else "free memory, or lower --gpu_batch_size")
        raise BenchmarkError(f"{name or device} ran out of memory while its backend instance loaded "
                             f"({error if cuda else allocator_message(error)}); {fix}") from error


def is_out_of_memory(error: BaseException) -> bool:
    """torch's ``OutOfMemoryError`` or the CPU allocator's RuntimeError, by name and text: checking imports no torch."""
    return type(error).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(error)


def allocator_message(error: BaseException) -> str:
    """The allocator's words without c10's ``[enforce fail at ...] err == 0.`` prefix: what was asked for."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text.split("err == 0. ", 1)[-1]


@contextmanager
def current_device(device: str) -> Iterator[None]:
    """The thread's current CUDA device is ``device`` inside (nothing changes for the CPU)."""
    if device.startswith("cuda"):
        import torch

        with torch.cuda.device(torch.device(device)):
            yield
    else:
        yield


class _On:
    def __init__(self, runner: Any, device: str) -> None:
        self.runner, self.device = runner, device

    def __getattr__(self, name: str) -> Any:  # the runner's other methods (stats) as they are
        return getattr(self.runner, name)


class _BatchesOn(_On):
    def run_batch(self, sample_indices: Any) -> Any:
        try:
            with current_device(self.device):
                return self.runner.run_batch(sample_indices)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            # One line naming the knob a user turns for a batch that did not fit: the batch size.
            samples = len(sample_indices)
            where = "the GPU (nvidia-smi shows what else holds it)" if self.device.startswith("cuda") else \
                "the CPU's memory"
            raise BenchmarkError(f"{self.device} ran out of memory running a batch of {samples:,} samples "
                                 f"({allocator_message(error)}); lower --gpu_batch_size below {samples:,} (try "
                                 f"--gpu_batch_size={max(1, samples // 2)}), or free {where}") from error


class _ContinuousOn(_On):
    def run_continuous(self, session: Any) -> None:
        with current_device(self.device):
            self.runner.run_continuous(session)


def on_device(runner: Any, device: str) -> Any:
    """The runner, called with ``device`` current (the core's threads start on GPU 0); a batch that runs out of
    memory stops the run in one line naming --gpu_batch_size (on the CPU too)."""
    if hasattr(runner, "run_continuous"):
        return _ContinuousOn(runner, device) if device.startswith("cuda") else runner
    return _BatchesOn(runner, device)


def release_cached_gpu_memory() -> None:
    """Give the GPU memory PyTorch's allocator caches back to the driver: ``make run`` builds engines in the process
    that then waits for the tests, whose processes need that memory (GPT-J sizes its KV cache from what is free)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def usable_gpu_bytes(device: Any) -> int:
    """The GPU memory this process may use: the total, or the share ``set_per_process_memory_fraction`` allows (a
    stand-in's), which ``torch.cuda.mem_get_info`` and ``total_memory`` ignore."""
    import torch

    device = torch.device(device)
    total = int(torch.cuda.get_device_properties(device).total_memory)
    fraction_of = getattr(torch.cuda, "get_per_process_memory_fraction", None)  # PyTorch 2.9 and newer
    fraction = float(fraction_of(device)) if fraction_of is not None else 1.0
    # a fraction outside (0, 1] means none was set (and 0 would leave nothing): the whole GPU
    return int(total * fraction) if 0.0 < fraction < 1.0 else total


def allocatable_gpu_bytes(device: Any, usable: int | None = None) -> int:
    """What this process can still allocate on the GPU: the driver's free memory plus the blocks PyTorch's allocator
    holds unused, less what the cap to ``usable`` (``usable_gpu_bytes``) keeps from it, so a capped GPU sizes as a
    GPU of that total would (the CUDA context, which the allocator's cap does not count, included)."""
    import torch

    usable = usable_gpu_bytes(device) if usable is None else usable
    free, total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(0, free + cached - max(0, total - usable))


def allowed_cpus() -> int:
    """The CPUs this process may run on (containers and taskset narrow them below os.cpu_count())."""
    return max(1, len(allowed_cpu_set()))


# The most intra-op threads a run may ask for on each CPU it may use: beyond one a CPU they only take turns, and
# each costs a stack and OpenMP's buffers, so thousands exhaust a capped address space (MemoryError) or the memory.
THREADS_PER_CPU = 4


def default_cpu_threads() -> int:
    """torch's own default intra-op threads, capped at the CPUs this process may run on."""
    import torch

    return max(1, min(torch.get_num_threads(), allowed_cpus()))


def resolve_cpu_threads(config: ResolvedConfig) -> int:
    """The ``cpu_threads`` field, else ``default_cpu_threads`` (one fewer in Server)."""
    threads = config["cpu_threads"]
    if threads < 0:
        raise ValueError(f"cpu_threads must be >= 0 (0: choose from the allowed CPUs), got {threads}")
    allowed = allowed_cpus()
    if threads > allowed * THREADS_PER_CPU:
        source = config.sources.get("cpu_threads", "default")
        given = f"--cpu_threads={threads}" if source == "RUN_ARGS" else f"cpu_threads={threads} (set by {source})"
        raise FieldError(f"{given} is more than {THREADS_PER_CPU} threads for each of the {allowed} CPU(s) this "
                         f"process may use ({allowed * THREADS_PER_CPU} at most here): beyond one a CPU threads add "
                         f"no speed and each costs memory; set --cpu_threads={allowed} (one a CPU), or leave it out "
                         "(torch's default, capped at those CPUs)")
    if threads:
        return threads
    default = default_cpu_threads()
    return max(1, default - 1) if config.scenario is Scenario.Server else default
