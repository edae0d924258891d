"""A prompt pass's Triton elementwise kernels (code/gptj/inflight/prefill_kernels.py, the KV cache's page write in
code/llm/kv_cache.py, the padded quantization in code/numerics/fp8.py) against the torch operations they replace.

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interpreter.py) in float32, where they must
equal the plain functions up to float32 rounding; on a GPU in bf16, where rotary and the page write must be bit for
bit the torch operations' results, and GELU within one bf16 unit (or 1e-6 where 1 + tanh cancels). Without triton
the kernel tests are skipped. What they gain: the engine's rate (``python3 -m scripts.gpu.check_gptj_inflight
--steps=variants``) against the tree before them, in documentation/notes/journal/2026-11-26.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from code.gptj.inflight import elementwise
from code.llm.kv_cache import CacheShape, KVCache
from code.numerics.fp8 import E4M3, quantize, quantize_fast
from tests.triton_interpreter import interpreted_module

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
DTYPE = torch.bfloat16 if CUDA else torch.float32
TOKENS = 37  # not a multiple of a program's 16 rows
# (heads, head_dim, rotary dims, hidden width): GPT-J's head (head_dim 256, rotary 64) with fewer heads and a
# narrower MLP; the kernels take head shapes whose attention width is a multiple of 512 (``supports``)
SHAPES = [(2, 256, 64, 1024), (4, 128, 32, 640)]
SHAPE_IDS = ["gptj-head", "half-head"]


@pytest.fixture(scope="module")
def kernels() -> Iterator[ModuleType]:
    yield from interpreted_module("code.gptj.inflight.prefill_kernels", "_rotary_qkv_kernel")


@pytest.fixture(scope="module")
def kv_cache() -> Iterator[ModuleType]:
    yield from interpreted_module("code.llm.kv_cache", "_write_rows_kernel")


@pytest.fixture(scope="module")
def fp8() -> Iterator[ModuleType]:
    yield from interpreted_module("code.numerics.fp8", "_quantize_kernel")


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


def gemm_output(heads: int, head_dim: int, hidden: int, seed: int = 0, pad_rows: int = 11) -> torch.Tensor:
    """A first-GEMM output ``[tokens + pad, q k v + hidden]``: padding rows as the FP8 GEMM leaves them (non-zero
    here, so that reading them shows), and a row stride wider than the row, so that ignoring it shows."""
    g = torch.Generator().manual_seed(seed)
    width = 3 * heads * head_dim + hidden
    wider = torch.randn(TOKENS + pad_rows, width + 40, generator=g) * 2
    return wider.to(DEVICE, DTYPE)[:, :width]


def rope_table(rotary: int, seed: int = 1) -> torch.Tensor:
    """``[tokens, 1, 1, rotary/2, 2]`` (cos, sin) in the model's dtype, as ``InflightModel._rope`` gives it."""
    angles = torch.rand(TOKENS, rotary // 2, generator=torch.Generator().manual_seed(seed)) * 6.3
    return torch.stack((angles.cos(), angles.sin()), dim=-1)[:, None, None].to(DEVICE, DTYPE)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rotary_qkv_equals_the_plain_function(kernels: ModuleType, shape: tuple[int, int, int, int]) -> None:
    heads, head_dim, rotary, hidden = shape
    fused, rope = gemm_output(heads, head_dim, hidden), rope_table(rotary)
    assert fused.stride(0) > fused.shape[1]
    got = kernels.rotary_qkv(fused, rope, TOKENS, heads, head_dim)
    want = elementwise.rotary_qkv(fused, rope, TOKENS, heads, head_dim)
    for name, g, w in zip("qkv", got, want, strict=True):
        assert g.shape == w.shape == (TOKENS, heads, head_dim) and g.is_contiguous(), name
        if CUDA:  # each product and sum rounded to bf16 where torch's operations round
            assert torch.equal(g, w), name
        else:
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=name)
    # the keys as the GEMM wrote them: their unrotated dims copied, their rotated dims moved
    width = heads * head_dim
    keys = fused[:TOKENS, width: 2 * width].reshape(TOKENS, heads, head_dim)
    assert torch.equal(got[1][..., rotary:], keys[..., rotary:])
    assert not torch.equal(got[1][..., :rotary], keys[..., :rotary])


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_mlp_in_equals_the_plain_function(kernels: ModuleType, fp8: bool, shape: tuple[int, int, int, int]) -> None:
    heads, head_dim, _, hidden = shape
    fused = gemm_output(heads, head_dim, hidden)
    g = torch.Generator().manual_seed(2)
    attended = torch.randn(TOKENS, heads, head_dim, generator=g).to(DEVICE, DTYPE)
    scale = torch.tensor(6.0 / 448, device=DEVICE) if fp8 else None
    got = kernels.mlp_in(fused, attended, scale, 16)
    want = elementwise.mlp_in(fused, attended, scale, 16)
    width = heads * head_dim
    assert got.shape == want.shape == ((48 if fp8 else TOKENS), width + hidden)
    assert got.dtype == want.dtype == (E4M3 if fp8 else DTYPE)
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
    """The pages written by the Triton pass (``write_prompt`` on a GPU; the kernel itself in the interpreter)
    against the same rows written by torch indexing of the quantized keys and values, layer 0 untouched."""
    heads, head_dim = 2, 256
    shape = CacheShape(layers=2, heads=heads, head_dim=head_dim, slots=2, beams=4, max_new_tokens=4, page_size=16,
                       pages=6, max_prompt_length=40)
    cache = KVCache(shape, DTYPE, DEVICE, E4M3 if fp8 else None)
    cache.set_scales([3.0, 5.0], [2.0, 7.0])
    cache.assign(1, 21)
    cache.assign(0, 16)
    rows = cache.prompt_write_index([1, 0], [21, 16])
    g = torch.Generator().manual_seed(3)
    k = (torch.randn(37, heads, head_dim, generator=g) * 3).to(DEVICE, DTYPE)
    v = (torch.randn(37, heads, head_dim, generator=g) * 5).to(DEVICE, DTYPE)
    pools = [pool[1].view(shape.pages * shape.page_size, -1) for pool in (cache.prompt_k, cache.prompt_v)]
    if CUDA:
        cache.write_prompt(1, rows, k, v)
    else:  # write_prompt takes torch's indexing on the CPU: the kernel directly
        kv_cache._write_rows(k, v, rows, *pools, cache.k_scale[1], cache.v_scale[1])
    for pool, x, scale in zip(pools, (k, v), (cache.k_scale[1], cache.v_scale[1]), strict=True):
        want = torch.zeros_like(pool)
        want[rows] = (quantize_fast(x, scale) if fp8 else x).reshape(len(rows), -1)
        if fp8 and not CUDA:  # the CPU's quantization divides, the kernel multiplies by the inverse
            assert_e4m3_close(pool, want)
        else:
            assert torch.equal(pool.view(torch.uint8), want.view(torch.uint8))
    assert not cache.prompt_k[0].float().any() and not cache.prompt_v[0].float().any(), "layer 0 untouched"


