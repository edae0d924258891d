"""Llama's prompt-pass Triton kernels (code/llama31/prefill_kernels.py) against the plain functions they replace
(code/llama31/elementwise.py).

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interpreter.py) in float32, where they must
equal the plain functions up to float32 rounding (a sum's order, exp's last bit); on a GPU in bf16, where the
residual, v and the rotation must be bit for bit the torch operations' results, and RMSNorm and SwiGLU within one
bf16 unit (a float32 sum's order, rsqrt's and exp's last bits may move a rounding). FP8 outputs are compared as
tests/gptj/test_prefill_kernels.py compares them (``assert_e4m3_close``). Without triton the kernel tests are
skipped. What they gain: ``python3 -m scripts.gpu.check_llama_inflight --steps profile,fp8`` against the same run
with ``--plain_elementwise``.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from code.llama31 import elementwise
from code.numerics.fp8 import E4M3
from tests.gptj.test_prefill_kernels import assert_e4m3_close
from tests.triton_interpreter import interpreted_module

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
DTYPE = torch.bfloat16 if CUDA else torch.float32
TOKENS = 37  # not a multiple of a program's 16 rows, nor of the FP8 alignment
EPS = 1e-5
# (heads, key/value heads, head_dim, dim, intermediate): Llama 3.1 8B's head (128, 4 query heads a key/value head)
# with fewer heads; then a smaller head, a width that is no power of two and an intermediate width that is no
# multiple of a program's 512 columns
SHAPES = [(8, 2, 128, 256, 1024), (4, 1, 16, 96, 200)]
SHAPE_IDS = ["llama-head", "odd-widths"]


@pytest.fixture(scope="module")
def kernels() -> Iterator[ModuleType]:
    yield from interpreted_module("code.llama31.prefill_kernels", "_norm_kernel")


def gemm_output(width: int, seed: int = 0, pad_rows: int = 11) -> torch.Tensor:
    """A GEMM output ``[tokens + pad, width]``: padding rows as the FP8 GEMM leaves them (non-zero here, so that
    reading them shows), and a row stride wider than the row, so that ignoring it shows."""
    wider = torch.randn(TOKENS + pad_rows, width + 40, generator=torch.Generator().manual_seed(seed)) * 2
    return wider.to(DEVICE, DTYPE)[:, :width]


def residual(dim: int, seed: int = 1) -> torch.Tensor:
    return (torch.randn(TOKENS, dim, generator=torch.Generator().manual_seed(seed)) * 3).to(DEVICE, DTYPE)


def norm_weight(dim: int) -> torch.Tensor:
    return (1 + torch.randn(dim, generator=torch.Generator().manual_seed(2)) / 4).to(DEVICE, DTYPE)


def scale_of(fp8: bool) -> torch.Tensor | None:
    return torch.tensor(4.0 / 448, device=DEVICE) if fp8 else None


def assert_16bit_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Within one bf16 unit on the GPU; float32 rounding on the CPU."""
    unit = 2.0**-7 if CUDA else 1e-5
    assert bool(((got.float() - want.float()).abs() <= want.float().abs() * unit + 1e-5).all())


