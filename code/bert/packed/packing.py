"""Packing a batch of variable-length sequences into one token stream, and back.

A padded batch ``[B, S]`` spends GEMM work on padding: at SQuAD's lengths (mean ~166 of 384) most of it once
batches mix lengths. Packed, the encoder's GEMMs run over ``T = sum(lengths)`` rows and attention is told where each
sequence starts (``cu_seqlens``, as flash attention's varlen kernels want it).

The host layout ``[tokens | segments | positions | cu_seqlens]`` in one int32 buffer lets one copy move a batch to
the GPU; ``T`` is padded up to a token bucket so a CUDA graph captured for that bucket can replay it. Padding tokens
belong to no sequence (``cu_seqlens`` ends at the real count), so nothing attends to them and they touch no real row.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from code.bert.squad import PAD_LOGIT  # what positions past a sample's length get in a response

TOKEN_ALIGN = 16  # FP8 GEMMs want row counts that are multiples of 16


@dataclass
class PackedBatch:
    """Where each packed token came from; enough to unpack ``[T, 2]`` logits into ``[B, S, 2]``."""

    batch: int  # B
    seq_len: int  # S of the padded input
    total: int  # real tokens, sum(lengths)
    padded_total: int  # rows the model runs (>= total)
    slots: int  # entries of cu_seqlens minus one (>= batch; extra sequences are empty)
    max_len: int  # longest sequence
    dest: np.ndarray  # int64 [total]: flat index into [B, S] of each packed token

    @property
    def words(self) -> int:
        """int32 words of the host layout: tokens, segments, positions (padded_total each) and cu_seqlens."""
        return layout_words(self.padded_total, self.slots)


def layout_words(padded_total: int, slots: int) -> int:
    return 3 * padded_total + slots + 1


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pack_into(
    buffer: np.ndarray,
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    input_mask: np.ndarray,
    padded_total: int | None = None,
    slots: int | None = None,
) -> PackedBatch:
    """Pack ``[B, S]`` inputs into ``buffer`` (int32, at least ``layout_words`` long) and describe the packing.

    Tokens are taken where ``input_mask`` is set, row by row; a token's position is its column (as the padded model
    sees it). ``padded_total`` defaults to the real count rounded up to ``TOKEN_ALIGN``; ``slots`` to ``B``.
    """
    mask = np.asarray(input_mask).astype(bool, copy=False)
    batch, seq_len = mask.shape
    flat_mask = mask.ravel()
    dest = np.flatnonzero(flat_mask)
    total = int(dest.size)
    lengths = mask.sum(axis=1)
    padded_total = round_up(max(total, 1), TOKEN_ALIGN) if padded_total is None else padded_total
    slots = batch if slots is None else slots
    if padded_total < total or slots < batch:
        raise ValueError(f"packing {total} tokens of {batch} sequences into {padded_total} rows / {slots} slots")
    words = layout_words(padded_total, slots)
    if buffer.size < words or buffer.dtype != np.int32:
        raise ValueError(f"pack buffer holds {buffer.size} {buffer.dtype} words, needs {words} int32")
    tokens, segments, positions = (buffer[i * padded_total : (i + 1) * padded_total] for i in range(3))
    np.compress(flat_mask, np.asarray(input_ids).ravel(), out=tokens[:total])
    np.compress(flat_mask, np.asarray(segment_ids).ravel(), out=segments[:total])
    np.remainder(dest, seq_len, out=positions[:total], casting="unsafe")
    for part in (tokens, segments, positions):
        part[total:] = 0
    cu = buffer[3 * padded_total : words]
    cu[0] = 0
    np.cumsum(lengths, dtype=np.int32, out=cu[1 : batch + 1])
    cu[batch + 1 :] = total
    max_len = int(lengths.max()) if batch else 0
    return PackedBatch(batch, seq_len, total, padded_total, slots, max_len, dest)


def split_layout(buffer: np.ndarray, packed: PackedBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Views of tokens, segments, positions and cu_seqlens in a packed layout."""
    t = packed.padded_total
    return buffer[:t], buffer[t : 2 * t], buffer[2 * t : 3 * t], buffer[3 * t : packed.words]


def unpack(logits: np.ndarray, packed: PackedBatch, fill: float = PAD_LOGIT) -> np.ndarray:
    """Per-token ``[>= total, 2]`` logits -> float32 ``[B, S, 2]``; positions past a sample's length get ``fill``."""
    out = np.full((packed.batch * packed.seq_len, 2), fill, dtype=np.float32)
    out[packed.dest] = logits[: packed.total]
    return out.reshape(packed.batch, packed.seq_len, 2)


def unpack_samples(logits: np.ndarray, packed: PackedBatch) -> list[np.ndarray]:
    """Per-token logits -> one ``[length, 2]`` float32 array per sample (views into one copy)."""
    rows = np.ascontiguousarray(logits[: packed.total], dtype=np.float32)
    starts = np.searchsorted(packed.dest, np.arange(packed.batch + 1) * packed.seq_len)
    return [rows[starts[i] : starts[i + 1]] for i in range(packed.batch)]


# ---------------------------------------------------------------------------------------------------------------
# Buckets: the token counts CUDA graphs are captured for
# ---------------------------------------------------------------------------------------------------------------


def token_buckets(max_tokens: int, min_tokens: int = 128, growth: float = 1.125, align: int = 128) -> list[int]:
    """Increasing token counts from ``min_tokens`` to at least ``max_tokens``: steps of ``align`` while small, then
    growing by ``growth`` (padding waste stays under ~12% while the number of graphs stays ~30 up to 16k tokens)."""
    if max_tokens < 1 or min_tokens < 1 or growth <= 1.0 or align < TOKEN_ALIGN or align % TOKEN_ALIGN:
        raise ValueError(f"bad bucket parameters: max {max_tokens}, min {min_tokens}, growth {growth}, align {align}")
    buckets = [round_up(min_tokens, align)]
    while buckets[-1] < max_tokens:
        buckets.append(round_up(max(buckets[-1] + align, int(buckets[-1] * growth)), align))
    return buckets


def choose_bucket(buckets: list[int], tokens: int) -> int | None:
    """The smallest bucket holding ``tokens``, or None if none does (run it without a graph)."""
    i = bisect.bisect_left(buckets, tokens)
    return buckets[i] if i < len(buckets) else None


def graph_slots(bucket: int, max_batch: int, min_avg_len: int = 64) -> int:
    """Sequences a bucket's graph has room for. Every slot costs attention blocks that exit at once, so buckets
    get room for an average length of ``min_avg_len``; a batch of many shorter ones falls back to a larger bucket
    or to eager mode."""
    return max(1, min(max_batch, -(-bucket // min_avg_len)))
