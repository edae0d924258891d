"""What this CPU computes in hardware, from its /proc/cpuinfo flags, and the precision a CPU config runs with.

A CPU config asks for ``BestCpuPrecision()`` instead of a fixed precision: bf16 halves the bytes a forward moves,
but only a CPU with bf16 arithmetic (AMX or AVX512-BF16) gains from it. Elsewhere PyTorch emulates bf16 through
float32 conversions, and BERT-large's forward runs about 8x slower than in fp32 (81.8 s against 9.7 s for 8 x 170
tokens on a 2-core AVX2 machine), so such a CPU runs fp32. The choice is made when a config resolves
(code/config/registry.py ``system_values``), so ``--precision`` in RUN_ARGS still wins over it.

``MLPERF_CPU_FLAGS`` (space-separated flags, e.g. ``"avx avx2 fma"``) replaces /proc/cpuinfo's flags, to see what a
CPU of another kind would run here; PyTorch's own kernels follow the real CPU unless ``ATEN_CPU_CAPABILITY`` and
``ONEDNN_MAX_CPU_ISA`` restrict them too (documentation/performance_tuning_guide.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
FLAGS_VARIABLE = "MLPERF_CPU_FLAGS"
"""The environment variable whose space-separated flags replace /proc/cpuinfo's."""
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""The /proc/cpuinfo flags of bf16 arithmetic in hardware: Intel's AMX tiles, and AVX512-BF16 (Intel, AMD Zen 4+)."""


def cpu_flags() -> frozenset[str]:
    """The feature flags of this machine's first processor, or those ``MLPERF_CPU_FLAGS`` gives when it is set;
    empty where /proc/cpuinfo does not list them (not Linux, or an ARM CPU, whose line is ``Features``)."""
    given = os.environ.get(FLAGS_VARIABLE)
    if given is not None:
        return frozenset(given.split())
    try:
        text = CPUINFO.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@dataclass(frozen=True)
class BestCpuPrecision:
    """A config class's precision on a CPU: bf16 where the CPU has bf16 arithmetic (``BF16_FLAGS``), else fp32."""

    candidates: tuple[str, ...] = ("bf16", "fp32")

    def choose(self) -> tuple[str, str]:
        """(precision, why) for this machine's CPU."""
        flags = cpu_flags()
        found = [flag for flag in BF16_FLAGS if flag in flags]
        told = f" ({FLAGS_VARIABLE})" if FLAGS_VARIABLE in os.environ else ""
        if found:
            return "bf16", f"this CPU{told} has {' and '.join(found)}: bf16 in hardware"
        return "fp32", (f"this CPU{told} has neither amx_bf16 nor avx512_bf16: bf16 would be emulated, ~8x slower "
                        "than fp32")
