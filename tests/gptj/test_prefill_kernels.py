"""A prompt pass's Triton elementwise kernels (code/gptj/inflight/prefill_kernels.py, and the KV cache's page write
in code/llm/kv_cache.py) against the plain functions they replace.

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interpreter.py) in float32, where they must
equal the plain functions up to float32 rounding; on a GPU in bf16, where rotary and the page write must be bit for
bit the plain torch operations' results, and GELU within one bf16 unit. Without triton the kernel tests are
skipped. What they gain: the engine's rate (``python3 -m scripts.gpu.check_gptj_inflight --steps=variants``) against
the tree before them, in documentation/performance.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from code.gptj.inflight import elementwise
from code.llm.kv_cache import CacheShape, KVCache
from code.numerics.fp8 import E4M3, quantize, quantize_fast
from tests.triton_interpreter import interpreted_module

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
DTYPE = torch.bfloat16 if CUDA else torch.float32
TOKENS, HEADS, HEAD_DIM, ROTARY, HIDDEN = 37, 2, 256, 64, 1024  # 37 tokens: not a multiple of a program's rows


@pytest.fixture(scope="module")
def kernels() -> Iterator[ModuleType]:
    yield from interpreted_module("code.gptj.inflight.prefill_kernels", "_rotary_qkv_kernel")


@pytest.fixture(scope="module")
def kv_cache() -> Iterator[ModuleType]:
    yield from interpreted_module("code.llm.kv_cache", "_write_rows_kernel")


def assert_e4m3_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """e4m3 tensors equal up to one e4m3 step (2**-3 of the value, or the subnormal step) in under 1% of elements.
    Triton 3.6's interpreter rounds a value just under a power of two down to half of it (the mantissa's carry into
    the exponent is lost: 31.4 / scale stores 16, not 32); on the CPU such elements are set aside, on a GPU none."""
    g, w = got.cpu().float(), want.cpu().float()
    if not CUDA:
        lost_carry = (g * 2 == w) & (torch.frexp(w)[0].abs() == 0.5)
        g = torch.where(lost_carry, w, g)
    assert bool(((g - w).abs() <= w.abs() * 2.0**-3 + 2.0**-9).all())
    assert (g != w).float().mean() < 0.01


def gemm_output(seed: int = 0, pad_rows: int = 11) -> torch.Tensor:
    """A first-GEMM output ``[tokens + pad, q k v + hidden]`` as the FP8 GEMM leaves it (padding rows, here
    non-zero so that reading them shows)."""
    g = torch.Generator().manual_seed(seed)
    width = 3 * HEADS * HEAD_DIM + HIDDEN
    return (torch.randn(TOKENS + pad_rows, width, generator=g) * 2).to(DEVICE, DTYPE)


def rope_table(seed: int = 1) -> torch.Tensor:
    """``[tokens, 1, 1, rotary/2, 2]`` (cos, sin) in the model's dtype, as ``InflightModel._rope`` gives it."""
    angles = torch.rand(TOKENS, ROTARY // 2, generator=torch.Generator().manual_seed(seed)) * 6.3
    return torch.stack((angles.cos(), angles.sin()), dim=-1)[:, None, None].to(DEVICE, DTYPE)


def test_rotary_qkv_equals_the_plain_function(kernels: ModuleType) -> None:
    fused, rope = gemm_output(), rope_table()
    got = kernels.rotary_qkv(fused, rope, TOKENS, HEADS, HEAD_DIM)
    want = elementwise.rotary_qkv(fused, rope, TOKENS, HEADS, HEAD_DIM)
    for name, g, w in zip("qkv", got, want, strict=True):
        assert g.shape == w.shape == (TOKENS, HEADS, HEAD_DIM) and g.is_contiguous(), name
        if CUDA:  # each product and sum rounded to bf16 where torch's operations round
            assert torch.equal(g, w), name
        else:
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=name)
    # the unrotated dims are copies, the rotated ones moved
    assert torch.equal(got[0][..., ROTARY:], want[0][..., ROTARY:])
    assert not torch.equal(got[1][..., :ROTARY], fused[:TOKENS, HEADS * HEAD_DIM:][:, :ROTARY])


