"""The contiguous KV cache of the PyTorch models (GPT-J's, Llama's): one per layer, row r of a batch in row r.

The in-flight engines page theirs instead (``kv_cache.py``); this one is for batch-at-a-time generation
(``generation.py``), where every row of a batch writes the same columns.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class KVCache(nn.Module):
    """Keys and values ``[rows, heads, max_seq_len, head_dim]``; row r of a batch uses row r of the cache.

    ``heads`` is the model's key/value heads: with grouped-query attention fewer than its query heads."""

    def __init__(self, rows: int, heads: int, seq_len: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        shape = (rows, heads, seq_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, start: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``k``/``v`` at columns ``start...``; return every column up to the new end for the batch's rows."""
        rows, end = k.shape[0], start + k.shape[2]
        self.k[:rows, :, start:end] = k
        self.v[:rows, :, start:end] = v
        return self.k[:rows, :, :end], self.v[:rows, :, :end]

    def reorder(self, rows: Tensor, start: int, end: int) -> None:
        """Row i of columns [start, end) becomes old row ``rows[i]`` (the right side is gathered before writing)."""
        n = rows.numel()
        self.k[:n, :, start:end] = self.k[rows, :, start:end]
        self.v[:n, :, start:end] = self.v[rows, :, start:end]


class CachedModel(nn.Module):
    """What a decoder-only model with one ``KVCache`` per layer shares (GPT-J's, Llama's): making the caches, their
    shape, beam reordering, the positions and mask of a left-padded batch at a column range, and the forward pass
    (embedding, the blocks, final norm, LM head), which differs between the models only in its blocks and RoPE.

    A subclass has ``config`` (with ``head_dim``), ``tok_embeddings``, ``layers`` (blocks called as ``layer(x, rope,
    mask, start)``, each with ``attention.kv_cache``), ``norm``, ``output`` (the LM head, whose weight gives the
    default dtype and device), ``kv_heads``, the key/value heads a cache holds, and ``rope_for``, its RoPE table."""

    kv_heads: int

    def rope_for(self, end: int, device: torch.device) -> Tensor:
        """The float32 (cos, sin) table ``[positions, pairs, 2]`` on ``device`` covering positions below ``end``."""
        raise NotImplementedError

    def forward(self, tokens: Tensor, start: int = 0, pad: Tensor | None = None, last_only: bool = False) -> Tensor:
        """Logits ``[B, T, vocab]`` (``[B, vocab]`` with ``last_only``) in the model's dtype.

        ``tokens [B, T]`` occupy columns ``start .. start+T-1`` of the left-padded batch; ``pad [B]`` (default 0) is
        each row's count of padding columns. Without caches only ``start == 0`` makes sense (a full forward); with
        them, a prefill is ``start=0`` and a decode step of one token is ``start`` = its column.
        """
        positions, mask = self.batch_layout(tokens, start, pad)
        # cos and sin in the model's dtype, as HF casts them: [B, T, 1, pairs, 2]
        rope = self.rope_for(start + tokens.shape[1], tokens.device)[positions].to(self.output.weight.dtype)[:, :, None]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, rope, mask, start)
        if last_only:
            x = x[:, -1]
        return self.output(self.norm(x))

    def setup_caches(self, max_rows: int, max_seq_len: int, dtype: torch.dtype | None = None,
                     device: torch.device | str | None = None) -> None:
        """Allocate one KV cache per layer for up to ``max_rows`` rows (samples × beams) and ``max_seq_len`` columns
        (padded prompt + new tokens - 1); dtype and device default to the model's. From then on ``forward`` reads
        and writes the caches. Made as ordinary tensors even under inference mode, so any caller may use them."""
        dtype = dtype or self.output.weight.dtype
        device = device or self.output.weight.device
        with torch.inference_mode(False):
            for layer in self.layers:
                layer.attention.kv_cache = KVCache(max_rows, self.kv_heads, max_seq_len, self.config.head_dim, dtype,
                                                   device)

    def cache_shape(self) -> tuple[int, int] | None:
        """(rows, columns) of the caches, or None before ``setup_caches``."""
        cache = self.layers[0].attention.kv_cache
        return None if cache is None else (cache.k.shape[0], cache.k.shape[2])

    def reorder_cache(self, rows: Tensor, start: int, end: int) -> None:
        """Beam search: cache row i, columns [start, end), takes the contents of row ``rows[i]``."""
        if end > start:
            for layer in self.layers:
                layer.attention.kv_cache.reorder(rows, start, end)

    def batch_layout(self, tokens: Tensor, start: int, pad: Tensor | None) -> tuple[Tensor, Tensor]:
        """``(positions [B, T], mask [B, 1, T, end])`` of ``tokens [B, T]`` at columns ``start .. end-1`` of a
        left-padded batch whose row b has ``pad[b]`` padding columns (default 0): positions start at 0 on a row's
        first real token (padding columns reuse 0), and a query sees the keys up to its own column, never padding.
        Refuses a range the caches cannot hold, or ``start > 0`` without caches."""
        bsz, seqlen = tokens.shape
        end = start + seqlen
        shape = self.cache_shape()
        if shape is None and start != 0:
            raise ValueError("forward with start > 0 needs the KV caches: call setup_caches first")
        if shape is not None and (bsz > shape[0] or end > shape[1]):
            raise ValueError(f"batch of {bsz} rows up to column {end} does not fit the caches {shape}")
        device = tokens.device
        pad = torch.zeros(bsz, dtype=torch.long, device=device) if pad is None else pad.to(device, torch.long)
        columns = torch.arange(start, end, device=device)
        positions = (columns[None, :] - pad[:, None]).clamp(min=0)
        keys = torch.arange(end, device=device)
        mask = (keys[None, :] <= columns[:, None])[None, None] & (keys >= pad[:, None])[:, None, None, :]
        return positions, mask
