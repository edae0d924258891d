"""The packed GPU path's host logic on the CPU: packing, buckets, FP8 math, fp8 engines, and the packed model's CPU
fallback against the eager ``BertQA`` (the GPU kernels themselves are checked by scripts/gpu/check_bert_packed.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch

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
from code.bert.model import BERT_CONFIGS, BertQA, random_weights
from code.bert.packed.packed_model import PackedBert, calibration_names, collect_amax, run_packed
from code.bert.packed.packing import (
    PAD_LOGIT,
    choose_bucket,
    graph_slots,
    layout_words,
    pack_into,
    split_layout,
    token_buckets,
    unpack,
    unpack_samples,
)
from code.bert.packed.spec import PackedKernels
from code.numerics.fp8 import E4M3_MAX, E4M3_REL_ERROR, E4M3_SUBNORMAL_STEP, dequantize, quantize, scale_from_amax

TINY = BERT_CONFIGS["tiny"]


def packed_bert(model: BertQA, amax: dict[str, float] | None = None, **switches: object) -> PackedBert:
    """The float32 packed model on the CPU: an FP8 engine (its spec's precision) where ``amax`` is given, else a
    16-bit one, running the packed path's ``switches``."""
    kernels = PackedKernels(precision="fp8" if amax is not None else "fp16", **switches)  # type: ignore[arg-type]
    return PackedBert(model, torch.float32, "cpu", amax=amax, kernels=kernels)


def batch(lengths: list[int], seq_len: int | None = None, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    seq_len = seq_len or max(lengths)
    ids = rng.integers(1000, TINY.vocab_size, (len(lengths), seq_len), dtype=np.int32)
    seg, mask = np.zeros_like(ids), np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        seg[row, n // 2 : n] = 1
        mask[row, :n] = 1
    return ids, seg, mask


def test_pack_round_trip():
    lengths = [5, 1, 9, 3]
    ids, seg, mask = batch(lengths)
    buffer = np.full(200, -7, dtype=np.int32)
    packed = pack_into(buffer, ids, seg, mask, padded_total=32, slots=6)
    assert (packed.total, packed.padded_total, packed.slots, packed.max_len) == (18, 32, 6, 9)
    tokens, segments, positions, cu = split_layout(buffer, packed)
    assert cu.tolist() == [0, 5, 6, 15, 18, 18, 18]  # empty slots after the last sequence
    assert tokens[:18].tolist() == ids[mask == 1].tolist() and not tokens[18:].any()
    assert segments[:18].tolist() == seg[mask == 1].tolist() and not segments[18:].any()
    assert positions[:18].tolist() == [*range(5), 0, *range(9), *range(3)] and not positions[18:].any()
    assert packed.words == layout_words(32, 6) and (buffer[packed.words :] == -7).all()  # nothing past the layout
    logits = np.random.default_rng(1).standard_normal((32, 2)).astype(np.float32)
    out = unpack(logits, packed)
    assert out.shape == (4, 9, 2) and out.dtype == np.float32
    np.testing.assert_array_equal(out[mask == 1], logits[:18])
    assert (out[mask == 0] == PAD_LOGIT).all()
    samples = unpack_samples(logits, packed)
    assert [s.shape for s in samples] == [(n, 2) for n in lengths]
    np.testing.assert_array_equal(np.concatenate(samples), logits[:18])


def test_pack_defaults_and_errors():
    ids, seg, mask = batch([3, 2])
    buffer = np.zeros(100, dtype=np.int32)
    packed = pack_into(buffer, ids, seg, mask)
    assert (packed.padded_total, packed.slots) == (16, 2)  # rounded up to TOKEN_ALIGN
    with pytest.raises(ValueError, match="into 4 rows"):
        pack_into(buffer, ids, seg, mask, padded_total=4)
    with pytest.raises(ValueError, match="int32"):
        pack_into(np.zeros(10, dtype=np.int32), ids, seg, mask)


def test_buckets():
    buckets = token_buckets(16384)
    assert buckets[0] == 128 and buckets[-1] >= 16384 and buckets == sorted(set(buckets))
    assert all(b % 128 == 0 for b in buckets)
    assert all(b2 / b1 <= 2.0 for b1, b2 in zip(buckets, buckets[1:], strict=False))
    assert len(buckets) < 40
    big = [b for b in buckets if b > 2048]
    assert all(b2 / b1 < 1.2 for b1, b2 in zip(big, big[1:], strict=False))  # small padding waste
    assert choose_bucket(buckets, 1) == 128 and choose_bucket(buckets, 128) == 128
    assert choose_bucket(buckets, 129) == 256
    assert choose_bucket(buckets, buckets[-1] + 1) is None
    assert graph_slots(128, 1) == 1 and graph_slots(16384, 512) == 256 and graph_slots(16384, 64) == 64
    with pytest.raises(ValueError):
        token_buckets(100, growth=1.0)


def test_scale_math():
    assert scale_from_amax(448.0) == 1.0
    assert scale_from_amax(10.0, margin=2.0) == pytest.approx(20.0 / E4M3_MAX)
    assert scale_from_amax(0.0) > 0
    with pytest.raises(ValueError):
        scale_from_amax(float("nan"))
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 3
    scale = scale_from_amax(float(x.abs().max()))
    q = quantize(x, scale)
    assert q.dtype == torch.float8_e4m3fn and q.float().abs().max() <= E4M3_MAX
    err = (dequantize(q, scale) - x).abs()
    bound = torch.maximum(x.abs() * E4M3_REL_ERROR, torch.full_like(x, E4M3_SUBNORMAL_STEP * scale))
    assert (err <= bound * 1.0001).all()
    saturated = float(dequantize(quantize(torch.tensor([1e6]), scale), scale))
    assert saturated == pytest.approx(E4M3_MAX * scale)


@torch.no_grad()
def test_cpu_fallback_matches_eager():
    model = random_weights(TINY, 3)
    lengths = [20, 7, 33, 1, 12]
    ids, seg, mask = batch(lengths)
    expected = model(*(torch.from_numpy(a) for a in (ids, seg, mask))).numpy()
    logits, packed = run_packed(PackedBert(model, torch.float32, "cpu"), ids, seg, mask)
    out = unpack(logits, packed)
    for row, n in enumerate(lengths):
        np.testing.assert_allclose(out[row, :n], expected[row, :n], atol=1e-5, rtol=1e-5)


class TinyFp8Case(NamedTuple):
    """A tiny random model, its FP8 calibration on three packed sequences, and ``rel_error(amax, **switches)``:
    the relative L2 distance of that packed model's logits from the float32 packed model's on the same inputs."""

    model: BertQA
    amax: dict[str, float]
    rel_error: Callable[..., float]


@pytest.fixture(scope="module")
def tiny_fp8() -> TinyFp8Case:
    model = random_weights(TINY, 4)
    ids, seg, mask = batch([30, 17, 25], seed=2)
    with torch.no_grad():
        amax = collect_amax(model, ids, seg, mask, "cpu", torch.float32)
        ref, packed = run_packed(PackedBert(model, torch.float32, "cpu"), ids, seg, mask)
    t = packed.total

    @torch.no_grad()
    def rel_error(amax: dict[str, float] | None = None, **switches: object) -> float:
        got, _ = run_packed(packed_bert(model, amax, **switches), ids, seg, mask)
        return float(np.linalg.norm(got[:t] - ref[:t]) / np.linalg.norm(ref[:t]))

    return TinyFp8Case(model, amax, rel_error)


def test_fp8_emulation_close_to_fp32(tiny_fp8):
    amax = tiny_fp8.amax
    assert sorted(amax) == sorted(calibration_names(TINY.num_layers)) and all(v > 0 for v in amax.values())
    rel = tiny_fp8.rel_error(amax=amax)
    assert 0 < rel < 0.05
    with pytest.raises(ValueError, match="activation scale"):
        packed_bert(tiny_fp8.model, {"0.qkv": 1.0})
    # the calibration is the engine's: an 8-bit spec needs one, a 16-bit spec takes none
    with pytest.raises(ValueError, match="a fp8 engine needs activation magnitudes"):
        PackedBert(tiny_fp8.model, torch.float32, "cpu", kernels=PackedKernels(precision="fp8"))
    with pytest.raises(ValueError, match="a fp16 engine takes no activation magnitudes"):
        PackedBert(tiny_fp8.model, torch.float32, "cpu", amax=amax)


def test_fp8_gemm_subset_runs_the_rest_in_16_bits(tiny_fp8):
    model, amax, rel_error = tiny_fp8
    ffn_only = packed_bert(model, amax, fp8_gemms="w1+w2")
    assert all(sorted(layer.q8) == ["w1", "w2"] and sorted(layer.w16) == ["qkv", "wo"] for layer in ffn_only.layers)
    everything, ffn = rel_error(amax=amax), rel_error(amax=amax, fp8_gemms="w1+w2")
    assert 0 < ffn < everything  # fewer FP8 GEMMs, less rounding noise, but still FP8 in the FFN


def test_gelu_in_gemm_emulation(tiny_fp8):
    """gelu_in_gemm makes w1 one GEMM with bias + tanh GELU in its epilogue (cuBLASLt on CUDA, float32 emulation
    here) for every pair of w1/w2 precisions but a 16-bit w1 feeding an FP8 w2 (no 16-bit GEMM writes FP8): each as
    close to float32 as the same engine with the separate erf-GELU kernel (the tanh form differs by < 1e-3)."""
    model, amax, rel_error = tiny_fp8
    cases = {"fp16": {}, "fp8 all": {"amax": amax}, "fp8 w1": {"amax": amax, "fp8_gemms": "qkv+w1"}}
    for name, kwargs in cases.items():
        fused_model = packed_bert(model, gelu_in_gemm=True, **kwargs)
        assert all(callable(layer.gelu_gemm) for layer in fused_model.layers), name
        fused, plain = rel_error(gelu_in_gemm=True, **kwargs), rel_error(gelu_in_gemm=False, **kwargs)
        assert 0 < fused < 1.5 * plain + 1e-3, (name, fused, plain)
    fp16_w1 = packed_bert(model, amax, gelu_in_gemm=True, fp8_gemms="w2")
    assert all(layer.gelu_gemm is None for layer in fp16_w1.layers)
    off = packed_bert(model, amax)
    assert all(layer.gelu_gemm is None for layer in off.layers)  # off by default: erf GELU, the reference's form


def test_fp8_residual_emulation(tiny_fp8):
    """fp8_residual keeps the residual stream only as e4m3, with and without the GELU epilogue: further from float32
    than the FP8 engine without it (here ~20x: random weights make the residual most of each layer's output, so its
    rounding reaches the logits nearly whole), yet within one e4m3 rounding's relative error (the LayerNorms keep the
    roundings of successive layers from compounding); it needs every GEMM in FP8 (a 16-bit GEMM would have no 16-bit
    input)."""
    model, amax, rel_error = tiny_fp8
    for gelu in (False, True):
        plain = rel_error(amax=amax, gelu_in_gemm=gelu)
        residual = rel_error(amax=amax, gelu_in_gemm=gelu, fp8_residual=True)
        assert plain < residual < E4M3_REL_ERROR, (gelu, plain, residual)
    # each residual must be read with the scale it was written with: with w1's inputs calibrated 8x wider than
    # qkv's, a residual read with the other GEMM's scale is off by 8x and the logits by far more than one rounding
    wide_w1 = {name: value * 8 if name.endswith(".w1") else value for name, value in amax.items()}
    assert plain < rel_error(amax=wide_w1, fp8_residual=True) < E4M3_REL_ERROR
    for bad in ({}, {"amax": amax, "fp8_gemms": "w1+w2"}):
        with pytest.raises(ValueError, match="fp8_gemms=qkv\\+wo\\+w1\\+w2"):
            packed_bert(model, fp8_residual=True, **bad)


def test_fp8_attention_emulation(tiny_fp8):
    """fp8_attention rounds the QKV GEMM's output (bias included) to e4m3 with the calibrated scale of the attention's
    input: other logits than the FP8 engine without it, as close to float32 (here the two roundings' noise nearly
    cancels: the same distance within 10%), within one e4m3 rounding's relative error also beside the e4m3 residual;
    read with a scale calibrated 16x too narrow (q, k, v saturate) much further. It needs an FP8 qkv GEMM."""
    model, amax, rel_error = tiny_fp8
    plain = rel_error(amax=amax)
    attention = rel_error(amax=amax, fp8_attention=True)
    assert attention != plain and abs(attention - plain) < 0.1 * plain, (plain, attention)
    both = rel_error(amax=amax, fp8_attention=True, fp8_residual=True, gelu_in_gemm=True)
    assert both < E4M3_REL_ERROR
    narrow = {name: value / 16 if name.endswith(".attn") else value for name, value in amax.items()}
    assert rel_error(amax=narrow, fp8_attention=True) > 2 * attention
    for bad in ({}, {"amax": amax, "fp8_gemms": "wo+w1+w2"}):
        with pytest.raises(ValueError, match="qkv in --fp8_gemms"):
            packed_bert(model, fp8_attention=True, **bad)


def test_add_ln_reads_an_fp8_residual():
    """TorchOps.add_ln with an e4m3 residual equals the 16-bit path fed the dequantized residual, writes only what
    is asked, and refuses a residual whose dtype and scale disagree."""
    from code.bert.packed.packed_model import TorchOps

    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g)
    bias, w, b = torch.randn(64, generator=g), 1 + 0.1 * torch.randn(64, generator=g), torch.randn(64, generator=g)
    scale = scale_from_amax(float(res.abs().max()))
    rq = quantize(res, scale)
    y16, q16 = TorchOps.add_ln(x, bias, dequantize(rq, scale), w, b, 1e-12, 0.05)
    y8, q8 = TorchOps.add_ln(x, bias, rq, w, b, 1e-12, 0.05, residual_scale=scale, keep_out=False)
    assert y8 is None and torch.equal(q8.float(), q16.float())
    y8, _ = TorchOps.add_ln(x, bias, rq, w, b, 1e-12, None, residual_scale=scale)
    torch.testing.assert_close(y8, y16)
    with pytest.raises(ValueError, match="scale it was quantized with"):
        TorchOps.add_ln(x, bias, rq, w, b, 1e-12, 0.05)
    with pytest.raises(ValueError, match="needs q_scale"):
        TorchOps.add_ln(x, bias, res, w, b, 1e-12, None, keep_out=False)


def test_fp8_gemms_option_is_checked():
    """The spec takes what the field takes ('+'-joined GEMM names) and runs those GEMMs of an 8-bit engine in 8 bits;
    a 16-bit engine runs none."""
    assert PackedKernels(precision="fp8").gemms == {"qkv", "wo", "w1", "w2"}
    assert PackedKernels(precision="int8", fp8_gemms="w2+w1").gemms == {"w1", "w2"}
    assert PackedKernels(precision="fp16", fp8_gemms="w2+w1").gemms == frozenset()
    for bad in ("", "w3", "qkv,w1", " w2 + w1 "):
        with pytest.raises(ValueError, match="fp8_gemms"):
            PackedKernels(precision="fp8", fp8_gemms=bad)
    with pytest.raises(ValueError, match="runs fp16, bf16, fp8, int8 engines, not 'fp32'"):
        PackedKernels(precision="fp32")


def test_attention_options_on_the_cpu():
    """Off CUDA both attention kernels are the float32 per-sequence SDPA; a kernel the field does not name is refused
    when the spec is made."""
    model = random_weights(TINY, 3)
    assert PackedBert(model, torch.float32, "cpu").attention == "sdpa"
    assert packed_bert(model, attention_kernel="flash").attention == "sdpa"
    with pytest.raises(ValueError, match="attention_kernel' = 'xformers'; valid choices: triton, flash"):
        PackedKernels(attention_kernel="xformers")


def _calibration() -> CalibrationSet:
    ids, seg, mask = batch([12, 9, 16], seq_len=16, seed=5)
    return CalibrationSet(ids, seg, mask, "test")


def test_fp8_engine_round_trip_and_stale_checks(tmp_path):
    spec = EngineSpec("tiny", "fp8", "random", seed=1)
    assert engine_key(spec) == "tiny-fp8-random-s1"
    build_engine(spec, tmp_path / "e", calibration=_calibration(), device="cpu")
    model, manifest = load_engine_manifest(tmp_path / "e", spec, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float16}  # fp8 engines store fp16 weights
    cal = manifest["calibration"]
    assert cal["source"] == "test" and cal["count"] == 3 and cal["device"] == "cpu"
    assert sorted(cal["amax"]) == sorted(calibration_names(TINY.num_layers))

    path = tmp_path / "e" / MANIFEST
    good = json.loads(path.read_text())
    for broken in (
        {**good, "calibration": None},
        {**good, "calibration": {**cal, "amax": {k: v for k, v in cal["amax"].items() if k != "1.w2"}}},
        {**good, "calibration": {**cal, "amax": {**cal["amax"], "0.qkv": 0.0}}},
    ):
        path.write_text(json.dumps(broken))
        with pytest.raises(EngineError, match="(?s)(calibrat).*make generate_engines"):
            load_engine(tmp_path / "e", spec, "cpu")
    path.write_text(json.dumps(good))
    with pytest.raises(EngineError, match="precision: engine has 'fp8', run expects 'fp16'"):
        load_engine(tmp_path / "e", EngineSpec("tiny", "fp16", "random", seed=1), "cpu")


def test_an_fp8_engine_without_the_attention_inputs_is_rebuilt(tmp_path):
    """An fp8 engine calibrated before the attention inputs (``<layer>.attn``) were recorded is refused with a
    message that says so, and ``ensure_engine`` (what ``make run`` and ``make generate_engines`` call) rebuilds it."""
    from code.bert.backends.pytorch_engine import ensure_engine

    spec = EngineSpec("tiny", "fp8", "random")
    build_engine(spec, tmp_path / "e", device="cpu")
    path = tmp_path / "e" / MANIFEST
    older = json.loads(path.read_text())
    older["calibration"]["amax"] = {k: v for k, v in older["calibration"]["amax"].items() if not k.endswith(".attn")}
    path.write_text(json.dumps(older))
    with pytest.raises(EngineError, match=r"calibrated by an earlier version of this harness.*0\.attn.*rebuild it"):
        load_engine(tmp_path / "e", spec, "cpu")
    assert ensure_engine(spec, tmp_path / "e") is True
    amax = json.loads(path.read_text())["calibration"]["amax"]
    assert sorted(amax) == sorted(calibration_names(TINY.num_layers))
    assert ensure_engine(spec, tmp_path / "e") is False  # current now: kept


def test_fp8_engine_defaults_to_synthetic_calibration(tmp_path):
    spec = EngineSpec("tiny", "fp8", "random")
    build_engine(spec, tmp_path / "e", device="cpu")
    cal = json.loads((tmp_path / "e" / MANIFEST).read_text())["calibration"]
    assert cal["source"].startswith(("synthetic:", "mlperf:")) and cal["count"] > 0


def test_fp16_engine_has_no_calibration(tmp_path):
    build_engine(EngineSpec("tiny", "fp16"), tmp_path / "e")
    assert json.loads((tmp_path / "e" / MANIFEST).read_text())["calibration"] is None


def test_cpu_backend_runs_fp8_engine_eagerly(tmp_path):
    from code.bert.backends import create_backend
    from code.bert.backends.pytorch import PytorchOptions

    spec = EngineSpec("tiny", "fp8", "random")
    build_engine(spec, tmp_path / "e", calibration=_calibration(), device="cpu")
    backend = create_backend("pytorch", PytorchOptions(device="cpu", engine_dir=tmp_path / "e", engine_spec=spec))
    out = backend.run_batch(np.arange(2), *batch([8, 3]))
    assert out.dtype == np.float32 and out.shape == (2, 8, 2) and np.isfinite(out).all()
