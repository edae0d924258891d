# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""Attention for the in-flight engine: prefill over packed prompts, decode over the shared-prompt KV cache.

Decode, for every beam row (s, b) and head: softmax over the prompt's keys (slot s's pages) and the beam's own
generated keys (through the ancestry table), in float32. On CUDA two Triton kernels do it:

1. ``_prompt_kernel``, one program per (slot, head): the slot's 4 beam queries go through the prompt pages
   together as one ``[16, head_dim]`` tile (rows 4-15 zero), so each prompt key and value is read **once for all
   beams**, the point of sharing the prompt (the prompt is ~90% of the keys a decode step reads). It leaves each
   beam's online-softmax state (max, sum, weighted values) in float32.
2. ``_generated_kernel``, one program per (beam row, head): continues that state over the beam's generated tokens,
   reading row ``ancestry[s, b, t]`` at column t, and writes the normalised output.

With an FP8 cache both kernels load e4m3 keys and values and widen them in registers (the prompt kernel to fp16,
one conversion instruction per pair where bf16 takes two, so its queries go to fp16 too: GPT-J's stay far inside
fp16's range; the generated-token kernel to float32); the layer's key scale is folded into the score scale and its
value scale into the final normalisation.

Elsewhere (CPU runs, tests) ``decode_attention_reference`` computes the same thing in plain PyTorch with HF's
operation order; ``scripts/gpu/check_gptj_inflight.py`` compares the two on the GPU.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from code.gptj.inflight.kv_cache import KVCache

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the reference path runs instead
    triton = None

BEAM_TILE = 16  # tl.dot needs at least 16 rows: the 4 beams of a slot, padded
# The kernels' launch settings; scripts/gpu time the choices. The prompt kernel loads PROMPT_TILE_BYTES of keys
# (and as many of values) per iteration: 64 keys of a 16-bit cache, 128 of an FP8 one; a "KEYS" entry in
# PROMPT_LAUNCH (a power of two) overrides that.
PROMPT_TILE_BYTES = 32768
PROMPT_LAUNCH: dict[str, int] = {"num_warps": 4, "num_stages": 2}
GENERATED_LAUNCH = {"TILE": 64, "num_warps": 4}


def prefill_attention(q: Tensor, k: Tensor, v: Tensor, lengths: list[int], cu_seqlens: Tensor) -> Tensor:
    """Causal attention of packed prompts ``[tokens, heads, head_dim]`` (sample i holds rows cu[i]..cu[i+1]).

    CUDA: FlashAttention-2's varlen kernel through torch (one launch for all prompts). Elsewhere: each prompt
    alone, scores in float32 as the reference model computes them."""
    if q.is_cuda:
        longest = max(lengths)
        out = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_seqlens, cu_seqlens, longest, longest, 0.0, True, False, scale=1.0 / math.sqrt(q.shape[-1])
        )[0]
        return out
    outputs = []
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):
        qs, ks, vs = (t[start:end].transpose(0, 1).float() for t in (q, k, v))
        scores = torch.matmul(qs, ks.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        n = end - start
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, torch.finfo(torch.float32).min)
        outputs.append(torch.matmul(scores.softmax(dim=-1).to(v.dtype), vs.to(v.dtype)).transpose(0, 1))
    return torch.cat(outputs)


def decode_attention(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor) -> Tensor:
    """Attention of one new token per beam row. ``q [slots * beams, heads, head_dim]``; ``gen_count [slots]``:
    generated tokens whose keys are in the cache, the current one included (at least 1 is read, so free slots
    stay finite). Returns ``[slots * beams, heads, head_dim]`` in q's dtype."""
    if q.is_cuda and triton is not None:
        return _decode_attention_triton(q, cache, layer, ancestry, gen_count)
    return decode_attention_reference(q, cache, layer, ancestry, gen_count)


