"""INT8 engines for BERT: the quantization's arithmetic, its kernels against the float32 definition, the packed model's
int8 path on the CPU, int8 engines, and the configuration's rules.

Without a GPU the Triton kernels run in Triton's CPU interpreter (tests/triton_interpreter.py) on small shapes, where
they must equal ``code.numerics.int8``'s definitions bit for bit (the interpreter computes float32 as NumPy does,
with no fused multiply-add), except where a LayerNorm or GELU computed two ways differs in its last float32 bit,
which may move a value across a rounding boundary: there one level, on few elements. The same kernels at BERT-large's
shapes, and their speed, are checked on a GPU by scripts/gpu/check_bert_packed.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from code.bert.backends.pytorch_engine import (
    MANIFEST,
    CalibrationSet,
    EngineError,
    EngineSpec,
    build_engine,
    engine_key,
    load_engine,
    load_engine_manifest,
)
from code.bert.model import BERT_CONFIGS, random_weights
from code.bert.packed.packed_model import PackedBert, TorchOps, collect_amax, run_packed
from code.bert.packed.packing import unpack
from code.bert.packed.spec import PackedKernels
from code.numerics import int8
from code.numerics.eight_bit import eight_bit_format
from code.numerics.int8 import INT8, INT8_MAX, dequantize, quantize, quantize_weight, reference_gemm
from code.numerics.int8_linear import Int8Linear
from tests.triton_interpreter import interpreted_module

TINY = BERT_CONFIGS["tiny"]
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def rounding_flips(got: torch.Tensor, want: torch.Tensor, share: float = 0.01) -> None:
    """int8 tensors equal but for at most one level on at most ``share`` of the elements."""
    diff = (got.cpu().int() - want.cpu().int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) <= share, (int(diff.max()), diff.float().mean())


# ------------------------------------------------------------------------------------------------ the arithmetic


def test_quantize_rounds_half_to_even_and_saturates():
    scale = 0.25  # a power of two: x * (1 / scale) is exact, so the ties below are ties
    levels = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 127.4, 300.0, -1e9, 0.0])
    q = quantize(levels * scale, scale)
    assert q.dtype == INT8
    assert q.tolist() == [0, 2, 2, 0, -2, -2, 126, -126, 127, 127, -127, 0]  # -128 is never written
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 3
    scale = int8.scale_from_amax(float(x.abs().max()))
    assert scale == pytest.approx(float(x.abs().max()) / INT8_MAX)
    err = (dequantize(quantize(x, scale), scale) - x).abs()
    assert float(err.max()) <= int8.INT8_ABS_ERROR * scale * (1 + 1e-6)
    assert int8.scale_from_amax(0.0) > 0
    with pytest.raises(ValueError, match="amax"):
        int8.scale_from_amax(float("inf"))


def test_weights_get_one_scale_per_output_channel():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 40, generator=g) * torch.tensor([1e-3, 0.01, 0.1, 1.0, 10.0, 0.0])[:, None]
    q, scale = quantize_weight(w)
    assert q.dtype == INT8 and scale.dtype == torch.float32 and scale.shape == (6,)
    assert q[:5].abs().amax(dim=1).tolist() == [127] * 5 and not q[5].any()  # every row uses its whole range
    err = (dequantize(q, scale[:, None]) - w).abs()
    assert bool((err <= 0.5 * scale[:, None] * (1 + 1e-6)).all())  # each row within half of its own step
    with pytest.raises(ValueError, match=r"\[N, K\]"):
        quantize_weight(w[0])


def test_int8_linear_is_exact_int32_arithmetic():
    """The CPU path is the definition: int32 products summed exactly, then one float32 multiply by ``act_scale *
    w_scale[n]`` and one float32 add of the bias; GELU (tanh) and the int8 output apply to that float32 value."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(9, 200, generator=g) * 4, torch.randn(24, 200, generator=g) * 0.05
    bias = (torch.randn(24, generator=g) * 0.3).half()
    lin = Int8Linear(w, float(x.abs().max()), torch.float32)
    xq = lin.quantize_input(x)
    acc = xq.numpy().astype(np.int64) @ lin.weight_q.numpy().astype(np.int64).T
    assert np.abs(acc).max() < 2**31
    scale = lin.weight_scale * torch.tensor(lin.act_scale_value, dtype=torch.float32)
    assert torch.equal(lin.dequant_scale, scale)
    want = torch.from_numpy(acc.astype(np.float32)) * scale + bias.float()
    assert torch.equal(lin(xq, bias), want)
    assert torch.equal(lin(xq), torch.from_numpy(acc.astype(np.float32)) * scale)
    gelu = F.gelu(want, approximate="tanh")
    assert torch.equal(lin(xq, bias, gelu=True), gelu)
    assert torch.equal(lin(xq, bias, gelu=True, out_scale=0.01), quantize(gelu, 0.01))
    # close to the float32 product: the rounding of x and of each weight row, nothing more
    exact = x @ w.t() + bias.float()
    assert float((lin(xq, bias) - exact).norm() / exact.norm()) < 0.02
    with pytest.raises(ValueError, match="method"):
        Int8Linear(w, 1.0, torch.float16, method="cutlass")


