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
