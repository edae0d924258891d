"""Which machine this is: GPUs from NVML, CPU and memory from the OS.

A system's name comes from its GPU model and count alone (``H100_SXM_80GBx8``), never from the CPU: NVIDIA's
harness pins each known system to one CPU model and refuses every other host, which is the most common
complaint of its users. No GPU, or no NVML, is the ``CPU`` system.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common.paths import REPO_ROOT

# NVML's marketing names of GPUs we have configs for -> the short name used in system names.
KNOWN_GPUS = {
    "NVIDIA H100 80GB HBM3": "H100_SXM_80GB",
    "NVIDIA H100 SXM5 80GB": "H100_SXM_80GB",
    "NVIDIA H200": "H200_SXM_141GB",
    "NVIDIA H200 141GB HBM3e": "H200_SXM_141GB",
    "NVIDIA H100 NVL": "H100_NVL_94GB",
    "NVIDIA H100 PCIe": "H100_PCIe_80GB",
    "NVIDIA GH200 480GB": "GH200_96GB",
}
CPU_SYSTEM = "CPU"
# MLPerf system descriptions (systems/<system>.json), the files a submission ships.
SYSTEMS_DIR = REPO_ROOT / "systems"


class SystemDetectionError(RuntimeError):
    """Detection found something we cannot name a system for; the message names the fix."""


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]

    @property
    def short_name(self) -> str:
        """``H100_SXM_80GB`` for known GPUs; else the NVML name made identifier-safe plus its memory in GB."""
        if self.name in KNOWN_GPUS:
            return KNOWN_GPUS[self.name]
        words = re.sub(r"^NVIDIA\s+|GeForce\s+", "", self.name)
        base = re.sub(r"[^A-Za-z0-9]+", "_", words).strip("_")
        memory_gb = round(self.memory_bytes / 2**30)
        return base if re.search(r"\d+GB$", base) else f"{base}_{memory_gb}GB"


@dataclass(frozen=True)
class DetectedSystem:
    gpus: tuple[GpuInfo, ...] = ()
    cpu_model: str = ""
    cpu_cores: int = 0
    memory_bytes: int = 0
    nvml_error: str | None = None  # why NVML gave nothing, for `make info`
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The system name config classes are named after."""
        if not self.gpus:
            return CPU_SYSTEM
        kinds = Counter(g.short_name for g in self.gpus)
        if len(kinds) > 1:
            listing = ", ".join(f"{n}x{c}" for n, c in kinds.items())
            raise SystemDetectionError(
                f"this machine mixes GPU models ({listing}); select one model with CUDA_VISIBLE_DEVICES "
                "or name a configured system with --system_name"
            )
        (kind, count), = kinds.items()
        return f"{kind}x{count}"

    @property
    def accelerator_name(self) -> str:
        return self.gpus[0].name if self.gpus else "none"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": [
                {"name": g.name, "memory_gib": round(g.memory_bytes / 2**30, 1),
                 "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}"}
                for g in self.gpus
            ],
            "cpu_model": self.cpu_model,
            "cpu_cores": self.cpu_cores,
            "memory_gib": round(self.memory_bytes / 2**30, 1),
            "nvml": self.nvml_error or "ok",
        }


def _visible_indices(count: int) -> list[int]:
    """Honour CUDA_VISIBLE_DEVICES when it lists plain indices (NVML itself ignores it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    indices = []
    for item in visible.split(","):
        item = item.strip()
        if item.isdigit() and int(item) < count:
            indices.append(int(item))
    return indices


def detect_gpus(nvml: Any = None) -> tuple[tuple[GpuInfo, ...], str | None]:
    """GPUs through NVML (nvidia-ml-py). Returns (gpus, why-none) and never raises: no NVML means no GPUs."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return (), "nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return (), f"NVML unavailable: {error}"
    try:
        gpus = []
        for index in _visible_indices(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(GpuInfo(name, int(memory), (int(major), int(minor))))
        return tuple(gpus), None
    finally:
        nvml.nvmlShutdown()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def detect_system(nvml: Any = None) -> DetectedSystem:
    """Detect this machine. Pass a stand-in for ``pynvml`` to test detection without a GPU."""
    gpus, why = detect_gpus(nvml)
    return DetectedSystem(
        gpus=gpus,
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        memory_bytes=_memory_bytes(),
        nvml_error=why,
    )


def system_type(system: str, systems_dir: Path | None = None) -> str:
    """The ``system_type`` (datacenter, edge, datacenter,edge) of systems/<system>.json: with the round, it decides
    which scenarios a submission must and may have."""
    path = (systems_dir or SYSTEMS_DIR) / f"{system}.json"
    if not path.is_file():
        raise SystemDetectionError(f"{path} is missing; it says whether {system} is a datacenter or edge system: "
                                   "run `make add_system` to write it")
    try:
        value = json.loads(path.read_text()).get("system_type", "")
    except (json.JSONDecodeError, AttributeError) as error:
        raise SystemDetectionError(f"{path} is not a JSON object ({error}); fix it or rewrite it with "
                                   "`make add_system`") from None
    if not value:
        raise SystemDetectionError(f"{path} has no system_type: set it to datacenter, edge or datacenter,edge")
    return str(value)
