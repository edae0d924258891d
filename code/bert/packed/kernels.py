# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""Triton kernels for the packed encoder: every elementwise step between two GEMMs in one pass over memory.

Between BERT's GEMMs the work is row-wise and memory-bound: embedding gather + LayerNorm, bias + residual +
LayerNorm, bias + GELU. Done by eager torch each is 2-4 kernels with an fp16 round trip each; here each is one read of
its inputs and one write of its outputs. Each kernel can also write an 8-bit copy quantized with the next GEMM's static
scale, e4m3 or int8 (``q_dtype``: the engine's 8-bit GEMM format), so 8-bit GEMMs need no separate quantize pass (and,
where only the 8-bit copy is used, no 16-bit write at all).
With every GEMM in FP8 the residual stream itself can stay in e4m3 (``PackedBert``'s ``fp8_residual``): the add +
LayerNorm kernel then reads its residual as e4m3 times that copy's scale and writes only the e4m3 copy, 4 bytes of
memory traffic per element instead of 7, as TensorRT's 8-bit skip-LayerNorm does.

Statistics are computed in float32. GELU is the exact erf form BERT was trained with. Imports triton: only the GPU
path imports this module (``packed_model.TorchOps`` is the CPU equivalent and the reference these are checked
against by scripts/gpu/check_bert_packed.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from code.bert.packed.layernorm_args import check_ln_args
from code.numerics import int8
from code.numerics.fp8 import E4M3, E4M3_MAX, quantize_cuda
from code.numerics.int8 import INT8, quantize_int8

Q_DTYPES = (E4M3, INT8)  # the 8-bit copies the kernels write


@triton.jit
def _store_q(q_ptr, offs, y, inv_scale, mask, Q_INT8: tl.constexpr):
    """Store ``y`` quantized with ``inv_scale`` (the reciprocal of the next GEMM's static input scale): int8 rounded
    half to even within +-127 (``code.numerics.int8``), or e4m3 saturated to +-448."""
    if Q_INT8:
        tl.store(q_ptr + offs, quantize_int8(y, inv_scale), mask=mask)
    else:
        q = tl.minimum(tl.maximum(y * inv_scale, -448.0), 448.0)
        tl.store(q_ptr + offs, q.to(tl.float8e4nv), mask=mask)


@triton.jit
def _store_outputs(y, offs, mask, out_ptr, q_ptr, inv_scale, WRITE_OUT: tl.constexpr, WRITE_Q: tl.constexpr,
                   Q_INT8: tl.constexpr):
    """Store a kernel's float32 result: the 16-bit output (``WRITE_OUT``) and the 8-bit copy (``WRITE_Q``)."""
    if WRITE_OUT:
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    if WRITE_Q:
        _store_q(q_ptr, offs, y, inv_scale, mask, Q_INT8)


@triton.jit
def _layernorm_store(x, cols, mask, row, w_ptr, b_ptr, out_ptr, q_ptr, inv_scale, eps, N: tl.constexpr,
                     WRITE_OUT: tl.constexpr, WRITE_Q: tl.constexpr, Q_INT8: tl.constexpr):
    """LayerNorm of one float32 row; stores the 16-bit result (the next residual, unless the residual stream is
    kept in e4m3) and, for an 8-bit GEMM that reads it, its 8-bit copy."""
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    _store_outputs(d * rstd * w + b, row * N + cols, mask, out_ptr, q_ptr, inv_scale, WRITE_OUT, WRITE_Q, Q_INT8)


@triton.jit
def _embed_ln_kernel(ids_ptr, seg_ptr, pos_ptr, word_ptr, type_ptr, posemb_ptr, w_ptr, b_ptr, out_ptr, q_ptr,
                     inv_scale, eps, N: tl.constexpr, BLOCK: tl.constexpr, WRITE_OUT: tl.constexpr,
                     WRITE_Q: tl.constexpr, Q_INT8: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    tok = tl.load(ids_ptr + row).to(tl.int64)
    seg = tl.load(seg_ptr + row).to(tl.int64)
    pos = tl.load(pos_ptr + row).to(tl.int64)
    x = tl.load(word_ptr + tok * N + cols, mask=mask, other=0.0).to(tl.float32)
    x += tl.load(type_ptr + seg * N + cols, mask=mask, other=0.0).to(tl.float32)
    x += tl.load(posemb_ptr + pos * N + cols, mask=mask, other=0.0).to(tl.float32)
    _layernorm_store(x, cols, mask, row, w_ptr, b_ptr, out_ptr, q_ptr, inv_scale, eps, N, WRITE_OUT, WRITE_Q, Q_INT8)


@triton.jit
def _row_plus_bias(x_ptr, bias_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    """This program's row of ``x`` plus the bias vector, in float32, with the row's column indices, mask and offsets
    (the start of the add + LayerNorm and bias + GELU kernels)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    offs = row * N + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x += tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return row, cols, mask, offs, x


@triton.jit
def _add_ln_kernel(x_ptr, bias_ptr, res_ptr, w_ptr, b_ptr, out_ptr, q_ptr, res_scale, inv_scale, eps,
                   N: tl.constexpr, BLOCK: tl.constexpr, WRITE_OUT: tl.constexpr, WRITE_Q: tl.constexpr,
                   Q_INT8: tl.constexpr):
    """``res_scale``: the residual is e4m3 stored with that scale (1.0: the residual is 16-bit)."""
    row, cols, mask, offs, x = _row_plus_bias(x_ptr, bias_ptr, N, BLOCK)
    x += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32) * res_scale
    _layernorm_store(x, cols, mask, row, w_ptr, b_ptr, out_ptr, q_ptr, inv_scale, eps, N, WRITE_OUT, WRITE_Q, Q_INT8)


@triton.jit
def _erf(x):
    """erf to ~1.5e-7 absolute (Abramowitz & Stegun 7.1.26): one reciprocal, one exp2, five FMAs. libdevice's erf
    makes the GELU kernel compute-bound at BERT-large shapes, far below memory bandwidth
    (documentation/notes/journal/2026-11-22.md, "Figures behind code comments")."""
    a = tl.abs(x)
    t = tl.fdiv(1.0, 1.0 + 0.3275911 * a, ieee_rounding=False)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - p * tl.exp2(-a * a * 1.4426950408889634)
    return tl.where(x < 0, -y, y)


@triton.jit
def _bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, q_ptr, inv_scale, N: tl.constexpr, BLOCK: tl.constexpr,
                      WRITE_OUT: tl.constexpr, WRITE_Q: tl.constexpr, Q_INT8: tl.constexpr):
    row, cols, mask, offs, x = _row_plus_bias(x_ptr, bias_ptr, N, BLOCK)
    y = 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))
    _store_outputs(y, offs, mask, out_ptr, q_ptr, inv_scale, WRITE_OUT, WRITE_Q, Q_INT8)


def _warps(n: int) -> int:
    return 4 if n <= 1024 else 8


def _inv(scale: float | None) -> float:
    return 1.0 / scale if scale else 1.0


def _q_dtype(q_dtype: torch.dtype) -> torch.dtype:
    if q_dtype not in Q_DTYPES:
        raise ValueError(f"q_dtype={q_dtype}: the 8-bit copy is one of {', '.join(map(str, Q_DTYPES))}")
    return q_dtype


def _launch(
    kernel,
    inputs: tuple,
    scalars: tuple,
    shape: tuple[int, int],
    like: Tensor,
    keep_out: bool,
    q_scale: float | None,
    q_dtype: torch.dtype,
    spare: Tensor | None = None,
) -> tuple[Tensor | None, Tensor | None]:
    """Run one of the row-wise kernels above, one program per row of ``shape`` (``scalars``: its arguments after
    the two output pointers): its 16-bit output, ``like``'s dtype (with ``keep_out``), and 8-bit copy (with
    ``q_scale``), each None when not written. A pointer the kernel does not write still takes a tensor, never
    written: ``spare``, else the other output (the kernels' compiled variants are named by those dtypes)."""
    rows, n = shape
    out = torch.empty((rows, n), dtype=like.dtype, device=like.device) if keep_out else None
    q = torch.empty((rows, n), dtype=_q_dtype(q_dtype), device=like.device) if q_scale else None
    kernel[(rows,)](
        *inputs,
        out if out is not None else (spare if spare is not None else q),
        q if q is not None else (spare if spare is not None else out),
        *scalars,
        N=n,
        BLOCK=triton.next_power_of_2(n),
        WRITE_OUT=keep_out,
        WRITE_Q=bool(q_scale),
        Q_INT8=bool(q_scale) and q_dtype == INT8,
        num_warps=_warps(n),
    )
    return out, q


class TritonOps:
    """The CUDA implementations of ``packed_model.TorchOps``' interface (same arguments, same results). ``q_scale``:
    also write the 8-bit copy, of dtype ``q_dtype`` (e4m3 or int8), quantized with that scale."""

    name = "triton"

    @staticmethod
    def embed_ln(ids: Tensor, segs: Tensor, pos: Tensor, word: Tensor, token_type: Tensor, position: Tensor,
                 weight: Tensor, bias: Tensor, eps: float, q_scale: float | None, keep_out: bool = True,
                 q_dtype: torch.dtype = E4M3) -> tuple[Tensor | None, Tensor | None]:
        check_ln_args(keep_out, q_scale)
        inputs = (ids, segs, pos, word, token_type, position, weight, bias)
        shape = (ids.shape[0], word.shape[1])
        return _launch(_embed_ln_kernel, inputs, (_inv(q_scale), eps), shape, word, keep_out, q_scale, q_dtype)

    @staticmethod
    def add_ln(x: Tensor, x_bias: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float,
               q_scale: float | None, residual_scale: float | None = None, keep_out: bool = True,
               q_dtype: torch.dtype = E4M3) -> tuple[Tensor | None, Tensor | None]:
        check_ln_args(keep_out, q_scale, residual, residual_scale)
        inputs, scalars = (x, x_bias, residual, weight, bias), (residual_scale or 1.0, _inv(q_scale), eps)
        return _launch(_add_ln_kernel, inputs, scalars, x.shape, x, keep_out, q_scale, q_dtype)

    @staticmethod
    def bias_gelu(x: Tensor, bias: Tensor, q_scale: float | None, keep_out: bool,
                  q_dtype: torch.dtype = E4M3) -> tuple[Tensor | None, Tensor | None]:
        return _launch(_bias_gelu_kernel, (x, bias), (_inv(q_scale),), x.shape, x, keep_out, q_scale, q_dtype, spare=x)

    @staticmethod
    def quantize(x: Tensor, scale: float, q_dtype: torch.dtype = E4M3) -> Tensor:
        return int8.quantize_cuda(x, scale) if _q_dtype(q_dtype) == INT8 else quantize_cuda(x, scale)


__all__ = ["E4M3_MAX", "TritonOps"]
