"""What each NVIDIA GPU model is: the facts a config is derived from, for the models MLPerf submitters run.

A config for a model with no config class of its own is derived from what the GPU is (configs/<bench>/any_gpu.py):
its compute capability decides which engines it can run, its memory the batch sizes, its SM count, power limit and
bandwidth the first estimate of its rates. The models below come from NVIDIA's datasheets; any other GPU from NVML.
A model's ``published`` ratio (its best published result per GPU over the H100 SXM's) scales the H100's measured
rate into its first rate, an estimate the first ``--test_run``'s probe or ``make find_performance`` replaces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from code.common import published

Capability = tuple[int, int]

# The compute capability each kind of engine needs, with the reason a ladder names when it skips an engine.
FP8_CAPABILITY: Capability = (8, 9)  # e4m3 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.0)
TRITON_CAPABILITY: Capability = (8, 0)  # our Triton kernels (and Triton itself) target Ampere and newer
BF16_CAPABILITY: Capability = (8, 0)  # bf16 tensor cores: Ampere and newer


def capability_text(capability: Capability) -> str:
    return f"{capability[0]}.{capability[1]}"


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as a config sees it. ``memory_gib``: what CUDA reports (PyTorch's ``total_memory``), what a
    process can use: about half a GiB under NVML's total, which also counts the driver's share."""

    name: str  # the short name systems are named after: A100_SXM4_40GB
    nvml_names: tuple[str, ...]  # what NVML calls it (nvmlDeviceGetName)
    capability: Capability
    memory_gib: float
    sm_count: int  # 0: unknown
    power_w: int  # the board's power limit (TDP); 0: unknown
    bandwidth_tb_s: float  # memory bandwidth; 0.0: unknown
    aliases: tuple[str, ...] = ()  # other names users give it (NVIDIA's: A100_SXM_80GB, L4, H100_NVL)
    # benchmark-scenario ("bert-99 Offline") -> this model's best published result per GPU / the H100 SXM's
    published: dict[str, float] = field(default_factory=dict)
    source: str = "datasheet"  # where these facts come from: "datasheet", or "detected (NVML)" for another GPU

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    def has_fp8(self) -> bool:
        return self.capability >= FP8_CAPABILITY

    def describe(self) -> str:
        """``compute capability 8.0, 40 GB, 108 SMs, 400 W`` for make info's sources."""
        parts = [f"compute capability {capability_text(self.capability)}", f"{round(self.memory_gib)} GB",
                 f"{self.sm_count} SMs" if self.sm_count else "", f"{self.power_w} W" if self.power_w else ""]
        return ", ".join(part for part in parts if part)


ESTIMATED_BENCHMARKS = ("bert-99", "gptj-99")
"""The benchmarks a published ratio is kept for: one ratio serves both accuracy targets of each."""


def _ratios(name: str, benchmarks: tuple[str, ...] = ESTIMATED_BENCHMARKS) -> dict[str, float]:
    """``{"bert-99 Offline": 0.391, ...}``: the model's best published result per GPU over the H100 SXM's; a Server
    result none published takes the Offline ratio."""
    ratios: dict[str, float] = {}
    for benchmark in benchmarks:
        offline = published.best(benchmark, "Offline", name)
        if offline is None:
            continue
        for scenario in ("Offline", "Server"):
            mine, h100 = published.best(benchmark, scenario, name), published.best(benchmark, scenario, REFERENCE)
            assert h100 is not None, f"published_results.csv has no {REFERENCE} {benchmark} {scenario} row"
            ratios[f"{benchmark} {scenario}"] = (round(mine.per_gpu / h100.per_gpu, 3) if mine is not None
                                                 else ratios[f"{benchmark} Offline"])
    return ratios


REFERENCE = "H100_SXM_80GB"
"""The model whose rates were measured here for every engine; other models' rates are estimated from it."""

