"""The 8-bit GEMM formats behind one interface: e4m3 (``code.numerics.fp8``) and int8 (``code.numerics.int8``).

An engine's 8-bit plumbing (which GEMMs run in 8 bits, which kernel writes whose quantized input with which static
scale, from which calibrated ``amax``) is the same for both formats; only the element type, its largest value, its
rounding and the GEMM that reads it differ. So the packed BERT model keeps one implementation of the plumbing and asks
its format (``EightBitFormat``, named by the engine's precision) for those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from code.numerics import fp8, int8
from code.numerics.int8_linear import Int8Linear


class Linear8(Protocol):
    """What an 8-bit linear layer offers its model: ``Fp8Linear`` and ``Int8Linear``."""

    weight_q: Tensor
    act_scale_value: float  # the static scale of the layer's input

    def quantize_input(self, x: Tensor) -> Tensor: ...

    def __call__(self, xq: Tensor, bias: Tensor | None = None) -> Tensor: ...


def _fp8_linear(weight: Tensor, act_amax: float, out_dtype: torch.dtype, fast_accum: bool) -> Linear8:
    return fp8.Fp8Linear(weight, act_amax, out_dtype, fast_accum)


def _int8_linear(weight: Tensor, act_amax: float, out_dtype: torch.dtype, fast_accum: bool) -> Linear8:
    if fast_accum:
        raise ValueError("fast accumulation is an FP8 GEMM option (cuBLASLt's); INT8 GEMMs accumulate exactly in int32")
    return Int8Linear(weight, act_amax, out_dtype)


@dataclass(frozen=True)
class EightBitFormat:
    """One 8-bit GEMM format; ``name`` is the precision that selects it."""

    name: str
    dtype: torch.dtype
    largest: float  # the largest magnitude it stores: ``scale = amax / largest``
    scale_from_amax: Callable[[float], float]
    quantize: Callable[[Tensor, float], Tensor]  # the float32 definition (CPU path, references)
    # (weight [N, K], calibrated input amax, 16-bit output dtype, fast accumulation) -> the layer
    linear: Callable[[Tensor, float, torch.dtype, bool], Linear8]


FP8 = EightBitFormat("fp8", fp8.E4M3, fp8.E4M3_MAX, fp8.scale_from_amax, fp8.quantize, _fp8_linear)
INT8 = EightBitFormat("int8", int8.INT8, int8.INT8_MAX, int8.scale_from_amax, int8.quantize, _int8_linear)
FORMATS: dict[str, EightBitFormat] = {f.name: f for f in (FP8, INT8)}
_BY_DTYPE: dict[torch.dtype, EightBitFormat] = {f.dtype: f for f in FORMATS.values()}


def eight_bit_format(name: str) -> EightBitFormat:
    """The format a precision names (``fp8``, ``int8``); ValueError listing them otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"no 8-bit GEMM format {name!r}; known: {', '.join(FORMATS)}") from None


def quantize(x: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    """``x`` quantized with ``scale`` to ``dtype`` (e4m3 or int8), the format's float32 definition."""
    try:
        return _BY_DTYPE[dtype].quantize(x, scale)
    except KeyError:
        raise ValueError(f"{dtype} is no 8-bit GEMM format's; known: {', '.join(map(str, _BY_DTYPE))}") from None


__all__ = ["FORMATS", "FP8", "INT8", "EightBitFormat", "Linear8", "eight_bit_format", "quantize"]