def assert_gemm_input(got: torch.Tensor, want: torch.Tensor, fp8: bool) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == (E4M3 if fp8 else DTYPE)
    if fp8:
        assert got.shape[0] == 48 and not got[TOKENS:].float().any(), "padding rows must be zero"
        assert_e4m3_close(got, want)
    else:
        assert got.shape[0] == TOKENS
        assert_16bit_close(got, want)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_norm_in_equals_the_plain_function(kernels: ModuleType, fp8: bool, shape: tuple[int, ...]) -> None:
    dim = shape[3]
    x, weight = residual(dim), norm_weight(dim)
    got = kernels.norm_in(x, weight, EPS, scale_of(fp8), 16)
    assert_gemm_input(got, elementwise.norm_in(x, weight, EPS, scale_of(fp8), 16), fp8)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_residual_norm_in_equals_the_plain_function(kernels: ModuleType, fp8: bool, shape: tuple[int, ...]) -> None:
    """The new residual is torch's sum exactly (one rounding of two values); its norm as ``norm_in``'s. The GEMM
    output's padding rows are dropped, the residual stream is not written in place."""
    dim = shape[3]
    x, out, weight = residual(dim), gemm_output(dim).contiguous(), norm_weight(dim)
    before = x.clone()
    got_x, got = kernels.residual_norm_in(out, x, weight, EPS, scale_of(fp8), 16)
    want_x, want = elementwise.residual_norm_in(out, x, weight, EPS, scale_of(fp8), 16)
    assert torch.equal(got_x, want_x) and torch.equal(x, before)
    assert_gemm_input(got, want, fp8)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rotary_qk_equals_the_plain_function(kernels: ModuleType, shape: tuple[int, ...]) -> None:
    heads, kv_heads, head_dim = shape[:3]
    fused = gemm_output((heads + 2 * kv_heads) * head_dim)
    assert fused.stride(0) > fused.shape[1]
    angles = torch.rand(TOKENS, head_dim // 2, generator=torch.Generator().manual_seed(3)) * 6.3
    rope = torch.stack((angles.cos(), angles.sin()), dim=-1)[:, None].to(DEVICE, DTYPE)  # as InflightLlama._rope
    got = kernels.rotary_qk(fused, rope, TOKENS, heads, kv_heads, head_dim)
    want = elementwise.rotary_qk(fused, rope, TOKENS, heads, kv_heads, head_dim)
    for name, g, w in zip("qkv", got, want, strict=True):
        assert g.shape == w.shape and g.is_contiguous(), name
        if CUDA or name == "v":  # each product and sum rounded to bf16 where torch's operations round
            assert torch.equal(g, w), name
        else:
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=name)
    assert not torch.equal(got[1], fused[:TOKENS, heads * head_dim: (heads + kv_heads) * head_dim].reshape(
        TOKENS, kv_heads, head_dim)), "keys rotated"


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["16-bit", "fp8"])
def test_mlp_in_equals_the_plain_function(kernels: ModuleType, fp8: bool, shape: tuple[int, ...]) -> None:
    fused = gemm_output(2 * shape[4])
    got = kernels.mlp_in(fused, TOKENS, scale_of(fp8), 16)
    assert_gemm_input(got, elementwise.mlp_in(fused, TOKENS, scale_of(fp8), 16), fp8)


def test_an_empty_pass_launches_nothing(kernels: ModuleType) -> None:
    x, weight = residual(64)[:0], norm_weight(64)
    assert kernels.norm_in(x, weight, EPS, None, 16).shape == (0, 64)
    assert kernels.mlp_in(gemm_output(64)[:0], 0, scale_of(True), 16).shape == (0, 32)


