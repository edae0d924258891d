"""Which machine this is: GPUs, driver and CUDA from NVML; CPU, memory, storage, OS and software from the OS.

A system's name comes from its GPU model and count alone (``H100_SXM_80GBx8``: ``<model>x<count>``), never from
the CPU: NVIDIA's harness pins each known system to one CPU model and refuses every other host, which is the most
common complaint of its users. No GPU, or no NVML, is the ``CPU`` system. Configs read the name back
(``gpu_model_and_count``): the class of a GPU model serves every count of it. The rest of what is detected fills
the MLPerf system description (``code/common/system_description.py``) and every run's metadata.json, so neither
states anything about the machine that the machine does not say itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import platform
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import takewhile
from pathlib import Path
from typing import Any

from code.common.gpu_models import NVML_OVER_CUDA_GIB, GpuModel, by_name, by_nvml_name
from code.common.paths import REPO_ROOT

CPU_SYSTEM = "CPU"
# <model>x<count>, the count without leading zeros: the form of every GPU system's name.
_GPU_SYSTEM_NAME = re.compile(r"(?P<model>.+)x(?P<count>[1-9][0-9]*)")
# MLPerf system descriptions (systems/<system>.json), the files a submission ships.
SYSTEMS_DIR = REPO_ROOT / "systems"


def gpu_system_name(model: str, count: int) -> str:
    """The name of a system of ``count`` GPUs of ``model``: ``H100_SXM_80GBx8``."""
    return f"{model}x{count}"


def gpu_model_and_count(system: str) -> tuple[str, int] | None:
    """``("H200_SXM_141GB", 2)`` for ``H200_SXM_141GBx2``, the reverse of ``gpu_system_name``; None for a name
    without a GPU count (``CPU``, or a name given with --system_name such as ``MyBox``)."""
    match = _GPU_SYSTEM_NAME.fullmatch(system)
    return (match["model"], int(match["count"])) if match else None


class SystemDetectionError(RuntimeError):
    """Detection found something we cannot name a system for; the message names the fix."""


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    pcie: str = ""  # "PCIe Gen5 x16": the host link NVML reports at its maximum; "" when NVML does not say
    pci_bus_id: str = ""  # NVML's "00000000:1B:00.0": where the GPU sits, for its NUMA node; "" when not said
    sm_count: int = 0  # streaming multiprocessors; 0 when NVML does not say
    power_limit_w: int = 0  # the board's default power limit; 0 when NVML does not say

    def model(self) -> GpuModel:
        """This GPU's model: the row code/common/gpu_models.py has for it, else what NVML says of it."""
        known = by_nvml_name(self.name)
        if known is not None:
            return known
        return GpuModel(self.short_name, (self.name,), self.compute_capability,
                        self.memory_bytes / 2**30 - NVML_OVER_CUDA_GIB, self.sm_count, self.power_limit_w, 0.0,
                        source="detected (NVML)")

    @property
    def short_name(self) -> str:
        """``H100_SXM_80GB`` for a model gpu_models.py names; else the NVML name made identifier-safe plus its GB."""
        known = by_nvml_name(self.name)
        if known is not None:
            return known.name
        words = re.sub(r"^NVIDIA\s+|GeForce\s+", "", self.name)
        base = re.sub(r"[^A-Za-z0-9]+", "_", words).strip("_")
        memory_gb = round(self.memory_bytes / 2**30)
        return base if re.search(r"\d+GB$", base) else f"{base}_{memory_gb}GB"


@dataclass(frozen=True)
class Storage:
    """One block device: its size and kind (NVMe SSD, SSD, HDD)."""

    name: str
    size_bytes: int
    kind: str


