"""The in-flight engine's Triton decode attention (code/llm/paged_attention.py: ``_decode_kernel``, and the
split variant ``_decode_split_kernel`` + ``_merge_kernel``) against ``decode_attention_reference``.

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interpreter.py); without triton the module is
skipped. The interpreter computes bf16 ``tl.dot`` wrongly, so on the CPU the 16-bit cache is fp16 (the same kernel
path: only FP8 widens in registers); on a GPU it is bf16. Launches: KEYS, SPLITS and HEADS (key/value heads per
program), at GPT-J's layout (4 beams, as many query heads as key/value heads) and grouped-query attention's (query
heads sharing a key/value head, Llama 3.1's 1 beam and 4 query heads a key/value head). Timing at GPT-J's and
Llama 3.1 8B's shapes: ``python3 -m scripts.gpu.check_gptj_inflight --steps=decode_splits,decode_heads``.
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


def random_cache(fp8: bool, seed: int = 0, heads: int = HEADS, beams: int = BEAMS, group: int = 1,
                 head_dim: int = HEAD_DIM, page: int = PAGE, lengths: tuple[int, ...] = tuple(LENGTHS)
                 ) -> tuple[KVCache, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A one-layer cache of ``lengths``' prompts (pages handed out in reverse, so tables are not the identity) with
    ``heads`` key/value heads, random ancestry and generated counts (one slot with none yet: at least one is read),
    and the beams' queries, ``group`` query heads per key/value head."""
    g = torch.Generator().manual_seed(seed)
    slots = len(lengths)
    pages = sum(math.ceil(n / page) for n in lengths)
    shape = CacheShape(layers=1, heads=heads, head_dim=head_dim, slots=slots, beams=beams, max_new_tokens=MAX_NEW,
                       page_size=page, pages=pages, max_prompt_length=max(lengths))
    cache = KVCache(shape, DTYPE, DEVICE, E4M3 if fp8 else None)
    if fp8:  # different key and value scales, so a swapped scale shows as an error
        cache.set_scales([4.5], [7.5])
    for name in ("prompt_k", "prompt_v", "gen_k", "gen_v"):
        values = torch.randn(getattr(cache, name).shape, generator=g) * (3.0 if name.endswith("v") else 1.0)
        scale = cache.v_scale[0] if name.endswith("v") else cache.k_scale[0]
        stored = (values / scale).clamp(-448, 448).to(E4M3) if fp8 else values.to(DTYPE)
        getattr(cache, name).copy_(stored.to(DEVICE))
    for slot in reversed(range(slots)):
        cache.assign(slot, lengths[slot])
    cache.set_tables(list(range(slots)), list(lengths))
    ancestry = torch.randint(0, beams, (slots, beams, MAX_NEW), generator=g, dtype=torch.int32).to(DEVICE)
    counts = torch.randint(0, MAX_NEW + 1, (slots,), generator=g)
    counts[0] = 0
    q = torch.randn(slots * beams, heads * group, head_dim, generator=g).to(DEVICE, DTYPE)
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
    with pytest.raises(ValueError, match=r"decode launch's SPLITS must be >= 1"):
        attention._decode_attention_triton(q, cache, 0, ancestry, counts)


def assert_matches_reference(attention: ModuleType, cache: KVCache, ancestry: torch.Tensor, counts: torch.Tensor,
                             q: torch.Tensor) -> torch.Tensor:
    """The Triton path under the current DECODE_LAUNCH against the reference: overall and for every (beam row,
    query head), the one-token prompt's and the free slot's included. Returns the kernel's output."""
    got = attention._decode_attention_triton(q, cache, 0, ancestry, counts)
    want = decode_attention_reference(q, cache, 0, ancestry, counts)
    assert got.dtype == q.dtype and got.shape == q.shape
    assert bool(got.isfinite().all())
    assert rel_error(got, want) < 5e-3
    per_row = (got.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1)
    assert float(per_row.max()) < 2e-2
    return got


@pytest.mark.parametrize("fp8", [False, True], ids=["16bit", "fp8"])
@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("splits", [1, 3])
def test_heads_per_program_match_reference(attention, nan_workspace, monkeypatch, fp8, heads, splits):
    """GPT-J's layout (4 beams, one query head per key/value head) with HEADS key/value heads per program: 4 x HEADS
    real query rows, each seeing only its own head's keys and its own beam's generated columns. KEYS 16 gives the
    generated loop several tiles of 4 columns a beam."""
    cache, ancestry, counts, q = random_cache(fp8, seed=2, heads=4)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", 16)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "SPLITS", splits)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "HEADS", heads)
    assert_matches_reference(attention, cache, ancestry, counts, q)


