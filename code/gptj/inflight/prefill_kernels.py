"""A prompt pass's elementwise work between its GEMMs as single Triton passes (CUDA).

Prompt passes change length every time, so they do not run Inductor's fused kernels (``elementwise.py``); as plain
torch operations their elementwise work took about a fifth of a 192-slot engine's GPU time on an H100 (rotary as
eight products, two stacks and two concatenations per layer; GELU over a strided slice; the concatenation of the
attention output with it; zero-padding by a fill and a copy). Each function here is the same arithmetic in one pass
over memory (``KVCache.write_prompt`` does the same for the cache's pages):

- ``rotary_qkv``: q, k (rotated) and v, contiguous, out of the first GEMM's output (as
  ``elementwise.rotary_qkv``);
- ``mlp_in``: ``[attention output, gelu(hidden)]`` as the second GEMM's input, quantized and zero-padded for an
  FP8 GEMM (as ``elementwise.mlp_in``).

Each rounds where the torch operations round (a product or sum of 16-bit values to 16 bits), so on the GPU they give
the plain functions' results up to GELU's last bit. The plain functions stay the definition; the CPU runs them.
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

_ROWS = 16  # tokens per program: 16 rows of a 256-wide head is 8 KB of bf16 per tensor
_COLUMNS = 512  # columns per program of the second GEMM's input; divides the attention width


def supports(heads: int, head_dim: int) -> bool:
    """Whether the kernels take a model of this head shape: a head's dims a power of two (a Triton range) and the
    attention width a multiple of a program's columns, so that no block straddles the concatenation (GPT-J 6B:
    16 heads of 256). Other shapes (small proxies) run the plain functions."""
    return head_dim & (head_dim - 1) == 0 and heads * head_dim % _COLUMNS == 0


def _check_supported(heads: int, head_dim: int) -> None:
    if not supports(heads, head_dim):
        raise ValueError(f"the prompt-pass kernels take no {heads} heads of {head_dim} (see supports): run the plain "
                         "functions of elementwise.py")


def available(x: Tensor, heads: int, head_dim: int) -> bool:
    """Whether these kernels run for ``x``'s device (a GPU with triton) and this head shape."""
    return x.is_cuda and triton is not None and supports(heads, head_dim)