def test_formats_share_one_interface():
    fp8, i8 = eight_bit_format("fp8"), eight_bit_format("int8")
    assert (fp8.dtype, fp8.largest, i8.dtype, i8.largest) == (torch.float8_e4m3fn, 448.0, INT8, 127.0)
    w = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    assert isinstance(i8.linear(w, 2.0, torch.float16, False), Int8Linear)
    assert fp8.linear(w, 2.0, torch.float16, True).fast_accum
    with pytest.raises(ValueError, match="accumulate exactly in int32"):
        i8.linear(w, 2.0, torch.float16, True)
    with pytest.raises(ValueError, match="fp8, int8"):
        eight_bit_format("int4")


# ------------------------------------------------------------------------------------------------- the kernels


@pytest.fixture(scope="module")
def gemm() -> Iterator[ModuleType]:
    yield from interpreted_module("code.numerics.int8_gemm", "_int8_gemm_kernel")


@pytest.fixture(scope="module")
def quantizer() -> Iterator[ModuleType]:
    yield from interpreted_module("code.numerics.int8", "_quantize_kernel")


@pytest.fixture(scope="module")
def kernels() -> Iterator[ModuleType]:
    yield from interpreted_module("code.bert.packed.kernels", "_add_ln_kernel")


def gemm_case(m: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, Int8Linear, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(m, k, generator=g) * 2, torch.randn(n, k, generator=g) * 0.05
    bias = (torch.randn(n, generator=g) * 0.5).half()
    lin = Int8Linear(w.to(DEVICE), float(x.abs().max()), torch.float16)
    return lin.quantize_input(x.to(DEVICE)), lin, bias.to(DEVICE)


@pytest.mark.parametrize("shape", [(37, 96, 80), (64, 128, 64)], ids=["tails, K not a multiple", "even"])
@pytest.mark.parametrize("epilogue", [{}, {"gelu": True}, {"out_scale": 0.03}, {"gelu": True, "out_scale": 0.03}],
                         ids=["fp16", "gelu", "int8", "gelu int8"])
def test_gemm_kernel_equals_the_definition(gemm, shape, epilogue):
    """The fused kernel against ``reference_gemm``: equal (the int32 accumulator and the float32 epilogue are the same
    operations), but for tanh GELU, which the kernel computes from exp: one fp16 unit or one int8 level, rarely."""
    xq, lin, bias = gemm_case(*shape)
    tile = None if CUDA else gemm.Int8Tile(32, 32, 64, 2, 4, 1)
    got = gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, bias, tile=tile, **epilogue)
    want = reference_gemm(xq, lin.weight_q, lin.dequant_scale, bias, **epilogue)
    assert got.dtype == want.dtype == (INT8 if "out_scale" in epilogue else torch.float16)
    if "gelu" not in epilogue and not CUDA:
        assert torch.equal(got, want)
    elif want.dtype == INT8:
        rounding_flips(got, want)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=1e-3)
    no_bias = gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, tile=tile)
    torch.testing.assert_close(no_bias.float(), reference_gemm(xq, lin.weight_q, lin.dequant_scale).float(),
                               rtol=1e-3, atol=1e-3)


def test_int_mm_variant_equals_the_fused_kernel(gemm):
    """``method="int_mm"``: cuBLAS's (here the CPU's) int32 product, then the same epilogue as a second kernel."""
    xq, lin, bias = gemm_case(40, 64, 48, seed=1)
    tile = None if CUDA else gemm.Int8Tile(32, 16, 32, 1, 4, 1)
    for epilogue in ({}, {"gelu": True, "out_scale": 0.03}):
        fused = gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, bias, tile=tile, **epilogue)
        pair = gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, bias, method="int_mm", **epilogue)
        assert torch.equal(fused, pair)


