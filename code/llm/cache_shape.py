"""The KV cache's shape and the bytes it follows from, without torch: what ``KVCache`` allocates
(``code/llm/kv_cache.py``) and what a memory plan (``code/gptj/memory_plan.py``) counts, from one definition."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheShape:
    layers: int
    heads: int
    head_dim: int
    slots: int
    beams: int
    max_new_tokens: int
    page_size: int
    pages: int  # prompt pages in the pool
    max_prompt_length: int

    def pages_for(self, prompt_length: int) -> int:
        """Pages of the pool that a prompt of ``prompt_length`` tokens takes."""
        return math.ceil(prompt_length / self.page_size)

    @property
    def pages_per_slot(self) -> int:
        return self.pages_for(self.max_prompt_length)

    def bytes_per_token(self, element_bytes: int) -> int:
        """Keys and values of one token over all layers, stored in elements of ``element_bytes``."""
        return 2 * self.layers * self.heads * self.head_dim * element_bytes

    def page_bytes(self, element_bytes: int) -> int:
        """One page of the prompt pool: keys and values of ``page_size`` tokens over all layers."""
        return self.page_size * self.bytes_per_token(element_bytes)

    def generated_bytes(self, element_bytes: int) -> int:
        """The generated rows: every beam of every slot owns ``max_new_tokens`` columns (the worst case)."""
        return self.slots * self.beams * self.max_new_tokens * self.bytes_per_token(element_bytes)