def rotary_qkv(fused: Tensor, rope: Tensor, tokens: int, heads: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k (rotated) and v ``[tokens, heads, head_dim]`` from the first GEMM's output ``[tokens (+pad), ...]``;
    ``rope [tokens, 1, 1, rotary/2, 2]`` (cos, sin) in the model's dtype, as ``InflightModel._rope`` gives it."""
    _check_supported(heads, head_dim)
    rotary = 2 * rope.shape[-2]
    out = torch.empty((3, tokens, heads, head_dim), dtype=fused.dtype, device=fused.device)
    if tokens:
        grid = (triton.cdiv(tokens, _ROWS), heads, 3)
        _rotary_qkv_kernel[grid](fused, fused.stride(0), rope.reshape(tokens, rotary), out, tokens, HEADS=heads,
                                 HEAD_DIM=head_dim, ROTARY=rotary, ROWS=_ROWS, num_warps=4)
    return out[0], out[1], out[2]


def mlp_in(fused: Tensor, attended: Tensor, scale: Tensor | None, align: int) -> Tensor:
    """``[attention output, gelu_tanh(hidden)]`` for the second GEMM: 16-bit as is, or (``scale``) e4m3 of
    ``y / scale`` with rows zero-padded to a multiple of ``align``. ``attended [tokens, heads, head_dim]``."""
    _check_supported(attended.shape[1], attended.shape[2])
    tokens = attended.shape[0]
    width = attended.shape[1] * attended.shape[2]
    hidden = fused.shape[1] - 3 * width
    rows = tokens + (-tokens % align if scale is not None else 0)
    out = torch.empty((rows, width + hidden), dtype=E4M3 if scale is not None else fused.dtype, device=fused.device)
    if rows:
        grid = (triton.cdiv(rows, _ROWS), triton.cdiv(width + hidden, _COLUMNS))
        _mlp_in_kernel[grid](fused, fused.stride(0), attended.reshape(tokens, width).contiguous(), out, tokens, rows,
                             scale if scale is not None else out, WIDTH=width, HIDDEN=hidden,
                             FP8=scale is not None, ROWS=_ROWS, COLUMNS=_COLUMNS, num_warps=4)
    return out


if triton is not None:
    # Lengths change every pass: Triton would compile a kernel again for a length that is 1 or a multiple of 16
    # (its integer specialisation), in the middle of a timed run; one compilation serves every length instead.

    @triton.jit(do_not_specialize=["tokens"])
    def _rotary_qkv_kernel(fused_ptr, fused_stride, rope_ptr, out_ptr, tokens,  # noqa: ANN001 - typed by the JIT
                           HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, ROTARY: tl.constexpr, ROWS: tl.constexpr):
        """One program: ROWS tokens of one head of q (which 0), k (1) or v (2). GPT-J rotates dims (2i, 2i+1) of
        the first ROTARY by angle i: out[2i] = x[2i] cos - x[2i+1] sin, out[2i+1] = x[2i+1] cos + x[2i] sin, each
        product and the sum rounded to the output's dtype as torch's 16-bit operations round them."""
        which = tl.program_id(2)
        head = tl.program_id(1)
        t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        d = tl.arange(0, HEAD_DIM)
        row_ok = (t < tokens)[:, None]
        src = fused_ptr + t.to(tl.int64)[:, None] * fused_stride + (which * HEADS + head) * HEAD_DIM
        x = tl.load(src + d[None, :], mask=row_ok, other=0.0)
        dst = out_ptr + (which * tokens + t.to(tl.int64))[:, None] * (HEADS * HEAD_DIM) + head * HEAD_DIM + d[None, :]
        if which == 2:
            tl.store(dst, x, mask=row_ok)
        else:
            dtype = x.dtype
            rotated = (d < ROTARY)[None, :]
            partner = tl.load(src + (d ^ 1)[None, :], mask=row_ok & rotated, other=0.0)
            angle = rope_ptr + t.to(tl.int64)[:, None] * ROTARY + (d // 2 * 2)[None, :]
            cos = tl.load(angle, mask=row_ok & rotated, other=1.0)
            sin = tl.load(angle + 1, mask=row_ok & rotated, other=0.0)
            straight = (x.to(tl.float32) * cos.to(tl.float32)).to(dtype).to(tl.float32)
            crossed = (partner.to(tl.float32) * sin.to(tl.float32)).to(dtype).to(tl.float32)
            crossed = tl.where((d % 2 == 0)[None, :], -crossed, crossed)
            tl.store(dst, tl.where(rotated, (straight + crossed).to(dtype), x), mask=row_ok)

    @triton.jit(do_not_specialize=["tokens", "rows"])
    def _mlp_in_kernel(fused_ptr, fused_stride, att_ptr, out_ptr, tokens, rows, scale_ptr,  # noqa: ANN001
                       WIDTH: tl.constexpr, HIDDEN: tl.constexpr, FP8: tl.constexpr, ROWS: tl.constexpr,
                       COLUMNS: tl.constexpr):
        """One program: ROWS x COLUMNS of the output. Columns below WIDTH copy the attention output; the others
        are gelu_tanh of the hidden columns (float32, rounded to the 16-bit dtype as torch's F.gelu returns it);
        rows past ``tokens`` are the zero padding."""
        t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        c = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
        live = (t < tokens)[:, None] & (c < WIDTH + HIDDEN)[None, :]
        if tl.program_id(1) * COLUMNS < WIDTH:
            y = tl.load(att_ptr + t.to(tl.int64)[:, None] * WIDTH + c[None, :], mask=live, other=0.0)
        else:
            hidden_column = 3 * WIDTH + (c - WIDTH)  # the hidden part follows q, k and v in the GEMM's output
            h = tl.load(fused_ptr + t.to(tl.int64)[:, None] * fused_stride + hidden_column[None, :], mask=live,
                        other=0.0)
            x = h.to(tl.float32)
            inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi) (x + 0.044715 x^3)
            tanh = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)
            y = (0.5 * x * (1.0 + tanh)).to(h.dtype)
        out = out_ptr + t.to(tl.int64)[:, None] * (WIDTH + HIDDEN) + c[None, :]
        store = (t < rows)[:, None] & (c < WIDTH + HIDDEN)[None, :]
        if FP8:
            # times the inverse, as code.numerics.fp8's quantize kernel (the plain path on a GPU) computes it
            q = tl.minimum(tl.maximum(y.to(tl.float32) * (1.0 / tl.load(scale_ptr)), -448.0), 448.0)
            tl.store(out, q.to(tl.float8e4nv), mask=store)
        else:
            tl.store(out, y, mask=store)