def test_gemm_refuses_bad_inputs(gemm):
    xq, lin, bias = gemm_case(8, 32, 16)
    with pytest.raises(ValueError, match="int8 matrices"):
        gemm.int8_gemm(xq.float(), lin.weight_q, lin.dequant_scale)
    with pytest.raises(ValueError, match=r"X \[M, 32\]"):
        gemm.int8_gemm(xq[:, :16], lin.weight_q, lin.dequant_scale)
    with pytest.raises(ValueError, match="float32 \\[16\\]"):
        gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale.half())
    with pytest.raises(ValueError, match="bias"):
        gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, bias[:8])
    with pytest.raises(ValueError, match="out_scale"):
        gemm.int8_gemm(xq, lin.weight_q, lin.dequant_scale, out_dtype=INT8)
    assert gemm.int8_gemm(xq[:0], lin.weight_q, lin.dequant_scale).shape == (0, 16)


def test_gemm_tiles_cover_every_m_and_fit_the_smallest_gpu(gemm):
    """Every M has a tile range, each range's first tile fits an H100/H200 or A100 (227/163 KB of shared memory
    per block) and its last an A10 (99 KB); tl.dot of int8 needs K steps of at least 32."""
    limits = [limit for limit, _ in gemm.TILES]
    assert limits == sorted(limits) and limits[-1] >= 2**40
    for _, tiles in gemm.TILES:
        assert tiles[0].smem_bytes <= 163 * 1024 - gemm.SMEM_RESERVE
        assert tiles[-1].smem_bytes <= 99 * 1024 - gemm.SMEM_RESERVE
        assert all(t.block_k >= 32 and t.block_m >= 16 and t.block_n >= 16 for t in tiles)


def test_quantize_kernel_equals_quantize(quantizer):
    scale = 0.125
    ties = (torch.arange(-130, 130, dtype=torch.float32) + 0.5) * scale
    x = torch.cat((ties, torch.randn(3001, generator=torch.Generator().manual_seed(4)) * 9)).to(DEVICE)
    got = quantizer.quantize_cuda(x, scale, rows=x.shape[0] + 5)
    assert got.dtype == INT8 and torch.equal(got[: x.shape[0]], quantize(x, scale)) and not got[x.shape[0]:].any()


