# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""Attention for the in-flight engine: prefill over packed prompts, decode over the shared-prompt KV cache.

Decode, for every beam row (s, b) and query head: softmax over the prompt's keys (slot s's pages) and the beam's own
generated keys (through the ancestry table), in float32. With grouped-query attention (Llama 3.1: more query heads
than the cache holds) query head h reads key/value head h // GROUP, GROUP = q_heads // kv_heads (HF's
``repeat_kv``). On CUDA one Triton kernel, ``_decode_kernel``, does it with one program per (slot, HEADS key/value
heads), ``HEADS = DECODE_LAUNCH["HEADS"]``:

1. The program's query rows, the slot's beams x the GROUP x HEADS query heads of its key/value heads (row
   r = beam r // (GROUP x HEADS), query head r % (GROUP x HEADS) of the program's), go through the prompt pages
   together as one tile of at least 16 rows (``tl.dot``'s minimum; padding rows zero), so each prompt key and value
   is read **once for all beams and query heads that read it**, the point of sharing the prompt (the prompt is
   ~90% of the keys a decode step reads). GPT-J (4 beams, GROUP 1) at HEADS 1 fills 4 of the 16 rows; at HEADS 4
   all 16, and every tile's fixed work (online softmax over ``[16, KEYS]``, page-table gather) then serves 4 heads:
   that fixed work, not the bytes, bounds the one-head kernel. Llama 3.1 8B (1 beam, GROUP 4) fills 16 rows at
   HEADS 4.
2. With HEADS > 1 a tile's scores are, for each head j, a dot of all query rows with head j's keys, of which each
   row keeps its own head's (block-diagonal: the MMA work of HEADS one-head programs); the values take each head's
   rows' probabilities alone, so the accumulator stays ``[rows, head_dim]``. A row's GROUP query heads share their
   key/value head's keys unmasked.
3. The same online softmax continues over the generated tokens: a tile holds a few columns of each beam (column t
   of beam b is row ``ancestry[s, b, t]``'s), and each query row masks the other beams' columns, so both loops run
   one tile shape and the state never leaves registers.

With ``DECODE_LAUNCH["SPLITS"] > 1`` (TensorRT-LLM's multi-block mode) each (slot, heads) gets that many programs,
so a step of few slots still fills the GPU and each program's chain of dependent loads is shorter:
``_decode_split_kernel`` gives split i an equal run of the prompt in whole pages and key tiles (the last splits
may get none) and the generated tokens to the last split, and writes each (beam row, query head)'s partial state
(running max, sum, unnormalised accumulator; float32) to a workspace; ``_merge_kernel`` combines the partials by
log-sum-exp and normalises. A split with no keys writes nothing and the merge skips it by the same rule
(``_split_range``). SPLITS and HEADS combine freely. A model's launch states SPLITS for many slots; the engine
raises it for an engine of few slots (``decode_launch_for``: about two programs an SM).

Head dimensions go in two halves (two dots per product), which halves the registers a widened tile takes. With an
FP8 cache the kernel loads e4m3 keys and values and widens them to fp16 in registers (one conversion instruction
per pair where bf16 takes two, so the queries go to fp16 too: GPT-J's stay far inside fp16's range); the layer's
key scale is folded into the score scale and its value scale into the final normalisation.

With an FP8 cache of a shape it is built for, on a GPU of compute capability 9.0 or newer, a CUDA kernel runs instead
(``code/llm/cuda/paged_decode_fp8.cu``, built by nvcc and loaded by ``code/llm/cuda_decode.py``): one block of
warps per (slot, key/value head, split), each warp streaming tiles of 16 keys through shared memory with
asynchronous copies, scores and values on ``mma.sync`` in layouts where each e4m3 byte is converted once and the
scores' accumulator is the values' operand as it stands (its header says how). The engine chooses it
(``kernel_launch``); a launch with ``CUDA``: 1 runs it. Where it cannot be built or loaded a warning names the
fix and the Triton kernel runs.

Elsewhere (CPU runs, tests) ``decode_attention_reference`` computes the same thing in plain PyTorch with HF's
operation order; ``scripts/gpu/check_gptj_inflight.py`` and ``scripts/gpu/check_llama_inflight.py`` compare the
two on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from code.llm.kv_cache import KVCache

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the reference path runs instead
    triton = None

ROW_TILE = 16  # tl.dot needs at least 16 rows: a program's query rows (beams x query heads), padded to this
MAX_ROWS = 64  # the most query rows one program takes: its accumulator is [rows, head_dim] float32 in registers
# The kernel's launch settings; scripts/gpu/check_gptj_inflight.py times the choices. KEYS keys of the prompt per
# iteration; the generated part takes KEYS // beams columns of each beam per iteration (beams rounded up to a power
# of two), so both loops run the same tile shape. SPLITS: programs per (slot, group of heads), each over its own
# run of the prompt (1: ``_decode_kernel``; more: ``_decode_split_kernel`` then ``_merge_kernel``). HEADS: key/value
# heads per program (1: one program per (slot, head); more: one softmax and one page-table gather for that many
# heads' keys, their query rows filling the tile); it must divide the cache's head count.
# The default is GPT-J's (16 heads of 256, 4 beams, FP8 cache): two heads a program read the cache 1.23x as fast as
# one (measured: decode-heads-2026-11-28); a model of another shape passes its own (``decode_attention``'s launch).
# An FP8 cache of a shape the CUDA kernel is built for takes that kernel instead (``kernel_launch``).
DECODE_LAUNCH: dict[str, int] = {"KEYS": 32, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 2}
# The CUDA kernel's launch (``CUDA``: 1 marks it) at many slots, for GPT-J's and Llama 3.1 8B's shapes alike: 4
# warps a block, 3 tile buffers a warp, BLOCKS 1 (no register cap: a cap of 4 blocks an SM spills at GPT-J's head_dim
# 256, x0.70), ORDER 1 (the grid runs over a slot's heads first, so blocks side by side read adjacent bytes of each
# key row; 0: slots first, x0.97-0.99), one split (two: x0.82 at GPT-J's shape, x0.77 at Llama's). KEYS is its
# tile, which the split rule aligns to. 1.49x the Triton kernel's speed at GPT-J's shape, 4.0 TB/s, and 1.36-1.46x
# at Llama's (measured: cuda-decode-2026-11-29).
CUDA_LAUNCH: dict[str, int] = {"CUDA": 1, "KEYS": 16, "num_warps": 4, "num_stages": 3, "BLOCKS": 1, "ORDER": 1,
                               "SPLITS": 1}
# The split rule (``decode_launch_for``) aims at this many decode programs per SM: a program is one chain of
# dependent loads, so an SM needs a few at once to hide their latency, and two waves' worth keep every SM busy.
PROGRAMS_PER_SM = 2


def kernel_launch(base: Mapping[str, int], cache: KVCache, device: torch.device, *, group: int,
                  dtype: torch.dtype) -> dict[str, int]:
    """The launch a model's decode steps run before the split rule (``decode_launch_for``): ``CUDA_LAUNCH`` where
    the CUDA kernel serves the cache on this GPU (``cuda_decode.serves``: an FP8 cache of a shape it is built for,
    queries of ``dtype`` with ``group`` query heads a key/value head, and the kernel built and loaded), else
    ``base``, the model's Triton launch."""
    if device.type == "cuda" and cache.is_fp8:
        from code.llm import cuda_decode

        shape = cache.shape
        if cuda_decode.serves(device, shape.head_dim, shape.beams, group, dtype, shape.page_size):
            return dict(CUDA_LAUNCH)
    return dict(base)


def head_groups(launch: Mapping[str, int], cache: KVCache) -> int:
    """The programs a slot's decode step with ``launch`` (``kernel_launch``'s) runs before splits: one per
    key/value head for the CUDA kernel, one per HEADS heads for the Triton kernel."""
    if launch.get("CUDA"):
        return cache.shape.heads
    return cache.shape.heads // launch.get("HEADS", 1)


def decode_launch_for(slots: int, head_groups: int, sm_count: int, base: Mapping[str, int], *,
                      prompt_tokens: int, page_size: int) -> dict[str, int]:
    """``base`` (a model's configured launch) with SPLITS raised so a decode step of ``slots`` slots fills a GPU
    of ``sm_count`` SMs: the launch a CUDA graph (or eager step) serving that many slots runs.

    Why: the grid is (slots, head_groups, SPLITS) programs whatever the GPU, so a launch tuned at hundreds of slots
    leaves most SMs idle at SingleStream's one slot (Llama 3.1 8B: 2 x 2 programs on 132 SMs), and the step waits
    on a few long chains of loads instead of reading the cache at the GPU's bandwidth.

    The rule: the most splits that keep ``slots x head_groups x splits`` within ``PROGRAMS_PER_SM x sm_count``
    (about two programs an SM), at most as many as a typical prompt of ``prompt_tokens`` has whole blocks of the
    kernel's split alignment (``lcm(page_size, KEYS)``: each split then still reads at least one page and key
    tile of it), and never fewer than ``base``'s SPLITS, so a step of many slots keeps the tuned launch: Offline's
    and Server's hundreds, and 64 slots and more at Llama's and GPT-J's shapes on a GPU of fewer than 192 SMs
    (H200: 132, B200: 148). ``sm_count`` 0 (no GPU: the reference path runs, which takes no launch) gives
    ``base``."""
    if slots < 1 or head_groups < 1 or sm_count < 0:
        raise ValueError(f"the split rule needs slots >= 1, head_groups >= 1 and sm_count >= 0, not {slots}, "
                         f"{head_groups}, {sm_count}")
    launch = dict(base)
    floor = launch.get("SPLITS", 1)
    align = math.lcm(page_size, launch["KEYS"])
    most = max(1, prompt_tokens // align)  # splits that each get a whole block of a typical prompt
    wanted = PROGRAMS_PER_SM * sm_count // (slots * head_groups)
    launch["SPLITS"] = max(floor, min(most, wanted))
    return launch


def prefill_attention(q: Tensor, k: Tensor, v: Tensor, lengths: list[int], cu_seqlens: Tensor) -> Tensor:
    """Causal attention of packed prompts ``[tokens, heads, head_dim]`` (sample i holds rows cu[i]..cu[i+1]).

    k and v may have fewer heads than q (grouped-query attention: q head h reads key/value head h // group);
    FlashAttention-2 takes them so natively.

    CUDA: FlashAttention-2's varlen kernel through torch (one launch for all prompts). Elsewhere: each prompt
    alone, scores in float32 as the reference model computes them."""
    if q.is_cuda:
        longest = max(lengths)
        out = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_seqlens, cu_seqlens, longest, longest, 0.0, True, False, scale=1.0 / math.sqrt(q.shape[-1])
        )[0]
        return out
    outputs = []
    group = q.shape[1] // k.shape[1]
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):
        qs, ks, vs = (t[start:end].transpose(0, 1).float() for t in (q, k, v))
        ks, vs = ks.repeat_interleave(group, dim=0), vs.repeat_interleave(group, dim=0)  # HF's repeat_kv
        scores = torch.matmul(qs, ks.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        n = end - start
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, torch.finfo(torch.float32).min)
        outputs.append(torch.matmul(scores.softmax(dim=-1).to(v.dtype), vs.to(v.dtype)).transpose(0, 1))
    return torch.cat(outputs)


def decode_attention(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor,
                     launch: Mapping[str, int] | None = None) -> Tensor:
    """Attention of one new token per beam row. ``q [slots * beams, q_heads, head_dim]``, q_heads a multiple of the
    cache's heads (grouped-query attention: query head h reads key/value head h // (q_heads // kv_heads), as HF's
    ``repeat_kv``); ``gen_count [slots]``: generated tokens whose keys are in the cache, the current one included
    (at least 1 is read, so free slots stay finite). ``launch``: the Triton kernel's settings (``DECODE_LAUNCH``'s
    keys; None: ``DECODE_LAUNCH``), or the CUDA kernel's (``CUDA_LAUNCH``'s, ``CUDA``: 1). Returns
    ``[slots * beams, q_heads, head_dim]`` in q's dtype."""
    settings = DECODE_LAUNCH if launch is None else launch
    if q.is_cuda and settings.get("CUDA"):
        return _decode_attention_cuda(q, cache, layer, ancestry, gen_count, settings)
    if q.is_cuda and triton is not None:
        return _decode_attention_triton(q, cache, layer, ancestry, gen_count, settings)
    return decode_attention_reference(q, cache, layer, ancestry, gen_count)


def query_group(q: Tensor, cache: KVCache, ancestry: Tensor) -> int:
    """The query heads that share each key/value head (1 without grouped-query attention). Raises ValueError for
    queries the cache cannot serve, before any kernel runs (a mismatch would otherwise read wrong memory)."""
    slots, beams = ancestry.shape[:2]
    if q.dim() != 3 or q.shape[0] != slots * beams or q.shape[2] != cache.shape.head_dim:
        raise ValueError(f"q must be [slots * beams = {slots * beams}, heads, head_dim = {cache.shape.head_dim}], "
                         f"not {list(q.shape)}")
    q_heads, kv_heads = q.shape[1], cache.shape.heads
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads cannot share the cache's {kv_heads} key/value heads: grouped-query "
                         f"attention needs a multiple of them")
    return q_heads // kv_heads


def decode_step(cache: KVCache, ancestry: Tensor, gen_count: Tensor, launch: Mapping[str, int] | None = None
                ) -> tuple[Tensor, Callable[[int, Tensor, Tensor, Tensor], Tensor]]:
    """One decode step of every beam row over ``cache``: each row's position (its prompt's length + its generated
    column, for the rotary embedding) and the attention a layer calls with its new q, k and v, which writes k and v
    at that column and attends (``decode_attention`` with ``launch``). No host synchronisation: the step is captured
    in a CUDA graph."""
    slots, beams = ancestry.shape[:2]
    column = (gen_count - 1).clamp(min=0)
    positions = (cache.prompt_lengths.long() + column)[:, None].expand(-1, beams).reshape(-1)
    rows = torch.arange(slots * beams, device=gen_count.device)
    columns = column[:, None].expand(-1, beams).reshape(-1)

    def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        cache.write_generated(layer, rows, columns, k, v)
        return decode_attention(q, cache, layer, ancestry, gen_count, launch)

    return positions, attend


def decode_attention_reference(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor) -> Tensor:
    """The definition: gather each beam's keys and values, repeat each key/value head for its group of query heads
    (HF's ``repeat_kv``), softmax in float32 (q·k, then / sqrt(d), as HF)."""
    group = query_group(q, cache, ancestry)
    slots, beams = ancestry.shape[:2]
    kv_heads, head_dim = cache.shape.heads, cache.shape.head_dim
    page = cache.shape.page_size
    lengths, counts = cache.prompt_lengths.tolist(), gen_count.clamp(min=1).tolist()
    out = torch.empty_like(q)
    for s in range(slots):
        n, g = lengths[s], counts[s]
        pages = cache.block_table[s, : math.ceil(n / page)].long()
        kp = cache.prompt_k[layer, pages].reshape(-1, kv_heads, head_dim)[:n]
        vp = cache.prompt_v[layer, pages].reshape(-1, kv_heads, head_dim)[:n]
        columns = torch.arange(g, device=q.device)
        k_scale, v_scale = cache.k_scale[layer], cache.v_scale[layer]
        for b in range(beams):
            rows = ancestry[s, b, :g].long()
            k = cache.read(torch.cat((kp, cache.gen_k[layer, s, rows, columns])), k_scale).float()
            v = cache.read(torch.cat((vp, cache.gen_v[layer, s, rows, columns])), v_scale)  # [keys, kv_heads, dim]
            if group > 1:  # [keys, q_heads, dim]
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            query = q[s * beams + b].float()  # [q_heads, head_dim]
            scores = torch.einsum("hd,khd->hk", query, k) / math.sqrt(head_dim)
            probs = scores.softmax(dim=-1).to(v.dtype)
            out[s * beams + b] = torch.einsum("hk,khd->hd", probs, v).to(q.dtype)
    return out


def _decode_attention_triton(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor,
                             launch_settings: Mapping[str, int] | None = None) -> Tensor:
    group = query_group(q, cache, ancestry)
    slots, beams = ancestry.shape[:2]
    q_heads, head_dim = q.shape[1:]
    kv_heads = cache.shape.heads
    if head_dim % 2:
        raise ValueError(f"the decode kernel splits head_dim in halves; {head_dim} is odd")
    launch = dict(DECODE_LAUNCH if launch_settings is None else launch_settings)
    keys, splits, heads = launch.pop("KEYS"), launch.pop("SPLITS", 1), launch.pop("HEADS", 1)
    if splits < 1:
        raise ValueError(f"the decode launch's SPLITS must be >= 1 (1: one program per slot and group of HEADS "
                         f"heads), not {splits}")
    if heads < 1 or kv_heads % heads:
        raise ValueError(f"the decode launch's HEADS ({heads}) must divide the cache's {kv_heads} key/value heads")
    rows = beams * group * heads  # a program's query rows
    if rows > MAX_ROWS:
        raise ValueError(f"a decode program takes at most {MAX_ROWS} query rows; {beams} beams x {group} query heads "
                         f"a key/value head x HEADS {heads} make {rows}: lower the launch's HEADS")
    if 1 << (beams - 1).bit_length() > keys:  # a tile's generated keys are COLUMNS of each beam (beams padded)
        raise ValueError(f"the decode launch's KEYS ({keys}) must hold a generated column of each of {beams} beams")
    pk, pv = cache.prompt_k[layer], cache.prompt_v[layer]
    gk, gv = cache.gen_k[layer], cache.gen_v[layer]
    out = torch.empty_like(q)
    scale_log2 = _score_scale(cache, layer, head_dim)
    cache_args = (
        q, pk, pv, cache.block_table, cache.prompt_lengths, gk, gv, ancestry, gen_count,
        q.stride(0), q.stride(1), pk.stride(0), pk.stride(1), pk.stride(2), cache.block_table.stride(0),
        gk.stride(0), gk.stride(1), gk.stride(2), gk.stride(3), ancestry.stride(0), ancestry.stride(1),
    )
    shapes = dict(BEAMS=beams, GROUP=group, HEADS=heads, ROW_TILE=max(ROW_TILE, triton.next_power_of_2(rows)),
                  HALF=head_dim // 2, PAGE=cache.shape.page_size, F16=cache.is_fp8, KEYS=keys,
                  COLUMNS=keys // triton.next_power_of_2(beams))
    programs = kv_heads // heads
    if splits == 1:
        _decode_kernel[(slots, programs)](
            *cache_args, out, out.stride(0), out.stride(1), scale_log2, cache.v_scale[layer], **shapes, **launch,
        )
        return out
    acc, stats = _split_workspace(q, splits)
    align = math.lcm(cache.shape.page_size, keys)
    _decode_split_kernel[(slots, programs, splits)](
        *cache_args, acc, stats, acc.stride(0), acc.stride(1), acc.stride(2), stats.stride(0), stats.stride(1),
        stats.stride(2), scale_log2, splits, **shapes, ALIGN=align, **launch,
    )
    _merge_splits(acc, stats, cache, layer, out, beams, align)
    return out


def _split_workspace(q: Tensor, splits: int) -> tuple[Tensor, Tensor]:
    """The partials of every split: float32 accumulators ``[splits, beam rows, q_heads, head_dim]``, then the
    running max and sum ``[2, splits, beam rows, q_heads]``, in one allocation. Each call takes it from PyTorch's
    caching allocator like its output (no cudaMalloc once warm); in the engine's CUDA graph it is a fixed block of
    the graph's pool that every layer's call reuses, so a replay allocates nothing."""
    beam_rows, q_heads, head_dim = q.shape
    partial = splits * beam_rows * q_heads * head_dim
    workspace = torch.empty(partial + 2 * splits * beam_rows * q_heads, dtype=torch.float32, device=q.device)
    return (workspace[:partial].view(splits, beam_rows, q_heads, head_dim),
            workspace[partial:].view(2, splits, beam_rows, q_heads))


def _merge_splits(acc: Tensor, stats: Tensor, cache: KVCache, layer: int, out: Tensor, beams: int,
                  align: int) -> None:
    """``_merge_kernel`` over the partials both split kernels write (``_split_range``'s runs of ``align``)."""
    splits, beam_rows, q_heads, head_dim = acc.shape
    _merge_kernel[(beam_rows, q_heads)](
        acc, stats, cache.prompt_lengths, out, acc.stride(0), acc.stride(1), acc.stride(2), stats.stride(0),
        stats.stride(1), stats.stride(2), out.stride(0), out.stride(1), cache.v_scale[layer], splits,
        BEAMS=beams, HEAD=head_dim, SPLIT_TILE=triton.next_power_of_2(splits), ALIGN=align,
        num_warps=4,
    )


def _score_scale(cache: KVCache, layer: int, head_dim: int) -> float:
    """The factor that takes a stored key's dot product to a base-2 softmax exponent: 1/sqrt(head_dim), log2(e)
    and the layer's key scale (1 for a 16-bit cache)."""
    return 1.0 / math.sqrt(head_dim) * 1.4426950408889634 * cache.k_scale[layer]


def _decode_attention_cuda(q: Tensor, cache: KVCache, layer: int, ancestry: Tensor, gen_count: Tensor,
                           launch: Mapping[str, int]) -> Tensor:
    """The CUDA kernel (``code/llm/cuda_decode.py``) over an FP8 cache with ``launch`` (``CUDA_LAUNCH``'s keys): one
    block per (slot, key/value head, split) of ``num_warps`` warps streaming tiles of 16 keys through
    ``num_stages`` buffers; with SPLITS > 1 the partials go through ``_merge_kernel`` as the Triton split kernel's
    do. Raises ValueError for a cache, queries or launch it does not serve, before any launch."""
    from code.llm import cuda_decode

    group = query_group(q, cache, ancestry)
    slots, beams = ancestry.shape[:2]
    head_dim = q.shape[2]
    shape = cache.shape
    settings = {**CUDA_LAUNCH, **launch}
    splits = settings["SPLITS"]
    reason = cuda_decode.refusal(shape.head_dim, beams, group, q.dtype, shape.page_size)
    if not cache.is_fp8:
        reason = "it reads an FP8 cache; a 16-bit cache takes the Triton kernel"
    if reason is None and (q.stride(2) != 1 or cache.prompt_k.stride(-1) != 1 or cache.gen_k.stride(-1) != 1):
        reason = "it reads queries and cache rows whose last dimension is contiguous"
    if reason is None and (gen_count.dtype != torch.int64 or ancestry.dtype != torch.int32):
        reason = f"it reads int64 counts and an int32 ancestry, not {gen_count.dtype} and {ancestry.dtype}"
    if reason is None and splits < 1:
        reason = f"SPLITS must be >= 1, not {splits}"
    if reason is not None:
        raise ValueError(f"the CUDA decode kernel cannot run this step: {reason}")
    pk, pv = cache.prompt_k[layer], cache.prompt_v[layer]
    gk, gv = cache.gen_k[layer], cache.gen_v[layer]
    out = torch.empty_like(q)
    align = math.lcm(shape.page_size, cuda_decode.TILE)
    if splits > 1:
        acc, stats = _split_workspace(q, splits)
        acc_strides, stats_strides = acc.stride()[:3], stats.stride()[:3]
    else:
        acc = stats = out.new_empty(0, dtype=torch.float32)
        acc_strides = stats_strides = (0, 0, 0)
    params = cuda_decode.DecodeParams(
        q=q.data_ptr(), pk=pk.data_ptr(), pv=pv.data_ptr(), table=cache.block_table.data_ptr(),
        lengths=cache.prompt_lengths.data_ptr(), gk=gk.data_ptr(), gv=gv.data_ptr(), ancestry=ancestry.data_ptr(),
        counts=gen_count.data_ptr(), out=out.data_ptr(), acc=acc.data_ptr(), stats=stats.data_ptr(),
        stride_q_row=q.stride(0), stride_q_head=q.stride(1), stride_k_page=pk.stride(0), stride_k_pos=pk.stride(1),
        stride_k_head=pk.stride(2), stride_table=cache.block_table.stride(0), stride_g_slot=gk.stride(0),
        stride_g_beam=gk.stride(1), stride_g_col=gk.stride(2), stride_g_head=gk.stride(3),
        stride_a_slot=ancestry.stride(0), stride_a_beam=ancestry.stride(1), stride_o_row=out.stride(0),
        stride_o_head=out.stride(1), stride_w_split=acc_strides[0], stride_w_row=acc_strides[1],
        stride_w_head=acc_strides[2], stride_s_kind=stats_strides[0], stride_s_split=stats_strides[1],
        stride_s_row=stats_strides[2], scale_log2=_score_scale(cache, layer, head_dim),
        v_scale=cache.v_scale[layer], splits=splits, align=align, page=shape.page_size,
        heads_first=settings["ORDER"],
    )
    grid = (shape.heads, slots, splits) if settings["ORDER"] else (slots, shape.heads, splits)
    cuda_decode.launch(params, grid, q, head_dim, beams, group, settings["num_warps"], settings["num_stages"],
                       settings["BLOCKS"])
    if splits > 1:
        _merge_splits(acc, stats, cache, layer, out, beams, align)
    return out


if triton is not None:

    @triton.jit
    def _query_rows(ROW_TILE: tl.constexpr, BEAMS: tl.constexpr, GROUP: tl.constexpr, HEADS: tl.constexpr):
        """Who each row of a program's query tile is: row r is beam r // (GROUP * HEADS), query head r % (GROUP *
        HEADS) of the program's (so a beam's rows are adjacent, in the order of q's heads), which reads the
        program's key/value head ``(r % (GROUP * HEADS)) // GROUP``; rows of beam >= BEAMS are padding."""
        row = tl.arange(0, ROW_TILE)
        beam = row // (GROUP * HEADS)
        q_head = row % (GROUP * HEADS)
        return beam, q_head, q_head // GROUP

    @triton.jit
    def _attend_tile(qa, qb, k_ptrs, v_ptrs, stride_head, kv_head, loaded, attended, m, s, acc_a, acc_b, scale_log2,
                     HALF: tl.constexpr, HEADS: tl.constexpr):
        """One tile of the online softmax: the keys and values at ``k_ptrs``/``v_ptrs`` (the first half of head_dim
        of the program's first key/value head; the second half is HALF further, head j ``j * stride_head``), rows
        ``loaded``; each query row attends to the keys ``attended`` allows it, of its own head ``kv_head``.
        Returns the updated (max, sum, accumulator halves).

        With HEADS > 1 every head's scores are a full dot of all query rows, and each row keeps its own head's
        (block-diagonal: the same MMA work as HEADS programs of one head, whose 16-row dots are mostly padding), so
        the softmax runs once over a tile of real rows; each head's values then take only its rows' probabilities.
        """
        ka = tl.load(k_ptrs, mask=loaded[:, None], other=0.0).to(qa.dtype)
        kb = tl.load(k_ptrs + HALF, mask=loaded[:, None], other=0.0).to(qa.dtype)
        scores = tl.dot(qb, tl.trans(kb), acc=tl.dot(qa, tl.trans(ka)))
        for j in tl.static_range(1, HEADS):
            ka = tl.load(k_ptrs + j * stride_head, mask=loaded[:, None], other=0.0).to(qa.dtype)
            kb = tl.load(k_ptrs + j * stride_head + HALF, mask=loaded[:, None], other=0.0).to(qa.dtype)
            scores = tl.where(kv_head[:, None] == j, tl.dot(qb, tl.trans(kb), acc=tl.dot(qa, tl.trans(ka))), scores)
        scores = scores * scale_log2
        scores = tl.where(attended, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        s = s * alpha + tl.sum(p, axis=1)
        if HEADS == 1:  # today's one-head kernel, instruction for instruction
            va = tl.load(v_ptrs, mask=loaded[:, None], other=0.0).to(qa.dtype)
            vb = tl.load(v_ptrs + HALF, mask=loaded[:, None], other=0.0).to(qa.dtype)
            p = p.to(qa.dtype)
            acc_a = acc_a * alpha[:, None] + tl.dot(p, va)
            acc_b = acc_b * alpha[:, None] + tl.dot(p, vb)
        else:
            p = p.to(qa.dtype)
            acc_a = acc_a * alpha[:, None]
            acc_b = acc_b * alpha[:, None]
            for j in tl.static_range(HEADS):
                va = tl.load(v_ptrs + j * stride_head, mask=loaded[:, None], other=0.0).to(qa.dtype)
                vb = tl.load(v_ptrs + j * stride_head + HALF, mask=loaded[:, None], other=0.0).to(qa.dtype)
                pj = tl.where(kv_head[:, None] == j, p, tl.zeros_like(p))
                acc_a = tl.dot(pj, va, acc=acc_a)
                acc_b = tl.dot(pj, vb, acc=acc_b)
        return m_new, s, acc_a, acc_b

    @triton.jit
    def _load_queries(q_ptr, slot, first_q_head, stride_q_row, stride_q_head, BEAMS: tl.constexpr,
                      GROUP: tl.constexpr, HEADS: tl.constexpr, ROW_TILE: tl.constexpr, HALF: tl.constexpr,
                      F16: tl.constexpr):
        """The program's queries (the slot's beams x its GROUP * HEADS query heads, ``_query_rows``) as one
        ``[ROW_TILE, head_dim]`` tile in two halves (padding rows zero), in fp16 for an FP8 cache."""
        beam, q_head, _ = _query_rows(ROW_TILE, BEAMS, GROUP, HEADS)
        half = tl.arange(0, HALF)
        live = beam < BEAMS
        q_rows = (q_ptr + (slot * BEAMS + beam)[:, None] * stride_q_row
                  + (first_q_head + q_head)[:, None] * stride_q_head + half[None, :])
        qa = tl.load(q_rows, mask=live[:, None], other=0.0)
        qb = tl.load(q_rows + HALF, mask=live[:, None], other=0.0)
        if F16:
            qa = qa.to(tl.float16)
            qb = qb.to(tl.float16)
        return qa, qb

    @triton.jit
    def _attend_prompt(qa, qb, kv_head, m, s, acc_a, acc_b, start, end, slot, first_head, pk_ptr, pv_ptr, table_ptr,
                       stride_k_page, stride_k_pos, stride_k_head, stride_table, scale_log2,
                       HALF: tl.constexpr, PAGE: tl.constexpr, KEYS: tl.constexpr, HEADS: tl.constexpr):
        """The prompt keys ``start <= position < end`` of the slot, KEYS a tile, read once for all beams (and the
        page table once for the program's HEADS heads)."""
        key = tl.arange(0, KEYS)
        half = tl.arange(0, HALF)
        for first in range(start, end, KEYS):
            position = first + key
            valid = position < end
            page = tl.load(table_ptr + slot * stride_table + position // PAGE, mask=valid, other=0).to(tl.int64)
            base = page * stride_k_page + (position % PAGE) * stride_k_pos + first_head * stride_k_head
            offsets = base[:, None] + half[None, :]
            m, s, acc_a, acc_b = _attend_tile(qa, qb, pk_ptr + offsets, pv_ptr + offsets, stride_k_head, kv_head,
                                              valid, valid[None, :], m, s, acc_a, acc_b, scale_log2, HALF, HEADS)
        return m, s, acc_a, acc_b

    @triton.jit
    def _attend_generated(qa, qb, beam, kv_head, m, s, acc_a, acc_b, g, slot, first_head, gk_ptr, gv_ptr,
                          ancestry_ptr, stride_g_slot, stride_g_beam, stride_g_col, stride_g_head, stride_a_slot,
                          stride_a_beam, scale_log2, BEAMS: tl.constexpr, HALF: tl.constexpr, KEYS: tl.constexpr,
                          COLUMNS: tl.constexpr, HEADS: tl.constexpr):
        """Each beam's first ``g`` generated keys through the ancestry table (key j of a tile belongs to beam
        j // COLUMNS; the rows of other beams mask it, whatever their head)."""
        half = tl.arange(0, HALF)
        key = tl.arange(0, KEYS)
        owner = key // COLUMNS  # the beam a generated key belongs to
        own = (beam[:, None] == owner[None, :]) | (beam[:, None] >= BEAMS)  # padding rows see every key
        for first in range(0, g, COLUMNS):
            col = first + key % COLUMNS
            ok = (col < g) & (owner < BEAMS)
            src = tl.load(ancestry_ptr + slot * stride_a_slot + owner * stride_a_beam + col, mask=ok, other=0)
            base = (slot.to(tl.int64) * stride_g_slot + src.to(tl.int64) * stride_g_beam + col * stride_g_col
                    + first_head * stride_g_head)
            offsets = base[:, None] + half[None, :]
            m, s, acc_a, acc_b = _attend_tile(qa, qb, gk_ptr + offsets, gv_ptr + offsets, stride_g_head, kv_head, ok,
                                              own & ok[None, :], m, s, acc_a, acc_b, scale_log2, HALF, HEADS)
        return m, s, acc_a, acc_b

    @triton.jit
    def _empty_softmax(ROW_TILE: tl.constexpr, HALF: tl.constexpr):
        """The online softmax's state before any key, per (beam row, query head): running max -inf, sum 0 and the
        two halves of the accumulator 0. Both decode kernels start from it."""
        m = tl.full([ROW_TILE], float("-inf"), tl.float32)
        s = tl.zeros([ROW_TILE], tl.float32)
        acc_a = tl.zeros([ROW_TILE, HALF], tl.float32)
        acc_b = tl.zeros([ROW_TILE, HALF], tl.float32)
        return m, s, acc_a, acc_b

    @triton.jit
    def _split_range(n, split, splits, ALIGN: tl.constexpr):
        """Split ``split``'s prompt positions [start, end) of a prompt of n: equal runs of whole ALIGN blocks (pages
        and key tiles), the last splits possibly empty. (``splits`` is a run-time value: one compiled kernel serves
        every split count.)"""
        chunk = tl.cdiv(n, splits * ALIGN) * ALIGN
        start = split * chunk
        return start, tl.minimum(start + chunk, n)

    @triton.jit
    def _decode_kernel(
        q_ptr, pk_ptr, pv_ptr, table_ptr, length_ptr, gk_ptr, gv_ptr, ancestry_ptr, count_ptr,
        stride_q_row, stride_q_head, stride_k_page, stride_k_pos, stride_k_head, stride_table,
        stride_g_slot, stride_g_beam, stride_g_col, stride_g_head, stride_a_slot, stride_a_beam,
        out_ptr, stride_o_row, stride_o_head, scale_log2, v_scale,
        BEAMS: tl.constexpr, GROUP: tl.constexpr, HEADS: tl.constexpr, ROW_TILE: tl.constexpr, HALF: tl.constexpr,
        PAGE: tl.constexpr, F16: tl.constexpr, KEYS: tl.constexpr, COLUMNS: tl.constexpr,
    ):
        """One program per (slot, HEADS key/value heads): the prompt's keys once for all beams and query heads, then
        each beam's generated keys."""
        slot = tl.program_id(0)
        first_head = tl.program_id(1) * HEADS
        qa, qb = _load_queries(q_ptr, slot, first_head * GROUP, stride_q_row, stride_q_head, BEAMS, GROUP, HEADS,
                               ROW_TILE, HALF, F16)
        beam, q_head, kv_head = _query_rows(ROW_TILE, BEAMS, GROUP, HEADS)
        m, s, acc_a, acc_b = _empty_softmax(ROW_TILE, HALF)
        n = tl.load(length_ptr + slot)
        m, s, acc_a, acc_b = _attend_prompt(qa, qb, kv_head, m, s, acc_a, acc_b, 0, n, slot, first_head, pk_ptr,
                                            pv_ptr, table_ptr, stride_k_page, stride_k_pos, stride_k_head,
                                            stride_table, scale_log2, HALF, PAGE, KEYS, HEADS)
        g = tl.maximum(tl.load(count_ptr + slot), 1)
        m, s, acc_a, acc_b = _attend_generated(qa, qb, beam, kv_head, m, s, acc_a, acc_b, g, slot, first_head,
                                               gk_ptr, gv_ptr, ancestry_ptr, stride_g_slot, stride_g_beam,
                                               stride_g_col, stride_g_head, stride_a_slot, stride_a_beam, scale_log2,
                                               BEAMS, HALF, KEYS, COLUMNS, HEADS)
        norm = v_scale / s
        half = tl.arange(0, HALF)
        live = beam < BEAMS
        out_rows = (out_ptr + (slot * BEAMS + beam)[:, None] * stride_o_row
                    + (first_head * GROUP + q_head)[:, None] * stride_o_head + half[None, :])
        tl.store(out_rows, (acc_a * norm[:, None]).to(out_ptr.dtype.element_ty), mask=live[:, None])
        tl.store(out_rows + HALF, (acc_b * norm[:, None]).to(out_ptr.dtype.element_ty), mask=live[:, None])

    @triton.jit
    def _decode_split_kernel(
        q_ptr, pk_ptr, pv_ptr, table_ptr, length_ptr, gk_ptr, gv_ptr, ancestry_ptr, count_ptr,
        stride_q_row, stride_q_head, stride_k_page, stride_k_pos, stride_k_head, stride_table,
        stride_g_slot, stride_g_beam, stride_g_col, stride_g_head, stride_a_slot, stride_a_beam,
        acc_ptr, stats_ptr, stride_w_split, stride_w_row, stride_w_head, stride_s_kind, stride_s_split, stride_s_row,
        scale_log2, splits,
        BEAMS: tl.constexpr, GROUP: tl.constexpr, HEADS: tl.constexpr, ROW_TILE: tl.constexpr, HALF: tl.constexpr,
        PAGE: tl.constexpr, F16: tl.constexpr, KEYS: tl.constexpr, COLUMNS: tl.constexpr, ALIGN: tl.constexpr,
    ):
        """One program per (slot, HEADS key/value heads, split): the split's run of prompt keys once for all beams
        and query heads, and in the last split the generated keys too; writes the unnormalised partial (max, sum,
        accumulator) of each (beam row, query head) (nothing when the split has no keys: ``_merge_kernel`` skips it
        by the same rule)."""
        slot = tl.program_id(0)
        first_head = tl.program_id(1) * HEADS
        split = tl.program_id(2)
        qa, qb = _load_queries(q_ptr, slot, first_head * GROUP, stride_q_row, stride_q_head, BEAMS, GROUP, HEADS,
                               ROW_TILE, HALF, F16)
        beam, q_head, kv_head = _query_rows(ROW_TILE, BEAMS, GROUP, HEADS)
        m, s, acc_a, acc_b = _empty_softmax(ROW_TILE, HALF)
        start, end = _split_range(tl.load(length_ptr + slot), split, splits, ALIGN)
        m, s, acc_a, acc_b = _attend_prompt(qa, qb, kv_head, m, s, acc_a, acc_b, start, end, slot, first_head,
                                            pk_ptr, pv_ptr, table_ptr, stride_k_page, stride_k_pos, stride_k_head,
                                            stride_table, scale_log2, HALF, PAGE, KEYS, HEADS)
        last = split == splits - 1
        g = tl.where(last, tl.maximum(tl.load(count_ptr + slot), 1), 0)
        m, s, acc_a, acc_b = _attend_generated(qa, qb, beam, kv_head, m, s, acc_a, acc_b, g, slot, first_head,
                                               gk_ptr, gv_ptr, ancestry_ptr, stride_g_slot, stride_g_beam,
                                               stride_g_col, stride_g_head, stride_a_slot, stride_a_beam, scale_log2,
                                               BEAMS, HALF, KEYS, COLUMNS, HEADS)
        half = tl.arange(0, HALF)
        row = slot * BEAMS + beam
        head = first_head * GROUP + q_head
        written = (beam < BEAMS) & ((start < end) | last)
        stats = stats_ptr + split * stride_s_split + row * stride_s_row + head
        tl.store(stats, m, mask=written)
        tl.store(stats + stride_s_kind, s, mask=written)
        acc_rows = (acc_ptr + split * stride_w_split + row[:, None] * stride_w_row + head[:, None] * stride_w_head
                    + half[None, :])
        tl.store(acc_rows, acc_a, mask=written[:, None])
        tl.store(acc_rows + HALF, acc_b, mask=written[:, None])

    @triton.jit
    def _merge_kernel(
        acc_ptr, stats_ptr, length_ptr, out_ptr, stride_w_split, stride_w_row, stride_w_head, stride_s_kind,
        stride_s_split, stride_s_row, stride_o_row, stride_o_head, v_scale, splits,
        BEAMS: tl.constexpr, HEAD: tl.constexpr, SPLIT_TILE: tl.constexpr, ALIGN: tl.constexpr,
    ):
        """One program per (beam row, head): the splits' partials combined by log-sum-exp (in base 2, as the scores
        are), normalised and scaled by the layer's value scale."""
        row = tl.program_id(0)
        head = tl.program_id(1)
        split = tl.arange(0, SPLIT_TILE)
        start, end = _split_range(tl.load(length_ptr + row // BEAMS), split, splits, ALIGN)
        written = (split < splits) & ((start < end) | (split == splits - 1))
        stats = stats_ptr + split * stride_s_split + row * stride_s_row + head
        m = tl.load(stats, mask=written, other=float("-inf"))
        s = tl.load(stats + stride_s_kind, mask=written, other=0.0)
        weight = tl.exp2(m - tl.max(m, axis=0))  # 0 for the splits not written
        dim = tl.arange(0, HEAD)
        acc = tl.load(acc_ptr + split[:, None] * stride_w_split + row * stride_w_row + head * stride_w_head
                      + dim[None, :], mask=written[:, None], other=0.0)
        o = tl.sum(acc * weight[:, None], axis=0) * (v_scale / tl.sum(s * weight, axis=0))
        tl.store(out_ptr + row * stride_o_row + head * stride_o_head + dim, o.to(out_ptr.dtype.element_ty))