def test_padded_quantization_kernel(fp8: ModuleType) -> None:
    """``quantize_cuda(rows=)``, the GPU path of a padded FP8 GEMM input: x's rows quantized, the rest zero."""
    y = (torch.randn(37, 64, generator=torch.Generator().manual_seed(4)) * 3).to(DEVICE, DTYPE)
    scale = torch.tensor(5.0 / 448, device=DEVICE)
    got = fp8.quantize_cuda(y, scale, 48)
    assert got.shape == (48, 64) and got.dtype == E4M3 and not got[37:].float().any()
    assert_e4m3_close(got, quantize(F.pad(y, (0, 0, 0, 11)), scale))
    with pytest.raises(ValueError, match="rows=36 is fewer than the input's 37"):
        fp8.quantize_cuda(y, scale, 36)


def test_gemm_input_is_padded_with_zero_rows() -> None:
    """An FP8 GEMM input has rows in multiples of ``align``: equal to padding first and quantizing after."""
    y = torch.randn(37, 64, generator=torch.Generator().manual_seed(4)) * 3
    scale = torch.tensor(5.0 / 448)
    got = elementwise.gemm_input(y, scale, 16)
    assert got.shape == (48, 64) and got.dtype == E4M3
    assert torch.equal(got.float(), quantize(F.pad(y, (0, 0, 0, 11)), scale).float())
    assert elementwise.gemm_input(y, None, 16) is y  # 16-bit GEMMs take the tensor itself
    with pytest.raises(ValueError, match="rows=36 is fewer than the input's 37"):
        quantize_fast(y, scale, 36)


def test_head_shapes_the_kernels_do_not_take_run_the_plain_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-J 6B's head shape goes to the kernels; a proxy's (12 heads of 64: width 768) or a head that is no power
    of two stays with the plain functions, which are the definition: the dispatch asks with the model's head
    shape, and a direct call with another shape is refused rather than computed wrongly."""
    from code.gptj.inflight import prefill_kernels

    assert prefill_kernels.supports(16, 256) and prefill_kernels.supports(4, 128)
    assert not prefill_kernels.supports(12, 64) and not prefill_kernels.supports(3, 48)
    assert not prefill_kernels.available(torch.zeros(1), 16, 256)  # a CPU tensor: the plain functions
    asked = []
    monkeypatch.setattr(prefill_kernels, "available", lambda x, heads, head_dim: asked.append((heads, head_dim)))
    heads, head_dim = 12, 64
    fused = torch.randn(5, 3 * heads * head_dim + 32)
    rope = torch.randn(5, 1, 1, 8, 2)
    q, _, _ = elementwise.rotary_qkv_prefill(fused, rope, 5, heads, head_dim)
    y = elementwise.mlp_in_prefill(fused, torch.randn(5, heads, head_dim), None, 16)
    assert asked == [(12, 64), (12, 64)] and q.shape == (5, 12, 64) and y.shape == (5, 12 * 64 + 32)
    with pytest.raises(ValueError, match="take no 12 heads of 64"):
        prefill_kernels.mlp_in(fused, torch.randn(5, heads, head_dim), None, 16)
    with pytest.raises(ValueError, match="take no 12 heads of 64"):
        prefill_kernels.rotary_qkv(fused, rope, 5, heads, head_dim)