@dataclass(frozen=True)
class DetectedSystem:
    gpus: tuple[GpuInfo, ...] = ()
    cpu_model: str = ""
    cpu_cores: int = 0  # logical CPUs the OS offers
    memory_bytes: int = 0
    nvml_error: str | None = None  # why NVML gave nothing, for `make info`
    cpu_sockets: int = 0
    cores_per_socket: int = 0  # physical cores of one processor, as the system description counts them
    storage: tuple[Storage, ...] = ()
    operating_system: str = ""
    driver_version: str = ""  # NVIDIA driver, from NVML
    cuda_version: str = ""  # the CUDA version the driver supports, from NVML
    software: dict[str, str] = field(default_factory=dict)  # Python and the packages a run uses -> version

    @property
    def name(self) -> str:
        """The system name config classes are named after."""
        if not self.gpus:
            return CPU_SYSTEM
        kinds = Counter(g.short_name for g in self.gpus)
        if len(kinds) > 1:
            listing = ", ".join(gpu_system_name(n, c) for n, c in kinds.items())
            raise SystemDetectionError(f"this machine mixes GPU models ({listing}); select one model with "
                                       "CUDA_VISIBLE_DEVICES or name a configured system with --system_name")
        (kind, count), = kinds.items()
        return gpu_system_name(kind, count)

    def describe(self) -> dict[str, Any]:
        """What metadata.json and ``make info`` say of the machine."""
        gpus = [{"name": g.name, "memory_gib": round(g.memory_bytes / 2**30, 1),
                 "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}",
                 **({"sm_count": g.sm_count} if g.sm_count else {}),
                 **({"power_limit_w": g.power_limit_w} if g.power_limit_w else {})} for g in self.gpus]
        return {"name": self.name, "gpus": gpus, "cpu_model": self.cpu_model, "cpu_cores": self.cpu_cores,
                "cpu_sockets": self.cpu_sockets, "cores_per_socket": self.cores_per_socket,
                "memory_gib": round(self.memory_bytes / 2**30, 1),
                "storage": [f"{d.name}: {d.size_bytes / 1e12:.2f} TB {d.kind}" for d in self.storage],
                "operating_system": self.operating_system, "driver_version": self.driver_version,
                "cuda_version": self.cuda_version, "software": self.software, "nvml": self.nvml_error or "ok"}


def cuda_visible_entries(count: int) -> list[str]:
    """What CUDA_VISIBLE_DEVICES shows, one entry per GPU PyTorch numbers: indices below ``count`` and UUIDs, up to
    the first entry CUDA would not accept (it ignores the rest); every GPU when unset. The one reading of the
    variable, which NVML itself ignores: detection and a several-GPU run's workers use it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(index) for index in range(count)]
    items = [item.strip() for item in visible.split(",")]
    return list(takewhile(lambda item: (item.isdigit() and int(item) < count) or item.startswith("GPU-"), items))


def nvml_handle(nvml: Any, entry: str) -> Any:
    """The NVML device of a CUDA_VISIBLE_DEVICES entry (an index or a UUID): detection and the power sampler
    (code/mlperf/power.py) find a GPU the same way."""
    return nvml.nvmlDeviceGetHandleByIndex(int(entry)) if entry.isdigit() else nvml.nvmlDeviceGetHandleByUUID(entry)


def _text(value: Any) -> str:
    """NVML's strings: bytes from older nvidia-ml-py, str from newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml(nvml: Any) -> tuple[Any, str | None]:
    """``pynvml`` (or the stand-in given) initialised, or None and why not; the caller shuts it down."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return None, "nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {error}"
    return nvml, None


def _gpu_info(nvml: Any, handle: Any) -> GpuInfo:
    """One GPU as NVML describes it; what this GPU, driver or stand-in does not answer is left empty."""

    def optional(ask: Callable[[], Any], default: Any) -> Any:
        try:
            return ask()
        except Exception:  # not supported by this GPU, driver or stand-in
            return default

    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    name, memory = _text(nvml.nvmlDeviceGetName(handle)), int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    return GpuInfo(
        name, memory, (int(major), int(minor)),
        pcie=optional(lambda: f"PCIe Gen{nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)} "
                              f"x{nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)}", ""),
        pci_bus_id=optional(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId), ""),
        sm_count=optional(lambda: int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount), 0),
        power_limit_w=optional(lambda: round(nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000), 0))


def detect_gpus(nvml: Any = None) -> tuple[tuple[GpuInfo, ...], str | None]:
    """GPUs through NVML (nvidia-ml-py). Returns (gpus, why-none) and never raises: no NVML means no GPUs."""
    nvml, why = _nvml(nvml)
    if nvml is None:
        return (), why
    try:
        gpus = []
        for entry in cuda_visible_entries(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml_handle(nvml, entry)
            except Exception:  # a UUID NVML does not know (a prefix, or not this machine's): CUDA stops there too
                break
            gpus.append(_gpu_info(nvml, handle))
        return tuple(gpus), None
    finally:
        nvml.nvmlShutdown()


def detect_driver(nvml: Any = None) -> tuple[str, str]:
    """(NVIDIA driver version, CUDA version the driver supports) from NVML; ("", "") without NVML."""
    nvml, _ = _nvml(nvml)
    if nvml is None:
        return "", ""
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())  # 12040 -> 12.4
        return _text(nvml.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:
        return "", ""
    finally:
        nvml.nvmlShutdown()


def _cpu_model() -> str:
    found = re.search(r"^model name\s*:(.*)$", _read(Path("/proc/cpuinfo")), flags=re.M)
    return found[1].strip() if found else platform.processor() or platform.machine()


def _cpu_topology(cpuinfo: str) -> tuple[int, int]:
    """(sockets, physical cores per socket) from /proc/cpuinfo text; (0, 0) when it does not say (VMs, ARM)."""
    sockets = {line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("physical id")}
    cores = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("cpu cores")]
    return len(sockets), int(cores[0]) if cores and cores[0].isdigit() else 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def memory_bytes() -> int:
    """This machine's physical memory in bytes (0: unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def detect_storage(sys_block: Path = Path("/sys/block")) -> tuple[Storage, ...]:
    """Physical block devices: NVMe, SATA/SAS disks and virtio disks; loop, RAM and device-mapper devices are not
    storage of their own."""
    devices = []
    for device in sorted(sys_block.glob("*")) if sys_block.is_dir() else []:
        if re.match(r"(loop|ram|zram|dm-|md|sr|fd)", device.name):
            continue
        sectors = _read(device / "size").strip()
        if not sectors.isdigit() or int(sectors) == 0:
            continue
        rotational = _read(device / "queue" / "rotational").strip() == "1"
        kind = "HDD" if rotational else ("NVMe SSD" if device.name.startswith("nvme") else "SSD")
        devices.append(Storage(device.name, int(sectors) * 512, kind))
    return tuple(devices)


