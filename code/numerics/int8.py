"""INT8 GEMMs with static scales: the math of symmetric quantization and the linear layer that uses it.

INT8 is the 8-bit tensor-core format of every NVIDIA GPU since Turing, and the only one below compute capability 8.9
(A100 = 8.0 and A10 = 8.6 have no FP8): NVIDIA's own bert-99 engines run INT8. Scales are static, as FP8's
(``code.numerics.fp8``): activations use one scale per tensor from the same calibrated ``amax`` an FP8 engine stores
(``packed_model.collect_amax``), so no kernel reduces over a tensor at run time and a forward can be a CUDA graph.

A value ``x`` is stored as ``q = round_half_even(clamp(x / scale, -127, 127))`` and read back as ``q * scale``. The
range is symmetric (-128 is never written), so negation is exact and zero is exact. ``scale = amax / 127`` maps the
largest calibrated magnitude to 127. ``x / scale`` is computed as ``x * (1 / scale)``, the reciprocal rounded to
float32 once, because the kernels multiply (one instruction per element instead of a division): the CPU definition
here then equals them bit for bit.

Weights get one scale per output channel (row ``n`` of ``W[N, K]``): the int32 accumulator of output column ``n``
is ``sum_k qx[m, k] * qw[n, k]`` whatever the row's scale, so a per-row scale costs one multiplier per column in
the epilogue, and each row uses all 255 levels. INT8's grid is uniform (no exponent, unlike e4m3's), so one large row
would otherwise coarsen every other row's values. Products accumulate exactly in int32 (``|acc| <= 127**2 K``, below
2**31 for every ``K`` up to ``MAX_K``), then the epilogue computes ``acc * (act_scale * w_scale[n]) + bias[n]`` in
float32 (``code.numerics.int8_gemm`` on CUDA; ``code.numerics.int8_linear.Int8Linear`` is the layer).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from code.numerics.fp8 import amax_scale, dequantize, padded_rows, zero_padded

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: quantize() is the only path
    triton = None

INT8 = torch.int8
INT8_MAX = 127.0
# The int32 accumulator holds K products of at most 127 * 127 each: exact for K up to (2**31 - 1) // 127**2.
MAX_K = (2**31 - 1) // 127**2
# Round to nearest puts a value within half a step of its level: |x - q * scale| <= scale / 2 inside the range.
INT8_ABS_ERROR = 0.5
GEMM_METHODS = ("triton", "int_mm")

__all__ = [
    "GEMM_METHODS",
    "INT8",
    "INT8_MAX",
    "dequantize",
    "quantize",
    "quantize_fast",
    "quantize_weight",
    "reference_gemm",
    "scale_from_amax",
]


def scale_from_amax(amax: float, margin: float = 1.0) -> float:
    """The per-tensor scale that maps ``amax * margin`` to 127."""
    return amax_scale(amax, INT8_MAX, margin)


def _reciprocal(scale: float | Tensor) -> float | Tensor:
    """``1 / scale`` as the kernels get it: a Python float (rounded to float32 when it meets a float32 tensor or a
    kernel argument), or a float32 tensor of per-row reciprocals."""
    return torch.reciprocal(scale.float()) if isinstance(scale, Tensor) else 1.0 / scale


def quantize(x: Tensor, scale: float | Tensor) -> Tensor:
    """``round_half_even(clamp(x * (1 / scale), -127, 127))`` as int8 (the kernels compute the same in one pass).
    ``scale``: a float, or a float32 tensor that broadcasts against ``x`` (a weight's ``[N, 1]`` row scales)."""
    return torch.round((x.float() * _reciprocal(scale)).clamp(-INT8_MAX, INT8_MAX)).to(INT8)


def quantize_cuda(x: Tensor, scale: float, rows: int | None = None) -> Tensor:
    """``quantize`` in one pass over memory (one Triton kernel). ``rows``: the result has that many rows (at least
    ``x``'s), those past ``x``'s zero."""
    rows = padded_rows(x, rows)
    q = torch.empty((rows, *x.shape[1:]), dtype=INT8, device=x.device)
    q[x.shape[0]:].zero_()
    n, block = x.numel(), 2048
    _quantize_kernel[(triton.cdiv(n, block),)](x, q, 1.0 / scale, n, BLOCK=block, num_warps=4)
    return q


def quantize_fast(x: Tensor, scale: float, rows: int | None = None) -> Tensor:
    """``quantize`` as fast as the device allows: one Triton pass on a GPU, ``quantize`` itself elsewhere."""
    if x.is_cuda and triton is not None:
        return quantize_cuda(x.contiguous(), scale, rows)
    return quantize(zero_padded(x, rows), scale)


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``[N, K]`` weight -> (int8 ``[N, K]``, float32 ``[N]`` scales on the weight's device): one scale per output
    channel, ``max_k |W[n, k]| / 127``."""
    if weight.dim() != 2:
        raise ValueError(f"an INT8 weight is a matrix [N, K], got shape {tuple(weight.shape)}")
    amax = weight.detach().float().abs().amax(dim=1)
    scale = amax.clamp_min(1e-12) / INT8_MAX
    return quantize(weight, scale[:, None]), scale.contiguous()


def reference_gemm(
    xq: Tensor,
    weight_q: Tensor,
    dequant_scale: Tensor,
    bias: Tensor | None = None,
    *,
    gelu: bool = False,
    out_scale: float | None = None,
    out_dtype: torch.dtype = torch.float16,
) -> Tensor:
    """The INT8 GEMM's definition: int32 ``acc = xq @ weight_q.T`` (exact: products of int8 values are exact in
    float64, and so is their sum below 2**53), then in float32 ``y = acc * dequant_scale[n] + bias[n]``, tanh GELU
    when ``gelu``, and the output ``quantize(y, out_scale)`` (int8) or ``y`` cast to ``out_dtype``. CPU tests and the
    GPU check compare the kernels against it."""
    acc = (xq.double() @ weight_q.double().t()).to(torch.int32)
    y = acc.float() * dequant_scale.float()
    if bias is not None:
        y = y + bias.float()
    if gelu:
        y = F.gelu(y, approximate="tanh")
    return quantize(y, out_scale) if out_scale else y.to(out_dtype)


if triton is not None:

    @triton.jit
    def quantize_int8(y, inv_scale):  # noqa: ANN001, ANN201 - typed by the JIT
        """``quantize`` of a float32 block in a kernel: clamp to +-127, then round half to even by adding and
        subtracting 1.5 * 2**23 (float32 addition rounds to nearest even, and every float32 of magnitude in
        [2**23, 2**24) is an integer), which Triton's CPU interpreter computes as the GPU does (it has no libdevice
        ``rint``). The float-to-int8 conversion truncates, which is exact on integral values."""
        v = tl.minimum(tl.maximum(y * inv_scale, -127.0), 127.0)
        return ((v + 12582912.0) - 12582912.0).to(tl.int8)

    @triton.jit
    def _quantize_kernel(x_ptr, q_ptr, inv_scale, n, BLOCK: tl.constexpr):  # noqa: ANN001 - typed by the JIT
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(q_ptr + offs, quantize_int8(x, inv_scale), mask=mask)
