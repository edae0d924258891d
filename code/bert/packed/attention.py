# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""Variable-length (packed) attention forward for BERT on Hopper: one Triton kernel, tiles sized for short sequences.

Why not FA2 (``aten._flash_attention_forward``): at BERT-large's shapes (head_dim 64, sequences of 30-384 tokens,
mean ~170) it runs far below the GPU's tensor rate (documentation/notes/journal/2026-11-22.md). Its 128-row query tiles
spend
most of their work on rows past the end of a ~170-token sequence (2 x 2 tiles of 128 x 128 cover 44% useful scores,
3 x 3 tiles of 64 x 64 cover 78%), and on sm90 it issues mma.sync, not wgmma. This kernel reads the fused QKV GEMM
output in place and:

- **Grid** ``(cdiv(max_len, BLOCK_M), B, H)``: one program per (query block, sequence, head). It reads its sequence's
  bounds from ``cu_seqlens`` on the device and returns at once when its block starts past the sequence's end, so the
  grid depends only on ``(max_len, B, H)``: no host sync, capturable in a CUDA graph (also with all sequences
  empty). Query blocks of one (sequence, head) are adjacent in launch order, so they share K/V in L2.
- **Tiles** ``BLOCK_M`` query rows (64: one warpgroup's wgmma M; 128 with 8 warps) x ``BLOCK_N`` keys (64), the whole
  head_dim per tile. The K/V loop stops at the sequence's length: full blocks unmasked, then at most one masked
  block, so the common iteration has no bounds arithmetic. On Hopper ``tl.dot`` lowers to wgmma and the loop is
  software-pipelined ``num_stages`` deep (cp.async copies of the next K/V tiles). A program does only ~3 blocks
  at BERT's lengths, so its time is mostly memory latency, and serial: cu_seqlens, then q (which Triton stores to
  shared memory before it issues the loop's first copies), then each K/V tile. Throughput comes from programs in
  flight per SM, hence tiles that fit in <= 128 registers (4 programs of 4 warps per SM) and the optional
  ``prefetch_kv``: before loading q, ask L2 for all of the sequence's K/V rows, so the loop's copies hit L2.
- **Softmax** online (flash attention), in float32 with ``exp2``: ``scale * log2(e)`` is folded into one multiply of
  the scores. P is cast to the 16-bit input dtype (fp16 for an e4m3 input) for the PV dot, as flash attention does.
- **Bias** (``qkv_bias``, so the QKV GEMM needs no bias epilogue). k's bias only adds ``q . b_k`` to every score of
  a row, which softmax cancels exactly: it is not loaded at all. v's bias adds ``sum_j p_j b_v = b_v`` to each
  output row (a row's probabilities sum to 1): it is added once to the output, not to every V tile. q's bias, two
  ways (``AttentionConfig.q_bias_in_scores``): added to the scores as ``c_j = b_q . k_j``, one narrow extra wgmma
  per K tile (k @ [b_q, 0..0], N=16: +12.5% tensor work), accumulated in float32 from the exact 16-bit values
  (default); or added to q in float32 as q is loaded and rounded back to 16 bits (as if the GEMM had added it).
  The second makes q a computed value, which Triton feeds to wgmma from registers, not shared memory: 140
  registers instead of 115 (ptxas, sm_90a), 3 programs per SM instead of 4. ``tune`` measures both.
- **e4m3 input** (``qkv_scales``: an FP8 QKV GEMM's output, its bias added in the GEMM's epilogue): q.k runs as an
  FP8 dot (``fp8_qk_dot``; both operands are K-major as loaded, which FP8 wgmma needs) or on q and k widened to fp16;
  v is widened to fp16 for the PV dot (FP8 wgmma would need v K-major, i.e. stored transposed). The q and k scales
  fold into the score multiplier, v's into the output's. Half the bytes of each K/V tile: ~0.38 against ~0.49 ms
  per layer at BERT-large's lengths on an H200 (documentation/notes/journal/2026-11-22.md).
- **Output** 16-bit, or 8-bit for an 8-bit output projection (``out_q_scale``): e4m3
  ``clamp(o * (1 / out_q_scale), -448, 448)``, or int8 rounded half to even within +-127 (``out_q_dtype``, an INT8
  engine): one multiply, clamp and cast at the store, the same arithmetic as ``kernels.TritonOps.quantize`` (the
  separate pass it replaces), from the float32 output (no 16-bit rounding first). Rows past ``cu_seqlens[-1]``
  (padding) are never read as queries nor written, as with FA2.

The best tile shape cannot be chosen on paper (occupancy vs. masked waste vs. pipelining): ``DEFAULT_CONFIG`` is the
guess; ``tune`` (``code/bert/packed/tuning.py``) times ``CANDIDATE_CONFIGS`` on a realistic packed batch, and the
model keeps the fastest as its own (``PackedBert.attention_config``: one per instance, so two models on two GPUs
never overwrite each other's). The packed runner tunes once at engine load, before any CUDA graph is captured (no
``@triton.autotune``: it would time inside graph capture or on empty warm-up batches). ``reference_attention`` is
the float32 torch definition the kernel is tested against (tests/bert/test_attention.py in Triton's CPU interpreter,
scripts/gpu/check_attention.py on a GPU).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

from code.numerics.int8 import INT8, quantize_int8

E4M3 = torch.float8_e4m3fn
LOG2E = 1.4426950408889634


class AttentionConfig(NamedTuple):
    """One launch shape of the kernel. ``q_bias_in_scores``: with a bias, add q's bias as ``b_q . k_j`` to the scores
    (True) or to q as it is loaded (False). ``prefetch_kv``: first ask L2 for all of the sequence's K/V rows (PTX
    ``prefetch.global.L2``; not in Triton's CPU interpreter). See the module docstring."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    q_bias_in_scores: bool = True
    prefetch_kv: bool = False

    def __str__(self) -> str:
        where = "scores" if self.q_bias_in_scores else "load"
        prefetch = "/prefetch" if self.prefetch_kv else ""
        return f"M{self.block_m}/N{self.block_n}/w{self.num_warps}/s{self.num_stages}/qbias-{where}{prefetch}"


# 64-row query tiles (one warpgroup, 4 warps) waste the least work on ~170-token sequences; 64 keys per step keeps
# the masked tail short; two stages overlap the next K/V load with the current block's math and leave room for
# 4 programs per SM (<= 120 registers, 43 KB shared memory with a bias: ptxas for sm_90a).
DEFAULT_CONFIG = AttentionConfig(64, 64, 4, 2)
CANDIDATE_CONFIGS: list[AttentionConfig] = [
    DEFAULT_CONFIG,
    AttentionConfig(64, 64, 4, 2, prefetch_kv=True),
    AttentionConfig(64, 64, 4, 3),  # loads two blocks ahead; 59 KB shared memory: 3 programs per SM
    AttentionConfig(64, 64, 4, 3, prefetch_kv=True),
    AttentionConfig(64, 64, 4, 2, q_bias_in_scores=False),  # q from registers: 140 registers, 3 programs per SM
    AttentionConfig(64, 32, 4, 3),  # shorter masked tail, twice the iterations
    AttentionConfig(128, 64, 8, 2, prefetch_kv=True),  # FA-style: 2 warpgroups share K/V tiles; more masked rows
    AttentionConfig(128, 64, 8, 3),
]
# Not candidates, because each is slower than M64/N64/w4/s2 with prefetch at BERT's lengths: 128-key tiles (4 or 8
# warps), one stage, one program per (sequence, head) looping over its query blocks, and a persistent grid striding
# over (sequence, head) pairs (timings: documentation/notes/journal/2026-11-22.md, "Figures behind code comments").


@triton.jit
def _attend_block(
    q,
    k,
    v,
    acc,
    m_i,
    l_i,
    qk_scale,
    valid,
    bq_mat,
    BLOCK_N: tl.constexpr,
    MASK: tl.constexpr,
    Q_BIAS_IN_SCORES: tl.constexpr,
):
    """One K/V block of the online softmax. ``m_i`` is the running row max of the log2-scaled scores, ``l_i`` the
    running sum of ``exp2(score - m_i)``, ``acc`` the running unnormalized output. ``MASK``: keys >= ``valid`` are
    past the sequence's end (scores -inf; at least one key is valid, so no row's max is -inf).
    ``Q_BIAS_IN_SCORES``: add ``c_j = b_q . k_j`` to every row's scores; ``c`` is column 0 of ``k @ bq_mat`` (b_q in
    column 0, zeros elsewhere: the narrowest wgmma, N=16), which Triton folds into the QK dot as its accumulator."""
    s = tl.dot(q, tl.trans(k))
    if Q_BIAS_IN_SCORES:
        s += tl.sum(tl.dot(k, bq_mat), 1)[None, :]
    if MASK:
        s = tl.where(tl.arange(0, BLOCK_N)[None, :] < valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _widen_kv(k, v, QKV_FP8: tl.constexpr, QK_FP8_DOT: tl.constexpr):
    """e4m3 K/V tiles to fp16 for the 16-bit dots (K stays e4m3 for an FP8 q.k dot); 16-bit tiles as they are."""
    if QKV_FP8:
        v = v.to(tl.float16)
        if not QK_FP8_DOT:
            k = k.to(tl.float16)
    return k, v


@triton.jit
def _prefetch_rows(base, rows, stride, LINES: tl.constexpr):
    """``prefetch.global.L2`` of ``LINES`` 128-byte lines (64 16-bit values each) of each row in ``rows``: a hint
    that holds no registers and that nothing waits for."""
    ptrs = base + rows[:, None] * stride + tl.arange(0, LINES)[None, :] * 64
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _varlen_attention_kernel(
    qkv_ptr,
    bias_ptr,
    cu_ptr,
    out_ptr,
    stride_qkv,
    stride_out,
    qk_scale,
    v_scale,
    inv_out_scale,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    Q_BIAS_IN_SCORES: tl.constexpr,
    OUT_Q: tl.constexpr,
    OUT_INT8: tl.constexpr,
    PREFETCH_KV: tl.constexpr,
    QKV_FP8: tl.constexpr,
    QK_FP8_DOT: tl.constexpr,
):
    m_block = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    start = tl.load(cu_ptr + seq)
    seqlen = tl.load(cu_ptr + seq + 1) - start
    if m_block * BLOCK_M >= seqlen:  # past the end of this sequence (or an empty one): nothing to do
        return

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # int64 only in the sequence's base offset; offsets inside one sequence (< 384 rows x stride) fit in int32
    q_base = qkv_ptr + start.to(tl.int64) * stride_qkv + head * HEAD_DIM
    k_base = q_base + NUM_HEADS * HEAD_DIM
    v_base = k_base + NUM_HEADS * HEAD_DIM
    if PREFETCH_KV:  # all of the sequence's K/V rows towards L2 before q's load, so the loop's loads hit L2
        for r in range(0, seqlen, 128):
            rows = tl.minimum(r + tl.arange(0, 128), seqlen - 1)
            _prefetch_rows(k_base, rows, stride_qkv, (HEAD_DIM + 63) // 64)
            _prefetch_rows(v_base, rows, stride_qkv, (HEAD_DIM + 63) // 64)
    row_ok = offs_m < seqlen
    q = tl.load(q_base + offs_m[:, None] * stride_qkv + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if QKV_FP8 and not QK_FP8_DOT:  # e4m3 values are exact in fp16: the dots see the GEMM's rounding only
        q = q.to(tl.float16)
    dtype = tl.float16 if QKV_FP8 else qkv_ptr.dtype.element_ty
    bq_mat = tl.zeros([HEAD_DIM, 16], dtype=dtype)  # unused unless Q_BIAS_IN_SCORES
    if HAS_BIAS:
        b_q = tl.load(bias_ptr + head * HEAD_DIM + offs_d)
        if Q_BIAS_IN_SCORES:
            bq_mat = tl.where(tl.arange(0, 16)[None, :] == 0, b_q[:, None], bq_mat)
        else:  # q + b_q rounded to 16 bits, as the GEMM would have stored it; q then feeds wgmma from registers
            q = (q.to(tl.float32) + b_q.to(tl.float32)[None, :]).to(dtype)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    kv_offs = offs_n[:, None] * stride_qkv + offs_d[None, :]
    n_full = (seqlen // BLOCK_N) * BLOCK_N
    for n in tl.range(0, n_full, BLOCK_N):
        k = tl.load(k_base + n * stride_qkv + kv_offs)
        v = tl.load(v_base + n * stride_qkv + kv_offs)
        k, v = _widen_kv(k, v, QKV_FP8, QK_FP8_DOT)
        acc, m_i, l_i = _attend_block(
            q, k, v, acc, m_i, l_i, qk_scale, BLOCK_N, bq_mat, BLOCK_N, False, Q_BIAS_IN_SCORES
        )
    if n_full < seqlen:  # the partial last block: masked loads (never past the sequence) and masked scores
        valid = seqlen - n_full
        kv_ok = offs_n[:, None] < valid
        k = tl.load(k_base + n_full * stride_qkv + kv_offs, mask=kv_ok, other=0.0)
        v = tl.load(v_base + n_full * stride_qkv + kv_offs, mask=kv_ok, other=0.0)
        k, v = _widen_kv(k, v, QKV_FP8, QK_FP8_DOT)
        acc, m_i, l_i = _attend_block(q, k, v, acc, m_i, l_i, qk_scale, valid, bq_mat, BLOCK_N, True, Q_BIAS_IN_SCORES)

    o = acc * (v_scale / l_i)[:, None]
    if HAS_BIAS:  # v's bias: the probabilities of a row sum to 1
        b_v = tl.load(bias_ptr + 2 * NUM_HEADS * HEAD_DIM + head * HEAD_DIM + offs_d).to(tl.float32)
        o += b_v[None, :]
    out_ptrs = out_ptr + start.to(tl.int64) * stride_out + head * HEAD_DIM + offs_m[:, None] * stride_out + offs_d
    if OUT_INT8:
        tl.store(out_ptrs, quantize_int8(o, inv_out_scale), mask=row_ok[:, None])
    elif OUT_Q:
        o = tl.minimum(tl.maximum(o * inv_out_scale, -448.0), 448.0)
        tl.store(out_ptrs, o.to(tl.float8e4nv), mask=row_ok[:, None])
    else:
        tl.store(out_ptrs, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def _check(qkv: Tensor, cu_seqlens: Tensor, num_heads: int) -> int:
    if qkv.dim() != 2 or qkv.dtype not in (torch.float16, torch.bfloat16, E4M3) or qkv.stride(1) != 1:
        raise ValueError(
            f"qkv must be a row-major fp16/bf16/e4m3 [T, 3*H*D] matrix, got {qkv.dtype} {tuple(qkv.shape)}"
        )
    head_dim, rest = divmod(qkv.shape[1], 3 * num_heads)
    if rest or head_dim < 16 or head_dim > 128 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim {qkv.shape[1]}/(3*{num_heads}) must be a power of two in 16..128")
    if cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 or cu_seqlens.device != qkv.device:
        raise ValueError("cu_seqlens must be int32 [B+1] on qkv's device")
    return head_dim


def varlen_attention(
    qkv: Tensor,
    cu_seqlens: Tensor,
    max_len: int,
    scale: float,
    num_heads: int,
    qkv_bias: Tensor | None = None,
    out: Tensor | None = None,
    out_q_scale: float | None = None,
    config: AttentionConfig | None = None,
    qkv_scales: tuple[float, float, float] | None = None,
    fp8_qk_dot: bool = False,
    out_q_dtype: torch.dtype = E4M3,
) -> Tensor:
    """softmax(q k^T * scale) v for each packed sequence of the fused QKV GEMM output.

    ``qkv``: fp16/bf16 ``[T, 3*H*D]`` (row ``t`` is ``qkv.view(T, 3, H, D)[t]``); ``cu_seqlens``: int32 ``[B+1]`` on
    the device, sequence ``b`` is rows ``cu[b]:cu[b+1]`` (may be empty); ``max_len``: an upper bound of the lengths
    (sets the grid; rows of a longer sequence past ``max_len`` would be left unwritten). ``qkv_bias``: ``[3*H*D]``
    added to q, k, v (see the module docstring for how). Returns ``out`` or a new ``[T, H*D]`` tensor: qkv's dtype,
    or, when ``out_q_scale`` is given, ``o / out_q_scale`` in ``out_q_dtype``: e4m3 (saturated to +-448) or int8
    (rounded half to even, saturated to +-127: ``code.numerics.int8.quantize``). Rows past ``cu_seqlens[-1]``
    are not written (a new output's are uninitialized). ``config``: tile shape (the caller's model keeps the one
    ``tuning.tune`` chose); default ``DEFAULT_CONFIG``. No host sync: safe inside CUDA graph capture once compiled.

    e4m3 ``qkv`` (an FP8 QKV GEMM's output, bias added in its epilogue): ``qkv_scales`` = (q, k, v) dequantization
    scales, no ``qkv_bias``; the tiles are widened to fp16 for both dots, or q.k runs as an FP8 dot
    (``fp8_qk_dot``); a 16-bit output is fp16.
    """
    head_dim = _check(qkv, cu_seqlens, num_heads)
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")  # the kernel scales row maxima by it
    qkv_fp8 = qkv.dtype == E4M3
    if qkv_fp8 != (qkv_scales is not None):
        raise ValueError("qkv_scales go with an e4m3 qkv and only with it")
    if qkv_fp8 and qkv_bias is not None:
        raise ValueError("an e4m3 qkv carries its bias already (the GEMM's epilogue adds it): pass no qkv_bias")
    if fp8_qk_dot and not qkv_fp8:
        raise ValueError("fp8_qk_dot needs an e4m3 qkv")
    if out_q_dtype not in (E4M3, INT8):
        raise ValueError(f"out_q_dtype={out_q_dtype}: an 8-bit output is e4m3 or int8")
    sq, sk, sv = qkv_scales or (1.0, 1.0, 1.0)
    width = num_heads * head_dim
    out_dtype = out_q_dtype if out_q_scale else (torch.float16 if qkv_fp8 else qkv.dtype)
    if out is None:
        out = torch.empty((qkv.shape[0], width), dtype=out_dtype, device=qkv.device)
    elif out.shape != (qkv.shape[0], width) or out.dtype != out_dtype or out.stride(1) != 1:
        raise ValueError(f"out must be row-major {out_dtype} [{qkv.shape[0]}, {width}], got {out.dtype} {out.shape}")
    if qkv_bias is not None and (qkv_bias.numel() != 3 * width or not qkv_bias.is_contiguous()):
        raise ValueError(f"qkv_bias must be a contiguous [{3 * width}] vector")
    cfg = config or DEFAULT_CONFIG
    batch = cu_seqlens.shape[0] - 1
    if batch <= 0 or qkv.shape[0] == 0 or max_len <= 0:
        return out
    grid = (triton.cdiv(max_len, cfg.block_m), batch, num_heads)
    _varlen_attention_kernel[grid](
        qkv,
        qkv_bias if qkv_bias is not None else qkv,
        cu_seqlens,
        out,
        qkv.stride(0),
        out.stride(0),
        scale * LOG2E * sq * sk,
        sv,
        1.0 / out_q_scale if out_q_scale else 1.0,
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        HAS_BIAS=qkv_bias is not None,
        Q_BIAS_IN_SCORES=qkv_bias is not None and cfg.q_bias_in_scores,
        OUT_Q=bool(out_q_scale),
        OUT_INT8=bool(out_q_scale) and out_q_dtype == INT8,
        PREFETCH_KV=cfg.prefetch_kv,
        QKV_FP8=qkv_fp8,
        QK_FP8_DOT=fp8_qk_dot,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out


def reference_attention(
    qkv: Tensor,
    cu_seqlens: Tensor,
    scale: float,
    num_heads: int,
    qkv_bias: Tensor | None = None,
    qkv_scales: tuple[float, float, float] | None = None,
) -> Tensor:
    """The definition, in float32: bias added (or an e4m3 ``qkv`` dequantized with ``qkv_scales``), then one
    ``scaled_dot_product_attention`` per sequence. Returns float32 ``[T, H*D]``; rows of no sequence are zero."""
    rows = qkv.shape[0]
    head_dim = qkv.shape[1] // (3 * num_heads)
    x = qkv.float()
    if qkv_bias is not None:
        x = x + qkv_bias.float()
    if qkv_scales is not None:
        part_scales = torch.tensor(qkv_scales, dtype=torch.float32, device=qkv.device)
        x = (x.view(rows, 3, -1) * part_scales[:, None]).view(rows, -1)
    q, k, v = x.view(rows, 3, num_heads, head_dim).unbind(1)
    out = torch.zeros(rows, num_heads, head_dim, dtype=torch.float32, device=qkv.device)
    cu = cu_seqlens.tolist()
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        if end > start:
            qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))
            out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, scale=scale)[0].transpose(0, 1)
    return out.view(rows, num_heads * head_dim)


def packed_batch(
    lengths: list[int],
    num_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int = 0,
    pad_rows: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """A random packed batch: (qkv ``[T + pad_rows, 3*H*D]``, cu_seqlens int32, qkv_bias ``[3*H*D]``). Values are
    O(1) like BERT's q/k/v; the bias is O(0.5)."""
    g = torch.Generator(device=device).manual_seed(seed)
    total = sum(lengths)
    width = 3 * num_heads * head_dim
    qkv = torch.randn(total + pad_rows, width, generator=g, device=device).to(dtype)
    bias = (0.5 * torch.randn(width, generator=g, device=device)).to(dtype)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return qkv, cu, bias


__all__ = [
    "CANDIDATE_CONFIGS",
    "DEFAULT_CONFIG",
    "AttentionConfig",
    "packed_batch",
    "reference_attention",
    "varlen_attention",
]