MODELS: tuple[GpuModel, ...] = (
    GpuModel("H100_SXM_80GB", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"), (9, 0), 79.2, 132, 700, 3.35,
             aliases=("H100-SXM-80GB",)),
    GpuModel("H200_SXM_141GB", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e"), (9, 0), 139.8, 132, 700, 4.8,
             aliases=("H200-SXM-141GB",)),
    GpuModel("H100_PCIe_80GB", ("NVIDIA H100 PCIe",), (9, 0), 79.2, 114, 350, 2.0),
    GpuModel("H100_NVL_94GB", ("NVIDIA H100 NVL",), (9, 0), 93.1, 132, 400, 3.9, aliases=("H100_NVL",)),
    GpuModel("GH200_96GB", ("NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3"), (9, 0), 95.0, 132, 900, 4.0,
             aliases=("GH200-GraceHopper-Superchip_GH200-96GB",)),
    GpuModel("A100_SXM4_40GB", ("NVIDIA A100-SXM4-40GB",), (8, 0), 39.6, 108, 400, 1.555,
             published=_ratios("A100_SXM4_80GB", ("bert-99",))),  # no 40 GB result: the 80 GB's (same chip, clocks)
    GpuModel("A100_SXM4_80GB", ("NVIDIA A100-SXM4-80GB",), (8, 0), 79.2, 108, 400, 2.039, aliases=("A100_SXM_80GB",),
             published=_ratios("A100_SXM4_80GB", ("bert-99",))),  # its GPT-J result predates TensorRT-LLM
    GpuModel("A100_PCIe_80GB", ("NVIDIA A100 80GB PCIe",), (8, 0), 79.2, 108, 300, 1.935,
             published=_ratios("A100_PCIe_80GB")),
    GpuModel("A100_PCIe_40GB", ("NVIDIA A100-PCIE-40GB",), (8, 0), 39.4, 108, 250, 1.555),
    GpuModel("A30_24GB", ("NVIDIA A30",), (8, 0), 23.5, 56, 165, 0.933),
    GpuModel("A10_24GB", ("NVIDIA A10",), (8, 6), 22.0, 72, 150, 0.6, aliases=("A10",)),
    GpuModel("L4", ("NVIDIA L4",), (8, 9), 22.0, 58, 72, 0.3, aliases=("L4_24GB",),
             published=_ratios("L4")),
    GpuModel("L40S", ("NVIDIA L40S",), (8, 9), 44.4, 142, 350, 0.864, aliases=("L40S_48GB",),
             published=_ratios("L40S")),
    GpuModel("L40", ("NVIDIA L40",), (8, 9), 44.4, 142, 300, 0.864, aliases=("L40_48GB",)),
    GpuModel("RTX_4090_24GB", ("NVIDIA GeForce RTX 4090",), (8, 9), 23.6, 128, 450, 1.008,
             aliases=("RTX4090",), published=_ratios("RTX_4090_24GB")),
    GpuModel("B200_SXM_180GB", ("NVIDIA B200",), (10, 0), 178.4, 148, 1000, 8.0, aliases=("B200-SXM-180GB",)),
    GpuModel("T4_16GB", ("Tesla T4", "NVIDIA T4"), (7, 5), 14.6, 40, 70, 0.32, aliases=("T4",)),
)
"""Memory: PyTorch's ``total_memory`` where it was read on such a GPU (H100 SXM, H200, A100 40GB), else the
datasheet's total less ``NVML_OVER_CUDA_GIB``."""

NVML_OVER_CUDA_GIB = 0.5
"""What NVML's total memory counts beyond what CUDA offers a process (the driver's share), about."""


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_NAME = {_key(alias): model for model in MODELS for alias in (model.name, *model.aliases)}
_BY_NVML = {nvml_name: model for model in MODELS for nvml_name in model.nvml_names}


def by_name(name: str) -> GpuModel | None:
    """The model called ``name`` (its short name or an alias, case and punctuation ignored), or None."""
    return _BY_NAME.get(_key(name))


def by_nvml_name(nvml_name: str) -> GpuModel | None:
    """The model NVML calls ``nvml_name``; None for a GPU no row names."""
    return _BY_NVML.get(nvml_name)


def model_names() -> list[str]:
    return [model.name for model in MODELS]


def reference() -> GpuModel:
    return _BY_NAME[_key(REFERENCE)]
