"""A stand-in for pynvml (nvidia-ml-py) that describes GPUs no machine here has: it tests detection and the configs
derived from what NVML says, not the GPUs themselves."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace


@dataclass(frozen=True)
class FakeGpu:
    name: str
    memory_bytes: int
    capability: tuple[int, int]
    sm_count: int = 0  # 0: the stand-in does not answer, as some drivers don't
    power_limit_mw: int = 0


class FakeNvml:
    """The pynvml functions detection calls, answering for ``count`` GPUs of one kind (or a list of kinds)."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.shutdown = False

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:  # noqa: N802
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(total=handle.memory_bytes)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:  # noqa: N802
        return handle.capability

    def nvmlDeviceGetAttributes(self, handle: FakeGpu) -> SimpleNamespace:  # noqa: N802
        if not handle.sm_count:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(multiprocessorCount=handle.sm_count)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeGpu) -> int:  # noqa: N802
        if not handle.power_limit_mw:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return handle.power_limit_mw

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.00.00"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 13000
