"""Which CPUs a device's worker process runs on: the CPUs of its GPU's NUMA node.

On two-socket machines half the GPUs hang off each socket, and a worker on the far socket pays a hop on every copy
to its GPU, so each worker is pinned to its GPU's node, as NVIDIA's harness does; where the machine does not say
(one node, a VM), it may run on every allowed CPU. CPU workers split the allowed CPUs. Read from sysfs:
``/sys/bus/pci/devices/<bus id>/numa_node`` and ``/sys/devices/system/node/node<N>/cpulist``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

SYS_PCI_DEVICES = Path("/sys/bus/pci/devices")
SYS_NODES = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class Placement:
    """Where one worker runs."""

    cpus: tuple[int, ...]  # the CPUs it is pinned to
    numa_node: int | None  # its GPU's NUMA node; None where the machine does not say, and for CPU workers


def allowed_cpu_set() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return tuple(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The kernel's CPU list format ("0-3,8-11", "5") as CPU numbers; ValueError on anything else."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return tuple(sorted(set(cpus)))


def format_cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """CPU numbers in the kernel's list format, ranges collapsed: (0, 1, 2, 3, 8) -> "0-3,8"."""
    runs = [[cpu for _, cpu in run] for _, run in groupby(enumerate(sorted(set(cpus))), lambda pair: pair[1] - pair[0])]
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's PCI bus id ("00000000:1B:00.0") as sysfs names the device ("0000:1b:00.0")."""
    domain, _, rest = nvml_bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def gpu_placement(nvml_bus_id: str | None, allowed: tuple[int, ...], pci_devices: Path = SYS_PCI_DEVICES,
                  nodes: Path = SYS_NODES) -> Placement:
    """The CPUs of the GPU's node that this run may use; every allowed CPU where the node is unknown or none of
    its CPUs is allowed (a container pinned elsewhere: pinning to nothing would stop the worker)."""
    node, near = -1, ()
    with contextlib.suppress(OSError, ValueError):  # no such device, or a node the kernel does not list (-1: none)
        if nvml_bus_id:
            node = int((pci_devices / sysfs_bus_id(nvml_bus_id) / "numa_node").read_text().strip())
        if node >= 0:
            near = tuple(cpu for cpu in parse_cpu_list((nodes / f"node{node}" / "cpulist").read_text())
                         if cpu in allowed)
    return Placement(near, node) if near else Placement(allowed, None)


def cpu_shares(allowed: tuple[int, ...], workers: int) -> list[Placement]:
    """The allowed CPUs cut into ``workers`` contiguous shares of at least one CPU (overlapping where too few)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    size = len(allowed)
    cut = [allowed[worker * size // workers:(worker + 1) * size // workers] for worker in range(workers)]
    return [Placement(tuple(share or (allowed[worker % len(allowed)],)), None) for worker, share in enumerate(cut)]