def test_heads_per_program_agree_with_one_head(attention, monkeypatch):
    """HEADS 4 computes the same softmax as one program per head, at a wider key tile (64: one tile holds a whole
    prompt of 47, and all 16 generated columns of each beam)."""
    cache, ancestry, counts, q = random_cache(fp8=False, seed=3, heads=4)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", 64)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "HEADS", 1)
    one = attention._decode_attention_triton(q, cache, 0, ancestry, counts)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "HEADS", 4)
    four = attention._decode_attention_triton(q, cache, 0, ancestry, counts)
    assert rel_error(four, one) < 2e-3


# (beams, query heads per key/value head, HEADS, SPLITS): Llama 3.1's decode (1 beam, GROUP 4) at 4 and 16 rows,
# 4 beams of GROUP 2 at 8 and 16 rows, and 32 rows (a 32-row tile); the 16-row ones split too
GQA_CASES = [(1, 4, 1, 1), (1, 4, 4, 1), (1, 4, 4, 2), (4, 2, 1, 1), (4, 2, 2, 1), (4, 2, 2, 3), (4, 2, 4, 1)]


@pytest.mark.parametrize("fp8", [False, True], ids=["16bit", "fp8"])
@pytest.mark.parametrize(("beams", "group", "heads", "splits"), GQA_CASES,
                         ids=[f"b{b}g{g}h{h}x{s}" for b, g, h, s in GQA_CASES])
def test_grouped_query_attention_matches_reference(attention, nan_workspace, monkeypatch, fp8, beams, group, heads,
                                                   splits):
    cache, ancestry, counts, q = random_cache(fp8, seed=4, heads=4, beams=beams, group=group)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", 16)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "SPLITS", splits)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "HEADS", heads)
    assert_matches_reference(attention, cache, ancestry, counts, q)


def test_grouped_query_reference_is_repeated_heads():
    """The reference's grouped-query attention is ordinary attention over a cache whose every key/value head is
    repeated for its group of query heads (HF's ``repeat_kv``: query head h reads head h // group)."""
    group = 3
    cache, ancestry, counts, q = random_cache(fp8=True, seed=5, heads=2, group=group)
    shape = cache.shape
    wide = KVCache(CacheShape(layers=1, heads=2 * group, head_dim=HEAD_DIM, slots=shape.slots, beams=BEAMS,
                              max_new_tokens=MAX_NEW, page_size=PAGE, pages=shape.pages,
                              max_prompt_length=shape.max_prompt_length), DTYPE, DEVICE, E4M3)
    wide.k_scale, wide.v_scale = cache.k_scale, cache.v_scale
    for name in ("prompt_k", "prompt_v", "gen_k", "gen_v"):
        repeated = getattr(cache, name).view(torch.uint8).repeat_interleave(group, dim=-2)  # e4m3: copy the bytes
        getattr(wide, name).view(torch.uint8).copy_(repeated)
    wide.block_table.copy_(cache.block_table)
    wide.prompt_lengths.copy_(cache.prompt_lengths)
    torch.testing.assert_close(decode_attention_reference(q, cache, 0, ancestry, counts),
                               decode_attention_reference(q, wide, 0, ancestry, counts), rtol=0, atol=0)


@pytest.mark.parametrize(("heads", "group", "launch_heads", "message"), [
    (4, 1, 3, r"decode launch's HEADS \(3\) must divide the cache's 4"),
    (4, 1, 0, r"decode launch's HEADS \(0\) must divide"),
    (4, 8, 4, r"at most 64 query rows; 4 beams x 8 query heads a key/value head x HEADS 4 make 128"),
])
def test_bad_heads_name_the_setting(monkeypatch, heads, group, launch_heads, message):
    # Checked before any kernel: it runs without Triton too.
    from code.llm import paged_attention as attention

    cache, ancestry, counts, q = random_cache(fp8=False, heads=heads, group=group)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "HEADS", launch_heads)
    with pytest.raises(ValueError, match=message):
        attention._decode_attention_triton(q, cache, 0, ancestry, counts)


def test_query_heads_must_be_a_multiple_of_the_caches():
    from code.llm import paged_attention as attention

    cache, ancestry, counts, q = random_cache(fp8=False, heads=4, group=2)
    q = q[:, :6]
    for attend in (attention._decode_attention_triton, decode_attention_reference):
        with pytest.raises(ValueError, match="6 query heads cannot share the cache's 4 key/value heads"):
            attend(q, cache, 0, ancestry, counts)


def test_a_key_tile_must_hold_a_column_of_every_beam(monkeypatch):
    from code.llm import paged_attention as attention

    cache, ancestry, counts, q = random_cache(fp8=False)
    monkeypatch.setitem(attention.DECODE_LAUNCH, "KEYS", 2)
    with pytest.raises(ValueError, match=r"decode launch's KEYS \(2\) must hold a generated column of each of 4"):
        attention._decode_attention_triton(q, cache, 0, ancestry, counts)
