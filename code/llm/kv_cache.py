"""The KV cache of the in-flight engine: prompt pages shared by a sample's beams, generated rows per beam.

- **Prompt**: a sample's 4 beams share its prompt, so its keys and values are stored once, in fixed-size pages of
  a pool shared by all slots (``[layers, pages, page_size, heads, head_dim]``); ``block_table[slot]`` lists a
  slot's pages. Pages are handed out at admission and returned when the sample completes, so the pool holds the
  prompts actually in flight, not ``slots x longest prompt``.
- **Generated tokens**: every beam row owns ``max_new_tokens`` columns (``[layers, slots, beams, max_new, heads,
  head_dim]``); the decode step of row (s, b) writes column ``step`` of that row. When beam search reorders beams,
  nothing is copied: ``ancestry[s, b, t]`` (kept by ``BeamState``) names the row whose column t holds token t of
  beam b's history, and attention reads through it (TensorRT-LLM's beam index table).
- **FP8** (``kv_dtype=fp8``): keys and values are stored as e4m3 with one static scale per layer for keys and one
  for values (``set_scales``, from the calibration's magnitudes), which halves the bytes a decode step reads and
  the memory of a prompt; attention multiplies the scales back in (``k_scale`` into the score scale, ``v_scale``
  into the output), so no kernel dequantizes a whole tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor

from code.llm.cache_shape import CacheShape
from code.numerics.fp8 import E4M3, quantize_fast, scale_from_amax

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: torch's indexing writes the pages
    triton = None


class KVCache:
    """``dtype`` is what the model computes keys and values in; ``kv_dtype`` what they are stored as (the same, or
    ``torch.float8_e4m3fn``)."""

    def __init__(self, shape: CacheShape, dtype: torch.dtype, device: torch.device,
                 kv_dtype: torch.dtype | None = None) -> None:
        if shape.pages < shape.pages_per_slot:
            raise ValueError(f"a KV pool of {shape.pages} pages of {shape.page_size} tokens cannot hold one "
                             f"{shape.max_prompt_length}-token prompt; give the engine more memory or fewer slots")
        self.shape = shape
        self.dtype = dtype
        self.kv_dtype = kv_dtype or dtype
        if self.kv_dtype not in (dtype, E4M3):
            raise ValueError(f"the KV cache stores {dtype} or {E4M3}, not {self.kv_dtype}")
        self.k_scale = [1.0] * shape.layers  # FP8 only: stored value x scale = the model's value
        self.v_scale = [1.0] * shape.layers
        s = shape
        # zeros, not empty: the tail of a prompt's last page is masked, never NaN garbage
        self.prompt_k = torch.zeros((s.layers, s.pages, s.page_size, s.heads, s.head_dim), dtype=self.kv_dtype,
                                    device=device)
        self.prompt_v = torch.zeros_like(self.prompt_k)
        gen = (s.layers, s.slots, s.beams, s.max_new_tokens, s.heads, s.head_dim)
        self.gen_k = torch.zeros(gen, dtype=self.kv_dtype, device=device)
        self.gen_v = torch.zeros(gen, dtype=self.kv_dtype, device=device)
        self.block_table = torch.zeros((s.slots, s.pages_per_slot), dtype=torch.int32, device=device)
        self.prompt_lengths = torch.zeros(s.slots, dtype=torch.int32, device=device)
        self._free_pages = list(range(s.pages - 1, -1, -1))
        self._slot_pages: dict[int, list[int]] = {}

    @property
    def is_fp8(self) -> bool:
        return self.kv_dtype == E4M3

    def set_scales(self, k_amax: list[float], v_amax: list[float]) -> None:
        """FP8: per-layer scales from the largest key and value magnitudes seen in calibration."""
        if len(k_amax) != self.shape.layers or len(v_amax) != self.shape.layers:
            raise ValueError(f"need {self.shape.layers} key and value magnitudes, got {len(k_amax)} and {len(v_amax)}")
        self.k_scale = [scale_from_amax(a) for a in k_amax]
        self.v_scale = [scale_from_amax(a) for a in v_amax]

    def _store(self, x: Tensor, scale: float) -> Tensor:
        return quantize_fast(x, scale) if self.is_fp8 else x

    def write_prompt(self, layer: int, rows: Tensor, k: Tensor, v: Tensor) -> None:
        """Keys and values ``[tokens, heads, head_dim]`` of packed prompts at pool rows ``rows``
        (``prompt_write_index``). On a GPU one Triton pass quantizes and scatters both (as torch operations: a
        quantization and a scatter each)."""
        s = self.shape
        pools = [pool[layer].view(s.pages * s.page_size, s.heads * s.head_dim)
                 for pool in (self.prompt_k, self.prompt_v)]
        if k.is_cuda and triton is not None:
            _write_rows(k, v, rows, *pools, self.k_scale[layer], self.v_scale[layer])
            return
        for pool, x, scale in zip(pools, (k, v), (self.k_scale[layer], self.v_scale[layer]), strict=True):
            pool[rows] = self._store(x, scale).reshape(len(rows), -1)

    def write_generated(self, layer: int, rows: Tensor, columns: Tensor, k: Tensor, v: Tensor) -> None:
        """Keys and values ``[rows, heads, head_dim]`` of one new token per beam row, at column ``columns``."""
        s = self.shape
        flat = (s.slots * s.beams * s.max_new_tokens, s.heads, s.head_dim)
        index = rows * s.max_new_tokens + columns  # one index_copy_ instead of a two-index scatter
        for target, value, scale in ((self.gen_k, k, self.k_scale), (self.gen_v, v, self.v_scale)):
            stored = self._store(value, scale[layer])
            if self.is_fp8:  # torch's CPU index_copy_ has no e4m3 kernel: copy the bytes (the same on any device)
                target[layer].view(flat).view(torch.uint8).index_copy_(0, index, stored.view(torch.uint8))
            else:
                target[layer].view(flat).index_copy_(0, index, stored)

    def read(self, stored: Tensor, scale: float) -> Tensor:
        """Stored keys or values as the model's values (float32 for FP8, else as stored)."""
        return stored.float() * scale if self.is_fp8 else stored

    @property
    def free_pages(self) -> int:
        return len(self._free_pages)

    def pages_for(self, prompt_length: int) -> int:
        return self.shape.pages_for(prompt_length)

    def assign(self, slot: int, prompt_length: int) -> list[int]:
        """Give ``slot`` the pages of a ``prompt_length``-token prompt; the caller checked ``free_pages``."""
        if prompt_length > self.shape.max_prompt_length:
            raise ValueError(f"a {prompt_length}-token prompt exceeds the engine's maximum of "
                             f"{self.shape.max_prompt_length}")
        pages = [self._free_pages.pop() for _ in range(self.pages_for(prompt_length))]
        self._slot_pages[slot] = pages
        return pages

    def release(self, slot: int) -> None:
        self._free_pages.extend(reversed(self._slot_pages.pop(slot)))

    def set_tables(self, slots: list[int], lengths: list[int]) -> None:
        """Upload the block tables and prompt lengths of newly admitted slots."""
        device = self.block_table.device
        table = torch.zeros((len(slots), self.shape.pages_per_slot), dtype=torch.int32)
        for row, slot in enumerate(slots):
            pages = self._slot_pages[slot]
            table[row, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
        index = torch.tensor(slots, dtype=torch.long, device=device)
        self.block_table[index] = table.to(device)
        self.prompt_lengths[index] = torch.tensor(lengths, dtype=torch.int32).to(device)

    def clear_lengths(self, slots: Tensor) -> None:
        """Free slots attend to no prompt."""
        self.prompt_lengths[slots] = 0

    def prompt_write_index(self, slots: list[int], lengths: list[int]) -> Tensor:
        """The pool row (page x page_size + offset) of every token of packed prompts, in order: where prefill
        writes their keys and values."""
        page_size = self.shape.page_size
        rows = []
        for slot, length in zip(slots, lengths, strict=True):
            positions = torch.arange(length)
            pages = torch.tensor(self._slot_pages[slot], dtype=torch.long)[positions // page_size]
            rows.append(pages * page_size + positions % page_size)
        return torch.cat(rows).to(self.prompt_k.device)


_ROWS = 16  # tokens per program of the page write
_COLUMNS = 512  # columns per program


def _write_rows(k: Tensor, v: Tensor, rows: Tensor, k_pool: Tensor, v_pool: Tensor, k_scale: float,
                v_scale: float) -> None:
    """Keys and values ``[tokens, heads, head_dim]`` (contiguous) to rows ``rows`` of ``[pool rows, width]``
    pools; for e4m3 pools ``x / scale`` saturated, as ``quantize_fast`` computes it (times the inverse)."""
    tokens = k.shape[0]
    width = k_pool.shape[1]
    if tokens:
        grid = (triton.cdiv(tokens, _ROWS), triton.cdiv(width, _COLUMNS), 2)
        _write_rows_kernel[grid](k.contiguous(), v.contiguous(), rows, k_pool, v_pool, 1.0 / k_scale, 1.0 / v_scale,
                                 tokens, WIDTH=width, FP8=k_pool.dtype == E4M3, ROWS=_ROWS,
                                 COLUMNS=_COLUMNS, num_warps=4)


if triton is not None:

    @triton.jit(do_not_specialize=["tokens"])  # one compilation for every prompt length
    def _write_rows_kernel(k_ptr, v_ptr, rows_ptr, k_pool_ptr, v_pool_ptr,  # noqa: ANN001 - typed by the JIT
                           k_inv_scale, v_inv_scale, tokens,  # noqa: ANN001
                           WIDTH: tl.constexpr, FP8: tl.constexpr, ROWS: tl.constexpr, COLUMNS: tl.constexpr):
        """One program: ROWS tokens x COLUMNS of keys (program_id 2 == 0) or values, to their pool rows."""
        t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        c = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
        live = (t < tokens)[:, None] & (c < WIDTH)[None, :]
        dest = tl.load(rows_ptr + t, mask=t < tokens, other=0).to(tl.int64)
        if tl.program_id(2) == 0:
            src, pool, inv_scale = k_ptr, k_pool_ptr, k_inv_scale
        else:
            src, pool, inv_scale = v_ptr, v_pool_ptr, v_inv_scale
        x = tl.load(src + t.to(tl.int64)[:, None] * WIDTH + c[None, :], mask=live, other=0.0)
        target = pool + dest[:, None] * WIDTH + c[None, :]
        if FP8:
            q = tl.minimum(tl.maximum(x.to(tl.float32) * inv_scale, -448.0), 448.0)
            tl.store(target, q.to(tl.float8e4nv), mask=live)
        else:
            tl.store(target, x, mask=live)
