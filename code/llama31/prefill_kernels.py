"""A Llama prompt pass's elementwise work between its GEMMs as single Triton passes (CUDA).

Prompt passes change length every time, so they do not run Inductor's fused kernels (``elementwise.py``); as plain
torch operations their elementwise work took 140 ms of a 305 ms FP8 prefill pass of 15,386 tokens on an H200 (RMSNorm
as seven kernels, rotate-half RoPE as two concatenations and three products per tensor, SwiGLU over two strided
halves, each quantization a pass of its own). Each function here is the same arithmetic in one pass over memory:

- ``norm_in``: RMSNorm, then the next GEMM's input (16-bit, or e4m3 with zero rows up to a multiple of ``align``),
  as ``elementwise.norm_in``;
- ``residual_norm_in``: the residual add, the new residual written, then ``norm_in`` of it, as
  ``elementwise.residual_norm_in``;
- ``rotary_qk``: q and k rotated, v contiguous, out of the qkv GEMM's output, as ``elementwise.rotary_qk``;
- ``mlp_in``: ``silu(gate) * up`` as the down GEMM's input, as ``elementwise.mlp_in``.

Each rounds where the torch operations round (a 16-bit product or sum to 16 bits; the RMS in float32, the
normalized value cast to 16 bits before the weight's product; SiLU in float32 rounded to 16 bits before the
product with ``up``), and quantizes as ``code.numerics.fp8``'s kernel does (times the inverse scale), so on the GPU
they give the plain functions' results up to the last bit of an exp, a square root or a float32 sum's order. The
plain functions stay the definition; the CPU runs them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from code.numerics.fp8 import E4M3

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the plain functions run instead
    triton = None

_ROWS = 16  # tokens per program of RoPE and SwiGLU: 16 rows of a 128-wide head is 4 KB of bf16 per tensor
_COLUMNS = 512  # columns per program of SwiGLU


def supports(head_dim: int) -> bool:
    """Whether ``rotary_qk`` takes this head size: a power of two (a Triton range; Llama 3.1 8B: 128)."""
    return head_dim >= 2 and head_dim & (head_dim - 1) == 0


def available(x: Tensor, head_dim: int = 2) -> bool:
    """Whether these kernels run for ``x`` (a GEMM's output: on a GPU, with triton, unit column stride) and, for
    ``rotary_qk``, this head size."""
    return x.is_cuda and triton is not None and x.stride(-1) == 1 and supports(head_dim)


def available_norm(x: Tensor, weight: Tensor) -> bool:
    """Whether ``norm_in`` / ``residual_norm_in`` run for ``x``: as ``available``, ``x`` contiguous and the weight
    in its dtype (the kernel rounds the weight's product to that one dtype, as torch does when both share it)."""
    return available(x) and x.is_contiguous() and weight.dtype == x.dtype


def _gemm_rows(tokens: int, scale: Tensor | None, align: int) -> int:
    return tokens + (-tokens % align if scale is not None else 0)


def _norm_warps(block: int) -> int:
    return min(max(block // 512, 1), 8)  # 8 warps for Llama's 4,096-wide rows


def norm_in(x: Tensor, weight: Tensor, eps: float, scale: Tensor | None, align: int) -> Tensor:
    """``rms_norm(x)`` for the next GEMM: 16-bit as is, or (``scale``) e4m3 of ``y / scale`` with rows zero-padded
    to a multiple of ``align``."""
    return _norm(None, x, weight, eps, scale, align)[1]


def residual_norm_in(out: Tensor, x: Tensor, weight: Tensor, eps: float, scale: Tensor | None,
                     align: int) -> tuple[Tensor, Tensor]:
    """``x + out[:tokens]`` (16-bit, as torch rounds the sum) and its ``norm_in``."""
    return _norm(out, x, weight, eps, scale, align)


def _norm(out: Tensor | None, x: Tensor, weight: Tensor, eps: float, scale: Tensor | None,
          align: int) -> tuple[Tensor, Tensor]:
    tokens, dim = x.shape
    rows = _gemm_rows(tokens, scale, align)
    y = torch.empty((rows, dim), dtype=E4M3 if scale is not None else x.dtype, device=x.device)
    residual = torch.empty_like(x) if out is not None else x
    if rows:
        block = triton.next_power_of_2(dim)
        _norm_kernel[(rows,)](x, out if out is not None else x, out.stride(0) if out is not None else 0, residual,
                              weight, y, scale if scale is not None else y, tokens, eps, DIM=dim, BLOCK=block,
                              RESIDUAL=out is not None, FP8=scale is not None, num_warps=_norm_warps(block))
    return residual, y


def rotary_qk(fused: Tensor, rope: Tensor, tokens: int, heads: int, kv_heads: int, head_dim: int
              ) -> tuple[Tensor, Tensor, Tensor]:
    """q, k (rotated) and v, contiguous, from the qkv GEMM's output ``[tokens (+pad), ...]``; ``rope [tokens, 1,
    head_dim/2, 2]`` (cos, sin) in the model's dtype."""
    if not supports(head_dim):
        raise ValueError(f"rotary_qk takes heads of a power-of-two size, not {head_dim}: run elementwise.rotary_qk")
    q = torch.empty((tokens, heads, head_dim), dtype=fused.dtype, device=fused.device)
    k = torch.empty((tokens, kv_heads, head_dim), dtype=fused.dtype, device=fused.device)
    v = torch.empty_like(k)
    if tokens:
        grid = (triton.cdiv(tokens, _ROWS), heads + 2 * kv_heads)
        _rotary_kernel[grid](fused, fused.stride(0), rope.reshape(tokens, head_dim), q, k, v, tokens, HEADS=heads,
                             KV_HEADS=kv_heads, HEAD_DIM=head_dim, ROWS=_ROWS, num_warps=4)
    return q, k, v


def mlp_in(fused: Tensor, tokens: int, scale: Tensor | None, align: int) -> Tensor:
    """``silu(gate) * up`` for the down GEMM from the gate/up GEMM's output ``[tokens (+pad), 2 x width]``: 16-bit
    as is, or (``scale``) e4m3 of ``y / scale`` with rows zero-padded to a multiple of ``align``."""
    width = fused.shape[1] // 2
    rows = _gemm_rows(tokens, scale, align)
    out = torch.empty((rows, width), dtype=E4M3 if scale is not None else fused.dtype, device=fused.device)
    if rows:
        grid = (triton.cdiv(rows, _ROWS), triton.cdiv(width, _COLUMNS))
        _mlp_in_kernel[grid](fused, fused.stride(0), out, tokens, rows, scale if scale is not None else out,
                             WIDTH=width, FP8=scale is not None, ROWS=_ROWS, COLUMNS=_COLUMNS, num_warps=4)
    return out


if triton is not None:
    # Lengths change every pass: Triton would compile a kernel again for a length that is 1 or a multiple of 16
    # (its integer specialisation), in the middle of a timed run; one compilation serves every length instead.

    @triton.jit(do_not_specialize=["tokens"])
    def _norm_kernel(x_ptr, out_ptr, out_stride, residual_ptr, w_ptr, y_ptr, scale_ptr, tokens, eps,  # noqa: ANN001
                     DIM: tl.constexpr, BLOCK: tl.constexpr, RESIDUAL: tl.constexpr, FP8: tl.constexpr):
        """One program: one row of the GEMM's input. Rows past ``tokens`` are the zero padding. With RESIDUAL the
        row is ``x + out`` rounded to 16 bits (torch's add), written as the new residual, then normalized."""
        row = tl.program_id(0).to(tl.int64)
        c = tl.arange(0, BLOCK)
        columns = c < DIM
        dst = y_ptr + row * DIM + c
        if row < tokens:
            x = tl.load(x_ptr + row * DIM + c, mask=columns, other=0.0)
            if RESIDUAL:
                o = tl.load(out_ptr + row * out_stride + c, mask=columns, other=0.0)
                x = (x.to(tl.float32) + o.to(tl.float32)).to(x.dtype)
                tl.store(residual_ptr + row * DIM + c, x, mask=columns)
            h = x.to(tl.float32)
            variance = tl.sum(h * h, axis=0) / DIM  # float32, as the plain function's mean of h**2
            normed = (h * tl.rsqrt(variance + eps)).to(x.dtype)  # cast back before the weight, as HF
            w = tl.load(w_ptr + c, mask=columns, other=0.0)
            y = (w.to(tl.float32) * normed.to(tl.float32)).to(x.dtype)  # the 16-bit product weight * normed
            if FP8:
                # times the inverse, as code.numerics.fp8's quantize kernel (the plain path on a GPU) computes it
                q = tl.minimum(tl.maximum(y.to(tl.float32) * (1.0 / tl.load(scale_ptr)), -448.0), 448.0)
                tl.store(dst, q.to(tl.float8e4nv), mask=columns)
            else:
                tl.store(dst, y, mask=columns)
        else:
            tl.store(dst, tl.zeros((BLOCK,), dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=columns)

    @triton.jit(do_not_specialize=["tokens"])
    def _rotary_kernel(fused_ptr, fused_stride, rope_ptr, q_ptr, k_ptr, v_ptr, tokens,  # noqa: ANN001
                       HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr):
        """One program: ROWS tokens of one head; heads count q's, then k's, then v's, as the GEMM's columns do.
        Rotate half: dims d and d + HEAD_DIM/2 are one pair turned by angle d: out[d] = x[d] cos - x[d+h] sin,
        out[d+h] = x[d+h] cos + x[d] sin, each product and the sum rounded to the output's dtype as torch's 16-bit
        operations round them (``x * cos + cat(-x2, x1) * sin``)."""
        head = tl.program_id(1)
        t = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        d = tl.arange(0, HEAD_DIM)
        row_ok = (t < tokens)[:, None]
        src = fused_ptr + t[:, None] * fused_stride + head * HEAD_DIM
        x = tl.load(src + d[None, :], mask=row_ok, other=0.0)
        if head >= HEADS + KV_HEADS:
            dst = v_ptr + t[:, None] * (KV_HEADS * HEAD_DIM) + (head - HEADS - KV_HEADS) * HEAD_DIM + d[None, :]
            tl.store(dst, x, mask=row_ok)
        else:
            dtype = x.dtype
            partner = tl.load(src + ((d + HEAD_DIM // 2) % HEAD_DIM)[None, :], mask=row_ok, other=0.0)
            angle = rope_ptr + t[:, None] * HEAD_DIM + (d % (HEAD_DIM // 2) * 2)[None, :]
            cos = tl.load(angle, mask=row_ok, other=1.0)
            sin = tl.load(angle + 1, mask=row_ok, other=0.0)
            straight = (x.to(tl.float32) * cos.to(tl.float32)).to(dtype).to(tl.float32)
            crossed = (partner.to(tl.float32) * sin.to(tl.float32)).to(dtype).to(tl.float32)
            crossed = tl.where((d < HEAD_DIM // 2)[None, :], -crossed, crossed)
            y = (straight + crossed).to(dtype)
            if head < HEADS:
                tl.store(q_ptr + t[:, None] * (HEADS * HEAD_DIM) + head * HEAD_DIM + d[None, :], y, mask=row_ok)
            else:
                dst = k_ptr + t[:, None] * (KV_HEADS * HEAD_DIM) + (head - HEADS) * HEAD_DIM + d[None, :]
                tl.store(dst, y, mask=row_ok)

    @triton.jit(do_not_specialize=["tokens", "rows"])
    def _mlp_in_kernel(fused_ptr, fused_stride, out_ptr, tokens, rows, scale_ptr,  # noqa: ANN001
                       WIDTH: tl.constexpr, FP8: tl.constexpr, ROWS: tl.constexpr, COLUMNS: tl.constexpr):
        """One program: ROWS x COLUMNS of the down GEMM's input: silu(gate) in float32 rounded to the 16-bit dtype
        (as torch's F.silu returns it), times up rounded again (torch's product); rows past ``tokens`` are the
        zero padding (silu(0) * 0)."""
        t = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        c = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
        live = (t < tokens)[:, None] & (c < WIDTH)[None, :]
        src = fused_ptr + t[:, None] * fused_stride + c[None, :]
        gate = tl.load(src, mask=live, other=0.0)
        up = tl.load(src + WIDTH, mask=live, other=0.0)
        g = gate.to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
        y = (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype)
        out = out_ptr + t[:, None] * WIDTH + c[None, :]
        store = (t < rows)[:, None] & (c < WIDTH)[None, :]
        if FP8:
            q = tl.minimum(tl.maximum(y.to(tl.float32) * (1.0 / tl.load(scale_ptr)), -448.0), 448.0)
            tl.store(out, q.to(tl.float8e4nv), mask=store)
        else:
            tl.store(out, y, mask=store)
