"""FP8 (e4m3) GEMMs with static scales: the math of calibration and the linear layer that uses it.

FP8 halves a GEMM's operand bytes and doubles the tensor cores' rate over 16-bit on Hopper. Scales are per tensor
and static: weights are quantized once when the engine loads, activations with a scale calibrated at engine build
time (``amax`` of the GEMM's input over calibration inputs), so no kernel ever reduces over a tensor at run time and
a whole forward can be a CUDA graph. BERT's packed path and GPT-J's in-flight engine both use it.

A value ``x`` is stored as ``q = saturate(x / scale)`` in e4m3 (largest finite 448) and read back as ``q * scale``;
``scale = amax / 448`` maps the largest calibrated magnitude to the largest e4m3 value.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: quantize() is the only path
    triton = None

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
# e4m3 keeps 3 mantissa bits: round-to-nearest is off by at most half a unit in the last place, 2**-4 relative,
# for values in the normal range (>= 2**-6 of a unit scale); smaller ones are subnormal, off by at most 2**-10 scale.
E4M3_REL_ERROR = 2.0**-4
E4M3_SUBNORMAL_STEP = 2.0**-9


def amax_scale(amax: float, largest: float, margin: float = 1.0) -> float:
    """The scale that maps ``amax * margin`` to an 8-bit format's ``largest`` value (448 for e4m3, 127 for int8,
    ``code.numerics.int8``); a tiny floor keeps zeros finite."""
    if not math.isfinite(amax) or amax < 0:
        raise ValueError(f"amax must be finite and >= 0, got {amax}")
    return max(amax * margin, 1e-12) / largest


def scale_from_amax(amax: float, margin: float = 1.0) -> float:
    """The per-tensor scale that maps ``amax * margin`` to e4m3's largest value."""
    return amax_scale(amax, E4M3_MAX, margin)


def quantize(x: Tensor, scale: float | Tensor) -> Tensor:
    """``x / scale`` saturated to +-448 and rounded to e4m3 (the kernels do the same in one pass)."""
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def padded_rows(x: Tensor, rows: int | None) -> int:
    """The rows of a quantized result: ``rows``, or x's own; never fewer than x's."""
    if rows is not None and rows < x.shape[0]:
        raise ValueError(f"rows={rows} is fewer than the input's {x.shape[0]}")
    return x.shape[0] if rows is None else rows


def zero_padded(x: Tensor, rows: int | None) -> Tensor:
    """``x`` with zero rows after its own up to ``rows`` (``padded_rows``): a padded GEMM input off the GPU."""
    rows = padded_rows(x, rows)
    return torch.cat((x, x.new_zeros((rows - x.shape[0], *x.shape[1:])))) if rows > x.shape[0] else x


def quantize_cuda(x: Tensor, scale: float | Tensor, rows: int | None = None) -> Tensor:
    """``quantize`` in one pass over memory (one Triton kernel instead of four elementwise ones). ``scale``: a
    float, or a 0-d float32 tensor on the GPU that the kernel reads (no host synchronisation). ``rows``: the result
    has that many rows (at least ``x``'s), those past ``x``'s zero: a GEMM input padded without a copy."""
    rows = padded_rows(x, rows)
    q = torch.empty((rows, *x.shape[1:]), dtype=E4M3, device=x.device)
    q[x.shape[0]:].zero_()
    n, block = x.numel(), 2048
    in_memory = isinstance(scale, Tensor)
    _quantize_kernel[(triton.cdiv(n, block),)](x, q, 1.0 if in_memory else 1.0 / scale,
                                               scale if in_memory else x, n, BLOCK=block,
                                               SCALE_IN_MEMORY=in_memory, num_warps=4)
    return q


def quantize_fast(x: Tensor, scale: float | Tensor, rows: int | None = None) -> Tensor:
    """``quantize`` as fast as the device allows: one Triton pass on a GPU, ``quantize`` itself elsewhere;
    ``rows`` as ``quantize_cuda``'s."""
    if x.is_cuda and triton is not None:
        return quantize_cuda(x.contiguous(), scale, rows)
    return quantize(zero_padded(x, rows), scale)


def gemm_input(y: Tensor, scale: Tensor | None, align: int) -> Tensor:
    """``y`` as a GEMM takes it: itself (16-bit GEMMs), or e4m3 ``y / scale`` with rows padded to ``align`` (an FP8
    GEMM's input between the LLMs' elementwise groups: ``code/gptj/inflight/elementwise.py``,
    ``code/llama31/elementwise.py``)."""
    if scale is None:
        return y
    rows = y.shape[0] + -y.shape[0] % align
    if torch.compiler.is_compiling():  # torch's operations, which Inductor fuses with the rest
        return quantize(F.pad(y, (0, 0, 0, rows - y.shape[0])), scale)
    return quantize_fast(y, scale, rows)  # no padded copy of y: the padding rows are zeroed in the result


def dequantize(q: Tensor, scale: float | Tensor) -> Tensor:
    return q.float() * scale


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``[N, K]`` weight -> (e4m3 ``[N, K]``, float32 scalar scale on the weight's device)."""
    amax = float(weight.detach().abs().max().float())
    scale = scale_from_amax(amax)
    return quantize(weight, scale), torch.tensor(scale, dtype=torch.float32, device=weight.device)


class Fp8Linear:
    """``y = x @ W.T (+ b)`` with e4m3 operands and a 16-bit output.

    On CUDA ``torch._scaled_mm`` (cuBLASLt FP8, float32 accumulation unless ``fast_accum``); elsewhere the same
    arithmetic emulated in float32 from the quantized operands, so CPU tests check the scales, not the hardware.
    """

    def __init__(self, weight: Tensor, act_amax: float, out_dtype: torch.dtype, fast_accum: bool = False) -> None:
        self.weight_q, self.weight_scale = quantize_weight(weight)
        self.act_scale_value = scale_from_amax(act_amax)
        self.act_scale = torch.tensor(self.act_scale_value, dtype=torch.float32, device=weight.device)
        self.out_dtype = out_dtype
        self.fast_accum = fast_accum
        self.out_features, self.in_features = weight.shape

    def quantize_input(self, x: Tensor) -> Tensor:
        return quantize_fast(x, self.act_scale_value)

    def __call__(self, xq: Tensor, bias: Tensor | None = None) -> Tensor:
        """``xq``: e4m3 ``[M, K]`` quantized with this layer's activation scale; ``bias`` (16-bit, ``[N]``) is
        added in the GEMM's epilogue."""
        if xq.is_cuda:
            return torch._scaled_mm(
                xq,
                self.weight_q.t(),
                self.act_scale,
                self.weight_scale,
                bias=bias,
                out_dtype=self.out_dtype,
                use_fast_accum=self.fast_accum,
            )
        y = dequantize(xq, self.act_scale) @ dequantize(self.weight_q, self.weight_scale).t()
        if bias is not None:
            y = y + bias.float()
        return y.to(self.out_dtype)


if triton is not None:

    @triton.jit
    def _quantize_kernel(x_ptr, q_ptr, inv_scale, scale_ptr, n, BLOCK: tl.constexpr,  # noqa: ANN001 - typed by the JIT
                         SCALE_IN_MEMORY: tl.constexpr):
        if SCALE_IN_MEMORY:
            inv_scale = 1.0 / tl.load(scale_ptr)
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(x * inv_scale, -448.0), 448.0)
        tl.store(q_ptr + offs, q.to(tl.float8e4nv), mask=mask)
