"""What this CPU computes in hardware, from its /proc/cpuinfo flags, and the precision a CPU config runs with.

A CPU config asks for ``BestCpuPrecision()``: bf16 halves the bytes a forward moves, but only a CPU with bf16
arithmetic (AMX or AVX512-BF16) gains. Elsewhere PyTorch emulates it and BERT-large runs about 8x slower than in fp32
(81.8 s against 9.7 s for 8 x 170 tokens on a 2-core AVX2 machine). The choice is made when a config resolves, so
``--precision`` in RUN_ARGS still wins. ``MLPERF_CPU_FLAGS`` (e.g. ``"avx avx2 fma"``) replaces /proc/cpuinfo's
flags, to see what another CPU would run (documentation/performance_tuning_guide.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
FLAGS_VARIABLE = "MLPERF_CPU_FLAGS"
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # Intel's AMX tiles; AVX512-BF16 (Intel, AMD Zen 4+)


def cpu_flags() -> frozenset[str]:
    """The first processor's flags, or ``MLPERF_CPU_FLAGS``'s; empty off Linux or on ARM (its line is ``Features``)."""
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
        flags = cpu_flags()
        found = [flag for flag in BF16_FLAGS if flag in flags]
        told = f" ({FLAGS_VARIABLE})" if FLAGS_VARIABLE in os.environ else ""
        if found:
            return "bf16", f"this CPU{told} has {' and '.join(found)}: bf16 in hardware"
        return "fp32", (f"this CPU{told} has neither amx_bf16 nor avx512_bf16: bf16 would be emulated, ~8x slower "
                        "than fp32")
