"""The in-flight engine's Triton decode attention (code/llm/paged_attention.py: ``_decode_kernel``, and the
split variant ``_decode_split_kernel`` + ``_merge_kernel``) against ``decode_attention_reference``.

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interpreter.py); without triton the module is
skipped. The interpreter computes bf16 ``tl.dot`` wrongly, so on the CPU the 16-bit cache is fp16 (the same kernel
path: only FP8 widens in registers); on a GPU it is bf16. Timing at GPT-J's shapes:
``python3 -m scripts.gpu.check_gptj_inflight --steps=decode_splits``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from code.llm.kv_cache import CacheShape, KVCache
from code.llm.paged_attention import decode_attention_reference
from code.numerics.fp8 import E4M3
from tests.triton_interpreter import interpreted_module

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
DTYPE = torch.bfloat16 if CUDA else torch.float16
# Prompt lengths: one token, shorter than a page, a page, one past it, several pages, a free slot (0, how the engine
# leaves it), and 128, which 2, 4 or 8 splits cover exactly (no slack for a split range that misses a key).
LENGTHS = [1, 5, 16, 17, 130, 0, 47, 128]
HEADS, HEAD_DIM, BEAMS, PAGE, MAX_NEW = 2, 32, 4, 16, 8


@pytest.fixture(scope="module")
def attention() -> Iterator[ModuleType]:
    yield from interpreted_module("code.llm.paged_attention", "_decode_kernel")


def random_cache(fp8: bool, seed: int = 0) -> tuple[KVCache, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A one-layer cache of LENGTHS' prompts (pages handed out in reverse, so tables are not the identity), random
    ancestry and generated counts (one slot with none yet: at least one is read), and the beams' queries."""
    g = torch.Generator().manual_seed(seed)
    slots = len(LENGTHS)
    pages = sum(math.ceil(n / PAGE) for n in LENGTHS)
    shape = CacheShape(layers=1, heads=HEADS, head_dim=HEAD_DIM, slots=slots, beams=BEAMS, max_new_tokens=MAX_NEW,
                       page_size=PAGE, pages=pages, max_prompt_length=max(LENGTHS))
    cache = KVCache(shape, DTYPE, DEVICE, E4M3 if fp8 else None)
    if fp8:  # different key and value scales, so a swapped scale shows as an error
        cache.set_scales([4.5], [7.5])
    for name in ("prompt_k", "prompt_v", "gen_k", "gen_v"):
        values = torch.randn(getattr(cache, name).shape, generator=g) * (3.0 if name.endswith("v") else 1.0)
        scale = cache.v_scale[0] if name.endswith("v") else cache.k_scale[0]
        stored = (values / scale).clamp(-448, 448).to(E4M3) if fp8 else values.to(DTYPE)
        getattr(cache, name).copy_(stored.to(DEVICE))
    for slot in reversed(range(slots)):
        cache.assign(slot, LENGTHS[slot])
    cache.set_tables(list(range(slots)), LENGTHS)
    ancestry = torch.randint(0, BEAMS, (slots, BEAMS, MAX_NEW), generator=g, dtype=torch.int32).to(DEVICE)
    counts = torch.randint(0, MAX_NEW + 1, (slots,), generator=g)
    counts[0] = 0
    q = torch.randn(slots * BEAMS, HEADS, HEAD_DIM, generator=g).to(DEVICE, DTYPE)
    return cache, ancestry, counts.to(DEVICE), q


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


@pytest.fixture
def nan_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh float32 buffers (the split path's workspace) hold NaN: the merge must read only what the splits wrote."""
    empty = torch.empty

    def poisoned(*args, **kwargs) -> torch.Tensor:  # noqa: ANN002, ANN003 - torch.empty's own signature
        tensor = empty(*args, **kwargs)
        return tensor.fill_(float("nan")) if tensor.dtype == torch.float32 else tensor

    monkeypatch.setattr(torch, "empty", poisoned)


@pytest.mark.parametrize("fp8", [False, True], ids=["16bit", "fp8"])
@pytest.mark.parametrize("keys", [16, 64])
@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_kernel_matches_reference(attention, nan_workspace, monkeypatch, fp8, keys, splits):
    cache, ancestry, counts, q = random_cache(fp8)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", keys)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "SPLITS", splits)
    got = attention._decode_attention_triton(q, cache, 0, ancestry, counts)
    want = decode_attention_reference(q, cache, 0, ancestry, counts)
    assert got.dtype == q.dtype and got.shape == q.shape
    assert bool(got.isfinite().all())
    assert rel_error(got, want) < 5e-3
    per_row = (got.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1)
    assert float(per_row.max()) < 2e-2  # every beam row and head, the one-token and the free slot's included


def test_splits_agree_with_one_program_per_slot(attention, monkeypatch):
    """The split path computes the same softmax as today's kernel, only in another order."""
    cache, ancestry, counts, q = random_cache(fp8=False, seed=1)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", 16)
    outputs = {}
    for splits in (1, 3, 8):  # 3: not a power of two (the merge pads its tile of splits)
        monkeypatch.setitem(attention.DECODE_LAUNCH, "SPLITS", splits)
        outputs[splits] = attention._decode_attention_triton(q, cache, 0, ancestry, counts)
    assert rel_error(outputs[3], outputs[1]) < 2e-3 and rel_error(outputs[8], outputs[1]) < 2e-3


def test_bad_split_count_names_the_setting(monkeypatch):
    # Checked before any kernel: it runs without Triton too.
    from code.llm import paged_attention as attention

    cache, ancestry, counts, q = random_cache(fp8=False)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "SPLITS", 0)
    with pytest.raises(ValueError, match=r"DECODE_LAUNCH\['SPLITS'\] must be >= 1"):
        attention._decode_attention_triton(q, cache, 0, ancestry, counts)
