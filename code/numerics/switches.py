"""The switches of the numerics both benchmarks' FP8 GEMMs share, declared once for the backends that run them.

A backend whose engines run cuBLASLt FP8 GEMMs (BERT's packed path, GPT-J's in-flight engine) lists
``FP8_FAST_ACCUM`` among its switches and ``fast_accum_needs_fp8`` among its rules; the two declarations are one
field of the configuration (``code/config/fields.py`` joins them). Torch-free: the configuration imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from code.config.backends import Origin
from code.config.field_spec import Field

FP8_FAST_ACCUM = Field("fp8_fast_accum", bool, False, "fp8 engines: cuBLASLt fast accumulation in the FP8 GEMMs "
                       "(faster, less exact)", engine=True)


def fast_accum_needs_fp8(values: Mapping[str, Any], origin: Origin) -> str | None:
    """Fast accumulation is how FP8 GEMMs accumulate: an engine of another precision has none, and a label saying
    otherwise would not be honest."""
    precision = values.get("precision")
    if values.get(FP8_FAST_ACCUM.name) and precision != "fp8":
        return (f"{origin('fp8_fast_accum')} = True sets how FP8 GEMMs accumulate, and {origin('precision')} = "
                f"{precision!r} runs none: add --precision=fp8, or leave fp8_fast_accum out")
    return None