@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_mlp_in_equals_the_plain_function(kernels: ModuleType, fp8: bool) -> None:
    fused = gemm_output()
    attended = torch.randn(TOKENS, HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(2)).to(DEVICE, DTYPE)
    scale = torch.tensor(6.0 / 448, device=DEVICE) if fp8 else None
    got = kernels.mlp_in(fused, attended, scale, 16)
    want = elementwise.mlp_in(fused, attended, scale, 16)
    assert got.shape == want.shape == ((48 if fp8 else TOKENS), HEADS * HEAD_DIM + HIDDEN)
    assert got.dtype == want.dtype == (E4M3 if fp8 else DTYPE)
    width = HEADS * HEAD_DIM
    if fp8:
        assert not got[TOKENS:].float().any(), "padding rows must be zero"
        # GELU's last bit may differ, and so the e4m3 value rounded from it; on the CPU also the plain
        # quantization's division against the kernel's product with the inverse
        if CUDA:  # the plain path quantizes as the kernel does: the copied attention output is exact
            assert torch.equal(got[:, :width].float(), want[:, :width].float())
        assert_e4m3_close(got, want)
    else:
        assert torch.equal(got[:, :width], want[:, :width])  # the attention output, copied
        unit = 2.0**-7 if CUDA else 1e-6  # one bf16 unit on the GPU
        assert bool(((got - want).abs() <= want.abs() * unit + 1e-6).all())


@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_page_write_equals_torch_indexing(kv_cache: ModuleType, fp8: bool) -> None:
    """The Triton page write (as ``write_prompt`` runs it on a GPU) against the CPU path's indexing."""
    shape = CacheShape(layers=2, heads=HEADS, head_dim=HEAD_DIM, slots=2, beams=4, max_new_tokens=4, page_size=16,
                       pages=6, max_prompt_length=40)
    caches = [KVCache(shape, torch.float32, torch.device("cpu"), E4M3 if fp8 else None) for _ in range(2)]
    for cache in caches:
        cache.set_scales([3.0, 5.0], [2.0, 7.0])
        cache.assign(1, 21)
        cache.assign(0, 16)
    rows = caches[0].prompt_write_index([1, 0], [21, 16])
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(37, HEADS, HEAD_DIM, generator=g) * 3, torch.randn(37, HEADS, HEAD_DIM, generator=g) * 5
    caches[0].write_prompt(1, rows, k, v)  # the CPU path: torch indexing
    written = [pool[1].view(shape.pages * shape.page_size, -1).to(DEVICE) for pool in
               (caches[1].prompt_k, caches[1].prompt_v)]
    kv_cache._write_rows(k.to(DEVICE), v.to(DEVICE), rows.to(DEVICE), *written, caches[1].k_scale[1],
                         caches[1].v_scale[1])
    for want, got in ((caches[0].prompt_k[1], written[0]), (caches[0].prompt_v[1], written[1])):
        want = want.view(shape.pages * shape.page_size, -1)
        if fp8:  # the kernel multiplies by the inverse scale, the CPU path divides: a value may round the other way
            assert_e4m3_close(got, want)
        else:
            assert torch.equal(got.cpu(), want)
    assert not caches[0].prompt_k[0].float().any(), "layer 0 untouched"


def test_gemm_input_is_padded_with_zero_rows_without_a_copy_of_the_input() -> None:
    """An FP8 GEMM input has rows in multiples of ``align``: ``quantize_fast(rows=)`` writes them (on a GPU in the
    one quantizing pass), equal to padding first and quantizing after."""
    y = torch.randn(37, 64, generator=torch.Generator().manual_seed(4)) * 3
    scale = torch.tensor(5.0 / 448)
    got = elementwise.gemm_input(y, scale, 16)
    assert got.shape == (48, 64) and got.dtype == E4M3
    assert torch.equal(got[:37].float(), quantize(y, scale).float()) and not got[37:].float().any()
    assert torch.equal(quantize_fast(y, scale, 48).float(), got.float())
    assert elementwise.gemm_input(y, None, 16) is y  # 16-bit GEMMs take the tensor itself