def test_what_the_kernels_do_not_take_runs_the_plain_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU tensors, a head size that is no power of two and a norm weight of another dtype stay with the plain
    functions, which are the definition; a direct call with such a head is refused rather than computed wrongly.
    Without ``compiled`` the prompt pass runs the plain functions themselves (the baseline)."""
    from code.llama31 import prefill_kernels

    assert prefill_kernels.supports(128) and prefill_kernels.supports(16) and not prefill_kernels.supports(48)
    assert not prefill_kernels.available(torch.zeros(1, 4), 128)
    assert not prefill_kernels.available_norm(torch.zeros(1, 4), torch.zeros(4))
    asked = []
    monkeypatch.setattr(prefill_kernels, "available", lambda x, head_dim=2: asked.append(head_dim))
    fused = torch.randn(5, 6 * 48)
    rope = torch.randn(5, 1, 24, 2)
    q, k, v = elementwise.rotary_qk_prefill(fused, rope, 5, 4, 1, 48)
    assert q.shape == (5, 4, 48) and k.shape == v.shape == (5, 1, 48) and asked == [48]
    assert elementwise.mlp_in_prefill(fused, 5, None, 16).shape == (5, 3 * 48)
    with pytest.raises(ValueError, match="not 48"):
        prefill_kernels.rotary_qk(fused, rope, 5, 4, 1, 48)
    plain = elementwise.Elementwise(compiled=False)
    assert plain.prefill == plain.decode == elementwise.ElementwiseFunctions(
        elementwise.norm_in, elementwise.residual_norm_in, elementwise.rotary_qk, elementwise.mlp_in)


@pytest.mark.skipif(CUDA, reason="the interpreted kernels in the tiny model; on a GPU check_llama_inflight compares")
def test_a_prompt_pass_through_the_kernels_gives_the_plain_logits(kernels: ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny model's prefill with the four kernels where ``Elementwise(compiled=True)`` puts them (the GEMMs'
    real outputs, their row strides, the residual stream through both layers): the plain pass's logits up to
    float32 rounding (1.7e-7 measured). Not with FP8 GEMMs here: the interpreter's lost carry
    (``assert_e4m3_close``) halves about 1% of e4m3 values, 6% on the logits; the unit tests above set those aside."""
    from code.llama31.inflight_model import InflightLlama
    from tests.llama31.test_inflight import made_model

    inflight = InflightLlama.from_model(made_model())
    prompts = [torch.arange(1, 20), torch.arange(100, 131), torch.arange(7, 12)]
    want = inflight.prompt_logits(prompts)
    monkeypatch.setattr(kernels, "available", lambda x, head_dim=2: kernels.supports(head_dim))
    fused = elementwise.ElementwiseFunctions(elementwise.norm_in_prefill, elementwise.residual_norm_in_prefill,
                                             elementwise.rotary_qk_prefill, elementwise.mlp_in_prefill)
    monkeypatch.setattr(inflight.elementwise, "prefill", fused)
    got = inflight.prompt_logits(prompts)
    error = float((got - want).norm() / want.norm())
    assert 0 <= error < 1e-5, error
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_the_compiled_decode_functions_round_as_the_plain_ones() -> None:
    """``Elementwise(compiled=True)``'s decode functions (Inductor, here on the CPU) in bf16: the plain functions'
    results bit for bit, FP8 input included (Inductor told to round its intermediates where torch does)."""
    g = torch.Generator().manual_seed(5)
    tokens, heads, kv_heads, head_dim, dim, width = 8, 4, 2, 16, 64, 96
    x = torch.randn(tokens, dim, generator=g).bfloat16()
    out = torch.randn(tokens + 8, dim, generator=g).bfloat16()
    w = (1 + torch.randn(dim, generator=g) / 4).bfloat16()
    fused = torch.randn(tokens + 8, (heads + 2 * kv_heads) * head_dim, generator=g).bfloat16()
    rope = torch.randn(tokens, 1, head_dim // 2, 2, generator=g).bfloat16()
    gate_up = (torch.randn(tokens + 8, 2 * width, generator=g) * 3).bfloat16()
    scale = torch.tensor(4.0 / 448)
    compiled, plain = elementwise.Elementwise(compiled=True).decode, elementwise.Elementwise(compiled=False).decode
    with torch.inference_mode():
        calls = [("norm_in", (x, w, EPS, None, 16)), ("residual_norm_in", (out, x, w, EPS, scale, 16)),
                 ("rotary_qk", (fused, rope, tokens, heads, kv_heads, head_dim)),
                 ("mlp_in", (gate_up, tokens, None, 16)), ("mlp_in", (gate_up, tokens, scale, 16))]
        for name, args in calls:
            got, want = getattr(compiled, name)(*args), getattr(plain, name)(*args)
            got, want = (r if isinstance(r, tuple) else (r,) for r in (got, want))
            for one, other in zip(got, want, strict=True):
                assert one.shape == other.shape and one.dtype == other.dtype, name
                assert torch.equal(one.view(torch.uint8), other.view(torch.uint8)), name
