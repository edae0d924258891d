"""System detection: no NVML means the CPU system; mocked NVML as H100/H200 machines maps to our configs."""

import pytest

from code.common.systems import CPU_SYSTEM, SystemDetectionError, detect_system, gpu_model_and_count, gpu_system_name


class FakeMemory:
    def __init__(self, total):
        self.total = total


class FakeNvml:
    """A stand-in for pynvml with a given list of (name, memory bytes, compute capability)."""

    def __init__(self, gpus, fail=None):
        self.gpus, self.fail, self.shutdown = gpus, fail, False

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return FakeMemory(self.gpus[handle][1])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.gpus[handle][2]


H100 = ("NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0))
H200 = ("NVIDIA H200", 150_754_820_096, (9, 0))


def test_no_nvml_is_the_cpu_system():
    system = detect_system(FakeNvml([], fail="NVML Shared Library Not Found"))
    assert system.name == CPU_SYSTEM
    assert "NVML Shared Library Not Found" in system.nvml_error


def test_this_machine_without_gpu_is_cpu():
    assert detect_system().name == CPU_SYSTEM


@pytest.mark.parametrize("gpus,name", [
    ([H100], "H100_SXM_80GBx1"),
    ([H100] * 8, "H100_SXM_80GBx8"),
    ([H200], "H200_SXM_141GBx1"),
    ([H200] * 8, "H200_SXM_141GBx8"),
    ([("NVIDIA GeForce RTX 4090", 25_757_220_864, (8, 9))] * 2, "RTX_4090_24GBx2"),
    ([("NVIDIA A100-SXM4-80GB", 85_899_345_920, (8, 0))], "A100_SXM4_80GBx1"),
])
def test_names_come_from_gpu_model_and_count(gpus, name, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml(gpus)
    system = detect_system(nvml)
    assert system.name == name
    assert nvml.shutdown
    model, count = gpu_model_and_count(name)  # what configs read back: the GPU model's class and the count
    assert (model, count) == (system.gpus[0].short_name, len(gpus)) and gpu_system_name(model, count) == name


@pytest.mark.parametrize("name", [CPU_SYSTEM, "MyBox", "H200_SXM_141GB", "H200_SXM_141GBx0", "H200_SXM_141GBx02",
                                  "x8", "H200_SXM_141GBx2y"])
def test_a_name_without_a_gpu_count_has_no_model(name):
    assert gpu_model_and_count(name) is None


def test_cpu_model_never_matters(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("code.common.systems._cpu_model", lambda: "AMD EPYC 9654 96-Core Processor")
    assert detect_system(FakeNvml([H100] * 8)).name == "H100_SXM_80GBx8"


def test_cuda_visible_devices_limits_the_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert detect_system(FakeNvml([H200] * 8)).name == "H200_SXM_141GBx2"


def test_mixed_gpus_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(SystemDetectionError, match="CUDA_VISIBLE_DEVICES"):
        _ = detect_system(FakeNvml([H100, H200])).name