def _operating_system() -> str:
    """PRETTY_NAME of /etc/os-release and the kernel: "Ubuntu 22.04.4 LTS (Linux 5.15.0-105-generic)"."""
    release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', _read(Path("/etc/os-release")), flags=re.M))
    name = release.get("PRETTY_NAME") or platform.system()
    return f"{name} ({platform.system()} {platform.release()})"


SOFTWARE_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "nltk", "rouge_score", "pybind11")
"""Python packages a run's results depend on, recorded by version."""


def detect_software() -> dict[str, str]:
    """Python's version and the installed version of each of SOFTWARE_PACKAGES (missing ones left out)."""
    found = {"python": platform.python_version()}
    for name in SOFTWARE_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


@functools.cache
def this_machine() -> DetectedSystem:
    """This machine, detected once per process: config lookup may ask it for every config a run resolves."""
    return detect_system()


def gpu_model_for_system(system: str) -> GpuModel | None:
    """The GPU model of a system ``<model>x<count>``: gpu_models.py's row, else, when this machine has that model,
    what NVML says of it (asked only then); None for any other system."""
    found = gpu_model_and_count(system)
    if found is None:
        return None
    known = by_name(found[0])
    if known is not None:
        return known
    detected = this_machine()
    if detected.gpus and detected.gpus[0].short_name == found[0]:
        return detected.gpus[0].model()
    return None


def detect_system(nvml: Any = None) -> DetectedSystem:
    """Detect this machine. Pass a stand-in for ``pynvml`` to test detection without a GPU."""
    gpus, why = detect_gpus(nvml)
    driver, cuda = detect_driver(nvml) if not why else ("", "")
    sockets, cores_per_socket = _cpu_topology(_read(Path("/proc/cpuinfo")))
    logical = os.cpu_count() or 0
    return DetectedSystem(gpus=gpus, cpu_model=_cpu_model(), cpu_cores=logical, memory_bytes=memory_bytes(),
                          nvml_error=why, cpu_sockets=sockets or 1, cores_per_socket=cores_per_socket or logical,
                          storage=detect_storage(), operating_system=_operating_system(), driver_version=driver,
                          cuda_version=cuda, software=detect_software())