def decode_attention_reference(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor) -> Tensor:
    """The definition: gather each beam's keys and values, softmax in float32 (q·k, then / sqrt(d), as HF)."""
    slots, beams = ancestry.shape[:2]
    heads, head_dim = q.shape[1:]
    page = cache.shape.page_size
    lengths, counts = cache.prompt_lengths.tolist(), gen_count.clamp(min=1).tolist()
    out = torch.empty_like(q)
    for s in range(slots):
        n, g = lengths[s], counts[s]
        pages = cache.block_table[s, : math.ceil(n / page)].long()
        kp = cache.prompt_k[layer, pages].reshape(-1, heads, head_dim)[:n]
        vp = cache.prompt_v[layer, pages].reshape(-1, heads, head_dim)[:n]
        columns = torch.arange(g, device=q.device)
        k_scale, v_scale = cache.k_scale[layer], cache.v_scale[layer]
        for b in range(beams):
            rows = ancestry[s, b, :g].long()
            k = cache.read(torch.cat((kp, cache.gen_k[layer, s, rows, columns])), k_scale).float()
            v = cache.read(torch.cat((vp, cache.gen_v[layer, s, rows, columns])), v_scale)  # [keys, heads, dim]
            query = q[s * beams + b].float()  # [heads, head_dim]
            scores = torch.einsum("hd,khd->hk", query, k) / math.sqrt(head_dim)
            probs = scores.softmax(dim=-1).to(v.dtype)
            out[s * beams + b] = torch.einsum("hk,khd->hd", probs, v).to(q.dtype)
    return out