def test_elementwise_kernels_write_int8_copies(kernels):
    """embed+LN, add+LN and bias+GELU write the int8 copy ``TorchOps`` computes (the LayerNorm statistics differ in
    their last float32 bit between the two, so a value may round one level apart)."""
    ops, g = kernels.TritonOps, torch.Generator().manual_seed(5)
    rows, h, f, q = 37, 64, 128, 0.05

    def rnd(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(DEVICE)

    word, typ, pos = rnd(100, h, std=0.5), rnd(2, h, std=0.5), rnd(64, h, std=0.5)
    w, b = 1 + rnd(h, std=0.1), rnd(h, std=0.1)
    ids = torch.randint(0, 100, (rows,), generator=g, dtype=torch.int32).to(DEVICE)
    segs = torch.randint(0, 2, (rows,), generator=g, dtype=torch.int32).to(DEVICE)
    poss = torch.randint(0, 64, (rows,), generator=g, dtype=torch.int32).to(DEVICE)
    x, res, bias, hh, b1 = rnd(rows, h, std=3.0), rnd(rows, h), rnd(h), rnd(rows, f, std=2.0), rnd(f, std=0.5)
    for keep in (True, False):
        for name, args in (("embed_ln", (ids, segs, poss, word, typ, pos, w, b, 1e-12)),
                           ("add_ln", (x, bias, res, w, b, 1e-12))):
            out, got = getattr(ops, name)(*args, q, keep_out=keep, q_dtype=INT8)
            ref, want = getattr(TorchOps, name)(*args, q, q_dtype=INT8)
            assert got.dtype == INT8 and (out is None) != keep
            rounding_flips(got, want)
            if keep:
                torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        out, got = ops.bias_gelu(hh, b1, q, keep, q_dtype=INT8)
        ref, want = TorchOps.bias_gelu(hh, b1, q, True, q_dtype=INT8)
        assert got.dtype == INT8 and (out is None) != keep
        rounding_flips(got, want)
    assert torch.equal(ops.quantize(x, q, INT8), TorchOps.quantize(x, q, INT8))
    with pytest.raises(ValueError, match="q_dtype"):
        ops.bias_gelu(hh, b1, q, True, q_dtype=torch.int16)


# -------------------------------------------------------------------------------------------- the packed model


def batch(lengths: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, TINY.vocab_size, (len(lengths), max(lengths)), dtype=np.int32)
    seg, mask = np.zeros_like(ids), np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        seg[row, n // 2 : n] = 1
        mask[row, :n] = 1
    return ids, seg, mask


LENGTHS = [30, 17, 25, 40, 9, 33, 21, 12]


@pytest.fixture(scope="module")
def tiny() -> tuple:
    model = random_weights(TINY, 4)
    ids, seg, mask = batch(LENGTHS, seed=2)
    with torch.no_grad():
        amax = collect_amax(model, ids, seg, mask, "cpu", torch.float32)
        ref, packed = run_packed(PackedBert(model, torch.float32, "cpu"), ids, seg, mask)
    return model, amax, (ids, seg, mask), ref, packed


def spans(logits: np.ndarray) -> list[tuple[int, int]]:
    return [(int(row[:n, 0].argmax()), int(row[:n, 1].argmax())) for row, n in zip(logits, LENGTHS, strict=True)]


@pytest.mark.parametrize("options", [{}, {"gelu_in_gemm": True}, {"fp8_gemms": "w1+w2"}, {"fp8_gemms": "qkv+w1"}],
                         ids=["all", "gelu-in-gemm", "ffn only", "qkv+w1"])
@torch.no_grad()
def test_packed_int8_forward_agrees_with_float32(tiny, options):
    """An int8 engine's CPU path (the kernels' arithmetic in float32/int32) against the float32 packed model: logits
    within 1% (relative L2) and closer than the FP8 engine's; the same best span for as many sequences as the FP8
    engine, and at least 7 of 8 (the tiny random model's start/end logits are nearly flat, so a near tie may flip)."""
    model, amax, inputs, ref, packed = tiny
    pm = PackedBert(model, torch.float32, "cpu", amax=amax, kernels=PackedKernels(precision="int8", **options))
    gemms = options.get("fp8_gemms", "qkv+wo+w1+w2").split("+")
    assert all(sorted(layer.q8) == sorted(gemms) and all(isinstance(q, Int8Linear) for q in layer.q8.values())
               for layer in pm.layers)
    got, _ = run_packed(pm, *inputs)
    t = packed.total
    rel = float(np.linalg.norm(got[:t] - ref[:t]) / np.linalg.norm(ref[:t]))
    fp8, _ = run_packed(PackedBert(model, torch.float32, "cpu", amax=amax,
                                   kernels=PackedKernels(precision="fp8", **options)), *inputs)
    rel_fp8 = float(np.linalg.norm(fp8[:t] - ref[:t]) / np.linalg.norm(ref[:t]))
    assert 0 < rel < min(0.01, rel_fp8), (rel, rel_fp8)
    want = spans(unpack(ref, packed))
    agree, agree_fp8 = (np.mean([a == b for a, b in zip(spans(unpack(o, packed)), want, strict=True)])
                        for o in (got, fp8))
    assert agree >= max(agree_fp8, 7 / 8), (agree, agree_fp8)


@torch.no_grad()
def test_packed_int8_gelu_gemm_needs_an_int8_w1(tiny):
    model, amax, *_ = tiny
    fused = PackedBert(model, torch.float32, "cpu", amax=amax,
                       kernels=PackedKernels(precision="int8", gelu_in_gemm=True))
    assert all(callable(layer.gelu_gemm) for layer in fused.layers)
    w2_only = PackedBert(model, torch.float32, "cpu", amax=amax,
                         kernels=PackedKernels(precision="int8", gelu_in_gemm=True, fp8_gemms="w2"))
    assert all(layer.gelu_gemm is None for layer in w2_only.layers)  # no 16-bit GEMM writes int8


def test_packed_int8_refuses_fp8_only_options():
    """The int8 spec refuses FP8's own switches when it is made, with the configuration's rule (one set of rules)."""
    for option in ("fp8_residual", "fp8_attention"):
        with pytest.raises(ValueError, match=f"{option} = True keeps e4m3 tensors for FP8 kernels, and precision = "
                                             "'int8' runs INT8 GEMMs, which have no FP8 form"):
            PackedKernels(precision="int8", **{option: True})
    with pytest.raises(ValueError, match="fp8_fast_accum = True sets how FP8 GEMMs accumulate, and precision = 'int8' "
                                         "runs none"):
        PackedKernels(precision="int8", fp8_fast_accum=True)
    with pytest.raises(ValueError, match="runs fp16, bf16, fp8, int8 engines, not 'int4'"):
        PackedKernels(precision="int4")


# ------------------------------------------------------------------------------------------------------ engines


def _calibration() -> CalibrationSet:
    ids, seg, mask = batch([12, 9, 16], seed=5)
    return CalibrationSet(ids, seg, mask, "test")


def test_int8_engine_is_calibrated_as_the_fp8_one(tmp_path):
    """Same calibration set, same magnitudes; another folder; the same manifest checks."""
    specs = {p: EngineSpec("tiny", p, "random", seed=1) for p in ("fp8", "int8")}
    assert engine_key(specs["int8"]) == "tiny-int8-random-s1" != engine_key(specs["fp8"])
    manifests = {}
    for precision, spec in specs.items():
        build_engine(spec, tmp_path / precision, calibration=_calibration(), device="cpu")
        model, manifests[precision] = load_engine_manifest(tmp_path / precision, spec, "cpu")
        assert {p.dtype for p in model.parameters()} == {torch.float16}
    assert manifests["int8"]["calibration"]["amax"] == manifests["fp8"]["calibration"]["amax"]
    path = tmp_path / "int8" / MANIFEST
    good = json.loads(path.read_text())
    path.write_text(json.dumps({**good, "calibration": None}))
    with pytest.raises(EngineError, match="int8 engine .* lacks calibrated activation scales"):
        load_engine(tmp_path / "int8", specs["int8"], "cpu")


def test_cpu_backend_runs_an_int8_engine_eagerly(tmp_path):
    """Off the GPU an int8 engine's model is its fp16 weights in float32 (the harness refuses such runs; tests and
    ``make agreement`` use them)."""
    from code.bert.backends import create_backend
    from code.bert.backends.pytorch import PytorchOptions

    spec = EngineSpec("tiny", "int8", "random")
    build_engine(spec, tmp_path / "e", calibration=_calibration(), device="cpu")
    backend = create_backend("pytorch", PytorchOptions(device="cpu", engine_dir=tmp_path / "e", engine_spec=spec))
    assert backend.packed is None
    out = backend.run_batch(np.arange(2), *batch([8, 3]))
    assert out.dtype == np.float32 and out.shape == (2, 8, 2) and np.isfinite(out).all()


# ---------------------------------------------------------------------------------------------- configuration


def resolved(benchmark: object, **overrides: object) -> object:
    from code.common.constants import AccuracyTarget, HarnessType, PowerSetting, Scenario
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting

    workload = WorkloadSetting(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    return resolve_config(benchmark, Scenario.Offline, "CPU", workload, overrides)


def test_int8_is_a_gpu_precision_of_bert():
    from code.common.constants import Benchmark
    from code.config.fields import FIELDS, check_device

    assert "int8" in FIELDS["precision"].choices and "INT8 GEMMs with calibrated scales" in FIELDS[
        "precision"].description
    config = resolved(Benchmark.BERT, precision="int8")
    check_device(Benchmark.BERT, config.values, config.sources, "cuda")
    with pytest.raises(ValueError, match=r"precision=int8 .*needs a GPU \(INT8 GEMMs run on the packed CUDA path, "
                                         r"compute capability 8\.0 or newer\) and this run is on --device=cpu; "
                                         r"set --precision=fp32"):
        check_device(Benchmark.BERT, config.values, config.sources, "cpu")


@pytest.mark.parametrize("option", ["fp8_residual", "fp8_attention"])
def test_int8_refuses_the_fp8_only_options(option):
    from code.common.constants import Benchmark

    with pytest.raises(ValueError, match=f"{option} = True keeps e4m3 tensors for FP8 kernels.*'int8' runs INT8 "
                                         f"GEMMs.*leave {option} out with int8"):
        resolved(Benchmark.BERT, precision="int8", **{option: True})
    with pytest.raises(ValueError, match="fp8_fast_accum = True sets how FP8 GEMMs accumulate"):
        resolved(Benchmark.BERT, precision="int8", fp8_fast_accum=True)
    with pytest.raises(ValueError, match="'int8' runs INT8 GEMMs on the packed path only"):
        resolved(Benchmark.BERT, precision="int8", fast_path=False)
    resolved(Benchmark.BERT, precision="int8", fp8_gemms="w1+w2", gelu_in_gemm=True)  # the 8-bit options it takes


@pytest.mark.parametrize("backend", ["pytorch", "inflight"])
def test_gptj_has_no_int8(backend):
    from code.common.constants import Benchmark

    with pytest.raises(ValueError, match=r"'int8': no gptj backend runs it \(gptj runs fp32, bf16, fp16, fp8\)"):
        resolved(Benchmark.GPTJ, backend=backend, precision="int8")