def _decode_attention_triton(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor) -> Tensor:
    rows, heads, head_dim = q.shape
    slots, beams = ancestry.shape[:2]
    if beams > BEAM_TILE:
        raise ValueError(f"the decode kernel takes at most {BEAM_TILE} beams, not {beams}")
    pk, pv = cache.prompt_k[layer], cache.prompt_v[layer]
    gk, gv = cache.gen_k[layer], cache.gen_v[layer]
    state_max = torch.empty((rows, heads), dtype=torch.float32, device=q.device)
    state_sum = torch.empty_like(state_max)
    state_acc = torch.empty((rows, heads, head_dim), dtype=torch.float32, device=q.device)
    out = torch.empty_like(q)
    scale_log2 = 1.0 / math.sqrt(head_dim) * 1.4426950408889634 * cache.k_scale[layer]
    _prompt_kernel[(slots, heads)](
        q, pk, pv, cache.block_table, cache.prompt_lengths, state_max, state_sum, state_acc,
        q.stride(0), q.stride(1), pk.stride(0), pk.stride(1), pk.stride(2), cache.block_table.stride(0),
        scale_log2, BEAMS=beams, BEAM_TILE=BEAM_TILE, HEAD_DIM=head_dim, PAGE=cache.shape.page_size,
        F16=cache.is_fp8, **{"KEYS": PROMPT_TILE_BYTES // (head_dim * pk.element_size()), **PROMPT_LAUNCH},
    )
    _generated_kernel[(rows, heads)](
        q, gk, gv, ancestry, gen_count, state_max, state_sum, state_acc, out,
        q.stride(0), q.stride(1), gk.stride(0), gk.stride(1), gk.stride(2), gk.stride(3), ancestry.stride(0),
        ancestry.stride(1), out.stride(0), out.stride(1),
        scale_log2, cache.v_scale[layer], BEAMS=beams, HEAD_DIM=head_dim, **GENERATED_LAUNCH,
    )
    return out


if triton is not None:

    @triton.jit
    def _prompt_kernel(
        q_ptr, k_ptr, v_ptr, table_ptr, length_ptr, max_ptr, sum_ptr, acc_ptr,
        stride_q_row, stride_q_head, stride_k_page, stride_k_pos, stride_k_head, stride_table,
        scale_log2, BEAMS: tl.constexpr, BEAM_TILE: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
        F16: tl.constexpr, KEYS: tl.constexpr,
    ):
        slot = tl.program_id(0)
        head = tl.program_id(1)
        beam = tl.arange(0, BEAM_TILE)
        dim = tl.arange(0, HEAD_DIM)
        key = tl.arange(0, KEYS)
        row = slot * BEAMS + beam
        live = beam < BEAMS
        q = tl.load(q_ptr + row[:, None] * stride_q_row + head * stride_q_head + dim[None, :], mask=live[:, None],
                    other=0.0)
        if F16:
            q = q.to(tl.float16)
        m = tl.full([BEAM_TILE], float("-inf"), tl.float32)
        s = tl.zeros([BEAM_TILE], tl.float32)
        acc = tl.zeros([BEAM_TILE, HEAD_DIM], tl.float32)
        n = tl.load(length_ptr + slot)
        for first in range(0, n, KEYS):
            position = first + key  # each key finds its page: a tile may span pages or be part of one
            valid = position < n
            page = tl.load(table_ptr + slot * stride_table + position // PAGE, mask=valid, other=0).to(tl.int64)
            offsets = (page[:, None] * stride_k_page + (position % PAGE)[:, None] * stride_k_pos
                       + head * stride_k_head + dim[None, :])
            k = tl.load(k_ptr + offsets, mask=valid[:, None], other=0.0).to(q.dtype)
            v = tl.load(v_ptr + offsets, mask=valid[:, None], other=0.0).to(q.dtype)
            scores = tl.dot(q, tl.trans(k)) * scale_log2
            scores = tl.where(valid[None, :], scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(scores - m_new[:, None])
            s = s * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        heads = tl.num_programs(1)
        tl.store(max_ptr + row * heads + head, m, mask=live)
        tl.store(sum_ptr + row * heads + head, s, mask=live)
        tl.store(acc_ptr + (row[:, None] * heads + head) * HEAD_DIM + dim[None, :], acc, mask=live[:, None])

    @triton.jit
    def _generated_kernel(
        q_ptr, k_ptr, v_ptr, ancestry_ptr, count_ptr, max_ptr, sum_ptr, acc_ptr, out_ptr,
        stride_q_row, stride_q_head, stride_g_slot, stride_g_beam, stride_g_col, stride_g_head,
        stride_a_slot, stride_a_beam, stride_o_row, stride_o_head,
        scale_log2, v_scale, BEAMS: tl.constexpr, HEAD_DIM: tl.constexpr, TILE: tl.constexpr,
    ):
        row = tl.program_id(0)
        head = tl.program_id(1)
        heads = tl.num_programs(1)
        slot = row // BEAMS
        beam = row % BEAMS
        dim = tl.arange(0, HEAD_DIM)
        col = tl.arange(0, TILE)
        q = tl.load(q_ptr + row * stride_q_row + head * stride_q_head + dim).to(tl.float32)
        m = tl.load(max_ptr + row * heads + head)
        s = tl.load(sum_ptr + row * heads + head)
        acc = tl.load(acc_ptr + (row * heads + head) * HEAD_DIM + dim)
        g = tl.maximum(tl.load(count_ptr + slot), 1)
        for first in range(0, g, TILE):
            cols = first + col
            ok = cols < g
            src = tl.load(ancestry_ptr + slot * stride_a_slot + beam * stride_a_beam + cols, mask=ok, other=0)
            offsets = (slot.to(tl.int64) * stride_g_slot + src[:, None] * stride_g_beam + cols[:, None] * stride_g_col
                       + head * stride_g_head + dim[None, :])
            k = tl.load(k_ptr + offsets, mask=ok[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_ptr + offsets, mask=ok[:, None], other=0.0).to(tl.float32)
            scores = tl.sum(q[None, :] * k, axis=1) * scale_log2
            scores = tl.where(ok, scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=0))
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(scores - m_new)
            s = s * alpha + tl.sum(p, axis=0)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            m = m_new
        tl.store(out_ptr + row * stride_o_row + head * stride_o_head + dim,
                 (acc * (v_scale / s)).to(out_ptr.dtype.element_ty))
