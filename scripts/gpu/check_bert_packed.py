"""Check and time BERT's packed GPU path on the device (documentation/notes/bert_gpu_notes.md keeps the results).

1. Kernels: each Triton kernel against ``TorchOps`` (float32) on fresh random inputs; varlen flash attention against
   per-sequence SDPA in float32; ``||out - ref|| / ||ref||`` and max error.
2. Whole model: eager fp16 (padded), packed fp16/bf16 and packed fp8 against the eager float32 model on synthetic
   features: max/mean logit error and span agreement (argmax start and end, over each sample's tokens).
3. Forward variants (``--variants``): GPU ms of one packed forward per switch (attention kernel, GELU in the GEMM,
   which GEMMs in FP8) with each one's top kernels.
4. Timings through the backend's fast path (host packing, one H2D, forward, one D2H, unpacking): samples/s at the
   synthetic mean length and at 384 tokens, with and without CUDA graphs, for several batch sizes.
5. INT8 engines (steps ``int8_*``): each INT8 kernel against its float32 definition (``int8_kernels``); the INT8
   GEMM beside cuBLAS fp16 and cuBLASLt FP8 at BERT's four GEMM shapes over ~85k tokens, every tile and both methods
   (``int8_gemm``); the packed int8 model against eager float32 beside fp16 and fp8 (``int8_accuracy``); forward
   time of 512 mean-length samples for int8, fp8 with fast accumulation and fp16 (``int8_forward``); an int8 engine
   built and run by the pytorch backend with CUDA graphs, as ``make run --precision=int8`` does (``int8_runner``).

Run on the device: ``PYTHONPATH=$PWD python3 scripts/gpu/check_bert_packed.py --out $OUT``. Prints a short table last.
INT8 only (~2-3 minutes on an H200): ``... --skip gemm,kernels,accuracy,profile,variants,timing``.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from code.bert.dataset import BertFeatures
from code.bert.model import BERT_CONFIGS, BertQA, random_weights
from code.bert.packed.packed_model import (
    PackedBert,
    TorchOps,
    collect_amax,
    flash_varlen,
    run_packed,
    sdpa_varlen,
)
from code.bert.packed.packing import unpack
from code.bert.packed.spec import ALL_FP8_GEMMS, PackedKernels
from scripts.gpu.packed_variants import packed_bert
from scripts.gpu.steps import print_summary, result_rows, run_steps

ROWS: list[str] = []  # the short table printed last


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def elementwise_inputs(g: torch.Generator, dev: str, dtype: torch.dtype, rows: int, h: int, f: int) -> SimpleNamespace:
    """Random inputs of the LayerNorm, GELU and quantize kernels at width ``h`` (FFN width ``f``), ``rows`` tokens,
    with BERT's vocabulary, token types and positions: one set both kernel checks draw, so both test the same
    value ranges."""

    def rnd(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=dev) * std).to(dtype)

    def ints(high: int) -> torch.Tensor:
        return torch.randint(0, high, (rows,), generator=g, device=dev, dtype=torch.int32)

    word, typ, pos = rnd(30522, h, std=0.05), rnd(2, h, std=0.05), rnd(512, h, std=0.05)
    w, b = 1 + rnd(h, std=0.1), rnd(h, std=0.1)
    x, res, bias = rnd(rows, h, std=3.0), rnd(rows, h), rnd(h, std=0.5)
    return SimpleNamespace(embed_ln=(ints(30522), ints(2), ints(384), word, typ, pos, w, b, 1e-12),
                           add_ln=(x, bias, res, w, b, 1e-12), x=x, res=res, bias=bias, w=w, b=b,
                           hh=rnd(rows, f, std=2.0), b1=rnd(f, std=0.5))


def check_kernels(details: dict[str, Any]) -> None:
    from code.bert.packed.kernels import TritonOps
    from code.numerics.fp8 import dequantize

    g = torch.Generator(device="cuda").manual_seed(int(time.time()))
    dev, h, f = "cuda", 1024, 4096
    rows = 3001  # not a multiple of anything
    results = {}
    for dtype in (torch.float16, torch.bfloat16):

        def rnd(*shape: int, std: float = 1.0, dt: torch.dtype = dtype) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, device=dev) * std).to(dt)

        inputs = elementwise_inputs(g, dev, dtype, rows, h, f)
        x, res, bias, w, b, hh, b1 = inputs.x, inputs.res, inputs.bias, inputs.w, inputs.b, inputs.hh, inputs.b1
        scale = 8.0 / 448
        for name in ("embed_ln", "add_ln"):
            args = getattr(inputs, name)
            for q in (None, scale):
                out, oq = getattr(TritonOps, name)(*args, q)
                ref, rq = getattr(TorchOps, name)(
                    *(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args), q
                )
                key = f"{name}[{str(dtype)[6:]}{',fp8' if q else ''}]"
                results[key] = {
                    "rel": rel(out, ref),
                    "max": float((out.float() - ref).abs().max()),
                    "finite": bool(torch.isfinite(out).all()),
                }
                if q:
                    results[key]["fp8_rel"] = rel(dequantize(oq, q), dequantize(rq, q))
        # add + LayerNorm over an e4m3 residual (fp8_residual): only the e4m3 output, then both outputs
        res_scale = float(res.abs().max()) / 448
        res_q = TorchOps.quantize(res.float(), res_scale)
        for keep in (False, True):
            out, oq = TritonOps.add_ln(x, bias, res_q, w, b, 1e-12, scale, residual_scale=res_scale, keep_out=keep)
            ref, rq = TorchOps.add_ln(x.float(), bias.float(), res_q, w.float(), b.float(), 1e-12, scale,
                                      residual_scale=res_scale)
            key = f"add_ln[{str(dtype)[6:]},fp8 residual{',out' if keep else ''}]"
            results[key] = {
                "rel": rel(out, ref) if keep else None,
                "fp8_rel": rel(dequantize(oq, scale), dequantize(rq, scale)),
                "written_16bit": out is not None,
            }
        for q, keep in ((None, True), (scale, False), (scale, True)):
            out, oq = TritonOps.bias_gelu(hh, b1, q, keep)
            ref, rq = TorchOps.bias_gelu(hh.float(), b1.float(), q, True)
            key = f"bias_gelu[{str(dtype)[6:]}{',fp8' if q else ''}{',out' if keep else ''}]"
            results[key] = {
                "rel": rel(out, ref) if keep else None,
                "fp8_rel": rel(dequantize(oq, q), dequantize(rq, q)) if q else None,
            }
        qx = TritonOps.quantize(x, scale)
        results[f"quantize[{str(dtype)[6:]}]"] = {
            "rel": rel(dequantize(qx, scale), dequantize(TorchOps.quantize(x.float(), scale), scale)),
            "vs_x": rel(dequantize(qx, scale), x.float().clamp(-8, 8)),
        }
        # varlen attention: random lengths, some empty slots at the end, pad rows past the total
        lengths = np.random.default_rng(int(time.time())).integers(1, 385, 37).tolist()
        cu = torch.tensor([0, *np.cumsum(lengths).tolist()] + [sum(lengths)] * 3, dtype=torch.int32, device=dev)
        total = sum(lengths) + 40
        q_, k_, v_ = (rnd(total, 16, 64) for _ in range(3))
        out = flash_varlen(q_, k_, v_, cu, max(lengths), 0.125)[: sum(lengths)]
        ref = sdpa_varlen(q_.float(), k_.float(), v_.float(), cu, max(lengths), 0.125)[: sum(lengths)]
        results[f"flash_varlen[{str(dtype)[6:]}]"] = {
            "rel": rel(out, ref),
            "max": float((out.float() - ref).abs().max()),
        }
    details["kernels"] = results
    worst = max(v["rel"] or 0 for v in results.values())
    worst8 = max(v.get("fp8_rel") or 0 for v in results.values())
    ROWS.append(f"kernels: worst rel err 16-bit {worst:.2e}, fp8 copies {worst8:.2e} ({len(results)} checks)")


def span_stats(logits: np.ndarray, ref: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """logits/ref: float32 [N, 384, 2] (padded); compared over each sample's tokens."""
    n = len(lengths)
    valid = np.arange(logits.shape[1])[None, :] < lengths[:, None]
    diff = np.abs(logits - ref)[valid]
    masked = np.where(valid[..., None], logits, -np.inf)
    masked_ref = np.where(valid[..., None], ref, -np.inf)
    start, end = masked[..., 0].argmax(1), masked[..., 1].argmax(1)
    rstart, rend = masked_ref[..., 0].argmax(1), masked_ref[..., 1].argmax(1)
    both = (start == rstart) & (end == rend)
    num = np.linalg.norm((logits - ref)[valid]) / np.linalg.norm(ref[valid])
    return {
        "max_err": float(diff.max()),
        "mean_err": float(diff.mean()),
        "rel": float(num),
        "start_agree": float((start == rstart).mean()),
        "end_agree": float((end == rend).mean()),
        "span_agree": float(both.mean()),
        "n": n,
    }


def run_model(fn: Any, features: BertFeatures, order: np.ndarray, batch: int) -> np.ndarray:
    out = np.full((len(features), 384, 2), -1e4, dtype=np.float32)
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        ids, seg, mask = features.gather(idx)
        out[idx, : ids.shape[1]] = fn(ids, seg, mask)
    return out


def accuracy_variants(calib_amax: dict[str, float]) -> dict[str, dict[str, Any]]:
    """The packed models the accuracy step compares with float32, as ``packed_bert`` keyword arguments."""
    variants: dict[str, dict[str, Any]] = {
        "packed fp16": dict(dtype=torch.float16),
        "packed bf16": dict(dtype=torch.bfloat16),
        "packed fp8": dict(dtype=torch.float16, amax=calib_amax),
        "packed fp8 fast-accum": dict(dtype=torch.float16, amax=calib_amax, fast_accum=True),
        "packed fp8 bert-99": dict(dtype=torch.float16, amax=calib_amax, fast_accum=True, gelu_in_gemm=True),
        "packed fp8 bert-99 8b-resid": dict(
            dtype=torch.float16, amax=calib_amax, fast_accum=True, gelu_in_gemm=True, fp8_residual=True
        ),
        "packed fp8 bert-99 8b-resid 8b-attn": dict(
            dtype=torch.float16, amax=calib_amax, fast_accum=True, gelu_in_gemm=True, fp8_residual=True,
            fp8_attention=True,
        ),
        "packed fp8 fast-accum 8b-attn": dict(dtype=torch.float16, amax=calib_amax, fast_accum=True,
                                              fp8_attention=True),
        **int8_accuracy_variants(calib_amax, with_references=False),
    }
    # fp8 with looser/tighter activation scales (amax x margin): is per-tensor amax the right choice?
    for margin in (0.5, 2.0):
        variants[f"packed fp8 amax x{margin}"] = dict(
            dtype=torch.float16, amax={k: v * margin for k, v in calib_amax.items()}
        )
    return variants


def int8_accuracy_variants(calib_amax: dict[str, float], with_references: bool = True) -> dict[str, dict[str, Any]]:
    """INT8 engines (beside fp16 and the FP8 engines they would replace, ``with_references``): plain, with the GELU
    epilogue (bert-99's form), and with activation scales from half the calibrated amax (clipping the largest
    values to spend int8's uniform levels on the rest: is the calibrated max the right choice for int8?)."""
    int8 = dict(dtype=torch.float16, amax=calib_amax, eight_bit="int8")
    variants: dict[str, dict[str, Any]] = {}
    if with_references:
        variants |= {
            "packed fp16": dict(dtype=torch.float16),
            "packed fp8": dict(dtype=torch.float16, amax=calib_amax),
            "packed fp8 fast-accum": dict(dtype=torch.float16, amax=calib_amax, fast_accum=True),
            "packed fp8 bert-99": dict(dtype=torch.float16, amax=calib_amax, fast_accum=True, gelu_in_gemm=True),
        }
    return variants | {
        "packed int8": int8,
        "packed int8 bert-99": {**int8, "gelu_in_gemm": True},
        "packed int8 amax x0.5": {**int8, "amax": {k: v * 0.5 for k, v in calib_amax.items()}},
    }


@torch.inference_mode()
def check_accuracy(details: dict[str, Any], model: BertQA, count: int, variants: dict[str, dict[str, Any]],
                   key: str = "accuracy", eager_fp16: bool = True) -> None:
    """Each variant's logits against the eager float32 model's on ``count`` synthetic features (``details[key]``)."""
    features = BertFeatures.synthetic(count, seed=1)
    order = np.argsort(-features.lengths, kind="stable")
    lengths = features.lengths
    m32 = model.to("cuda", torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def eager(m: BertQA) -> Any:
        def fn(ids: np.ndarray, seg: np.ndarray, mask: np.ndarray) -> np.ndarray:
            t = [torch.from_numpy(a).cuda() for a in (ids, seg, mask)]
            return m(*t).float().cpu().numpy()

        return fn

    def packed(pm: PackedBert) -> Any:
        def fn(ids: np.ndarray, seg: np.ndarray, mask: np.ndarray) -> np.ndarray:
            logits, p = run_packed(pm, ids, seg, mask)
            return unpack(logits, p)

        return fn

    ref = run_model(eager(m32), features, order, 64)
    results = {}
    if eager_fp16:
        m16 = random_weights(model.config, 0).to("cuda", torch.float16)
        results["eager fp16 padded"] = span_stats(run_model(eager(m16), features, order, 64), ref, lengths)
        del m16
    for name, kw in variants.items():
        try:
            pm = packed_bert(m32, **kw)
            results[name] = span_stats(run_model(packed(pm), features, order, 256), ref, lengths)
            del pm
        except Exception as e:  # one broken variant must not hide the others
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    details[key] = results
    ROWS.append(f"{key} vs eager fp32 on {count} synthetic features (random weights):")
    ROWS.append(f"  {'variant':<26} {'max err':>8} {'mean err':>9} {'rel':>8} {'start':>7} {'end':>7} {'span':>7}")
    result_rows(ROWS, results, 26, lambda name, r: (
        f"  {name:<26} {r['max_err']:8.4f} {r['mean_err']:9.5f} {r['rel']:8.2e} "
        f"{r['start_agree']:7.2%} {r['end_agree']:7.2%} {r['span_agree']:7.2%}"))


def time_variants(
    details: dict[str, Any],
    model: BertQA,
    calib_amax: dict[str, float],
    batches: list[int],
    reps: int,
    graph_max_tokens: int,
) -> None:
    from torch.nn.attention import sdpa_kernel

    from code.bert.backends.pytorch import ATTENTION_BACKENDS
    from code.bert.packed.runner import PackedRunner

    mean_set = BertFeatures.synthetic(4096, seed=2)
    full_set = BertFeatures.synthetic(1024, seed=3, full_length=True)
    max_batch = max(batches)
    m16 = random_weights(model.config, 0).to("cuda", torch.float16)
    manifest = {"calibration": {"amax": calib_amax}}
    paths: dict[str, Any] = {}

    def eager_fn(ids: np.ndarray, seg: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode(), sdpa_kernel(ATTENTION_BACKENDS):
            t = [torch.from_numpy(a).pin_memory().cuda(non_blocking=True) for a in (ids, seg, mask)]
            return m16(*t).float().cpu().numpy()

    paths["eager fp16 padded"] = eager_fn
    for prec in ("fp16", "fp8"):
        for graphs in (False, True):
            t0 = time.perf_counter()
            fp = PackedRunner(m16, manifest, PackedKernels(precision=prec), max_batch, 1, graphs, graph_max_tokens)
            details.setdefault("setup_s", {})[f"{prec} graphs={graphs}"] = time.perf_counter() - t0
            paths[f"packed {prec}{' +graphs' if graphs else ''}"] = fp.run
    timing: dict[str, dict[str, float]] = {}
    rng = np.random.default_rng(0)
    for name, fn in paths.items():
        for label, feats in (("mean", mean_set), ("384", full_set)):
            for b in batches:
                if "+graphs" in name and b * (384 if label == "384" else 170) > 1.3 * graph_max_tokens:
                    continue  # same as without graphs: too large for any bucket
                times = []
                for r in range(reps + 2):
                    idx = rng.choice(len(feats), size=b, replace=False)
                    idx = idx[np.argsort(-feats.lengths[idx], kind="stable")]
                    ids, seg, mask = feats.gather(idx)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    fn(ids, seg, mask)
                    if r >= 2:
                        times.append(time.perf_counter() - t)
                med = float(np.median(times))
                timing.setdefault(name, {})[f"{label}/b{b}"] = med
    details["timing_s"] = timing
    ROWS.append("samples/s through run_batch, one thread (median of reps; b1 column: p50 latency in ms)")
    cols = [f"{label}/b{b}" for label in ("mean", "384") for b in batches]
    ROWS.append(f"  {'variant':<22}" + "".join(f"{c:>11}" for c in cols))
    for name, t in timing.items():
        cells = []
        for c in cols:
            if c not in t:
                cells.append(f"{'-':>11}")
            elif c.endswith("/b1"):
                cells.append(f"{t[c] * 1e3:9.2f}ms")
            else:
                cells.append(f"{int(c.split('/b')[1]) / t[c]:11.0f}")
        ROWS.append(f"  {name:<22}" + "".join(cells))


def gemm_ceiling(details: dict[str, Any]) -> None:
    """bf16 and fp8 GEMM rates at BERT's shapes (M = 64k tokens): the ceilings the model is measured against."""
    import triton.testing

    from code.numerics.fp8 import quantize

    m = 65536
    out = {}
    one = torch.tensor(1.0, device="cuda")
    for n, k in ((3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        aq, wq = quantize(a, 0.02), quantize(w, 0.02)
        fns = {
            "fp16": lambda a=a, w=w: a @ w.t(),
            "fp8": lambda aq=aq, wq=wq: torch._scaled_mm(aq, wq.t(), one, one, out_dtype=torch.float16),
            "fp8fast": lambda aq=aq, wq=wq: torch._scaled_mm(
                aq, wq.t(), one, one, out_dtype=torch.float16, use_fast_accum=True
            ),
        }
        for name, fn in fns.items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            out[f"{name} {n}x{k}"] = 2 * m * n * k / ms / 1e9
    details["gemm_tflops"] = out
    ROWS.append("GEMM TFLOP/s at M=65536: " + ", ".join(f"{k} {v:.0f}" for k, v in out.items()))


def profile_forward(details: dict[str, Any], model: BertQA, calib_amax: dict[str, float], out_dir: Path) -> None:
    """Per-kernel GPU time of one packed forward at ~85k tokens (512 samples of mean length): fp16, plain fp8, fp8
    with fast accumulation and the GELU epilogue, and that with the e4m3 residual and FP8 attention (the H200's
    first bert-99 engine)."""
    from torch.profiler import ProfilerActivity, profile

    feats = BertFeatures.synthetic(512, seed=4)
    ids, seg, mask = feats.gather(np.arange(512))
    for prec, kw in (("fp16", {}), ("fp8", {"amax": calib_amax}),
                     ("fp8_bert99", {"amax": calib_amax, "fast_accum": True, "gelu_in_gemm": True}),
                     ("fp8_bert99_attention", {"amax": calib_amax, "fast_accum": True, "gelu_in_gemm": True,
                                               "fp8_residual": True, "fp8_attention": True})):
        pm = packed_bert(model, **kw)
        with torch.inference_mode():
            run_packed(pm, ids, seg, mask)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                run_packed(pm, ids, seg, mask)
                torch.cuda.synchronize()
        table = p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60)
        (out_dir / f"profile_{prec}.txt").write_text(table)
        total = sum(e.device_time_total for e in p.key_averages()) / 1e3
        details.setdefault("profile_ms", {})[prec] = total
        ROWS.append(f"profile {prec}: {total:.1f} ms GPU for 512 mean-length samples (tokens {int(mask.sum())})")
        del pm


def forward_variants(amax: dict[str, float]) -> dict[str, dict[str, Any]]:
    """The fast path's switches, each as ``packed_bert`` keyword arguments (``--variants`` picks by name). ``fp8[...]``
    names the GEMMs in FP8 (the others 16-bit); ``gelu-in-gemm``: bias + tanh GELU in w1's GEMM epilogue;
    ``fp8-residual``: the residual stream kept as e4m3; ``fp8-attention``: e4m3 q, k, v and an FP8 q.k dot;
    ``int8``: INT8 GEMMs (our Triton kernel, dequantization in its epilogue) with the same calibration."""
    triton = {"attention": "triton"}
    fused = {**triton, "gelu_in_gemm": True}

    def fp8(gemms: str, **kw: Any) -> dict[str, Any]:
        return {"amax": amax, "fp8_gemms": gemms, **kw}

    def int8(gemms: str, **kw: Any) -> dict[str, Any]:
        return {"amax": amax, "fp8_gemms": gemms, "eight_bit": "int8", **kw}

    return {
        "fp16 flash": {"attention": "flash"},
        "fp16 triton-attn": triton,
        "fp16 triton-attn gelu-in-gemm": fused,
        "fp8 flash": fp8(ALL_FP8_GEMMS, attention="flash"),
        "fp8 triton-attn": fp8(ALL_FP8_GEMMS, **triton),
        "fp8[w1+w2] triton-attn": fp8("w1+w2", **triton),
        "fp8 triton-attn gelu-in-gemm": fp8(ALL_FP8_GEMMS, **fused),
        "fp8 triton-attn gelu-in-gemm fast-accum": fp8(ALL_FP8_GEMMS, **fused, fast_accum=True),
        "fp8 triton-attn gelu-in-gemm fast-accum fp8-residual": fp8(
            ALL_FP8_GEMMS, **fused, fast_accum=True, fp8_residual=True
        ),
        "fp8 triton-attn fast-accum": fp8(ALL_FP8_GEMMS, **triton, fast_accum=True),
        "fp8 triton-attn fast-accum fp8-residual": fp8(ALL_FP8_GEMMS, **triton, fast_accum=True, fp8_residual=True),
        "fp8 triton-attn gelu-in-gemm fast-accum fp8-residual fp8-attention": fp8(
            ALL_FP8_GEMMS, **fused, fast_accum=True, fp8_residual=True, fp8_attention=True
        ),
        "fp8 triton-attn gelu-in-gemm fast-accum fp8-attention": fp8(
            ALL_FP8_GEMMS, **fused, fast_accum=True, fp8_attention=True
        ),
        "fp8 triton-attn fast-accum fp8-attention": fp8(ALL_FP8_GEMMS, **triton, fast_accum=True, fp8_attention=True),
        "fp8[qkv] gelu-in-gemm": fp8("qkv", **fused),
        "fp8[qkv+wo] gelu-in-gemm": fp8("qkv+wo", **fused),
        "fp8[w1] gelu-in-gemm": fp8("w1", **fused),
        "fp8[qkv+w1] gelu-in-gemm": fp8("qkv+w1", **fused),
        "fp8[qkv+wo+w1] gelu-in-gemm": fp8("qkv+wo+w1", **fused),
        "fp8[qkv+wo+w1] gelu-in-gemm fast-accum": fp8("qkv+wo+w1", **fused, fast_accum=True),
        "int8 triton-attn": int8(ALL_FP8_GEMMS, **triton),
        "int8 triton-attn gelu-in-gemm": int8(ALL_FP8_GEMMS, **fused),
        "int8[w1+w2] triton-attn gelu-in-gemm": int8("w1+w2", **fused),
    }


def check_fp8_gelu_gemm(details: dict[str, Any]) -> None:
    """cuBLASLt's FP8 GEMM with the bias+GELU epilogue against the same math in float32 (dequantized outputs)."""
    import torch.nn.functional as F

    from code.bert.packed.cublaslt import fp8_gelu_gemm
    from code.numerics.fp8 import Fp8Linear, dequantize, quantize

    g = torch.Generator(device="cuda").manual_seed(1)
    m, k, n = 3001, 1024, 4096
    x = torch.randn(m, k, generator=g, device="cuda")
    w = (torch.randn(n, k, generator=g, device="cuda") * 0.03).half()
    b = (torch.randn(n, generator=g, device="cuda") * 0.5).half()
    lin = Fp8Linear(w, float(x.abs().max()), torch.float16)
    xq = lin.quantize_input(x)
    ref_h = dequantize(xq, lin.act_scale) @ dequantize(lin.weight_q, lin.weight_scale).t() + b.float()
    out_scale = float(F.gelu(ref_h).abs().max()) / 448
    fused = fp8_gelu_gemm(lin.weight_q, lin.weight_scale, lin.act_scale, b, out_scale)
    got = dequantize(fused(xq), out_scale)
    errors = {}
    for form in ("tanh", "none"):
        ref = dequantize(quantize(F.gelu(ref_h, approximate=form), out_scale), out_scale)
        errors[form] = rel(got, ref)
        details.setdefault("fp8_gelu_gemm", {})[form] = {"rel": errors[form], "max": float((got - ref).abs().max())}
    ROWS.append(
        f"cuBLASLt FP8 GELU_BIAS GEMM vs float32, both quantized: rel {errors['tanh']:.2e} against tanh GELU, "
        f"{errors['none']:.2e} against erf GELU"
    )
    half = fp8_gelu_gemm(lin.weight_q, lin.weight_scale, lin.act_scale, b, None)(xq)  # 16-bit output (w2 16-bit)
    rel16 = rel(half.float(), F.gelu(ref_h, approximate="tanh"))
    details["fp8_gelu_gemm"]["fp16_out"] = {"dtype": str(half.dtype), "rel": rel16}
    ROWS.append(f"cuBLASLt FP8 GELU_BIAS GEMM, fp16 output ({half.dtype}): rel {rel16:.2e} against tanh GELU")


def gpu_reading() -> dict[str, float]:
    """The current GPU's SM clock (MHz) and power draw (W) from ``nvidia-smi``; empty where it cannot say."""
    try:
        uuid = f"GPU-{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}"
        out = subprocess.run(["nvidia-smi", "-i", uuid, "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        clock, power = (float(v) for v in out.stdout.strip().split(","))
    except Exception:  # noqa: BLE001 - the reading is information: no GPU, no nvidia-smi or output it cannot parse
        return {}
    return {"sm_mhz": clock, "watts": power}


def sustained_ms(forward: Any, reps: int, sustain_s: float) -> tuple[float, dict[str, float]]:
    """ms per forward once the clocks have settled: ``sustain_s`` of forwards first (a sustained BERT forward holds
    the GPU at its power limit, below its top clock), then ``reps`` back to back, the clock and power read while they
    run. A short timing from an idle GPU sees the top clock, which no LoadGen run keeps."""
    until = time.perf_counter() + sustain_s
    while time.perf_counter() < until:
        for _ in range(4):
            forward()
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reading: dict[str, float] = {}
    # read from the first timed forward on: nvidia-smi takes 50-300 ms to start, and the launch queue would hold the
    # CPU back until only the last forwards are left to run
    reader = threading.Thread(target=lambda: reading.update(gpu_reading()))
    start.record()
    reader.start()
    for _ in range(reps):
        forward()
    end.record()
    end.synchronize()
    reader.join()
    return start.elapsed_time(end) / reps, reading


def time_forward_variants(
    details: dict[str, Any], model: BertQA, amax: dict[str, float], out_dir: Path, names: list[str], reps: int,
    sustain_s: float = 0.0, key: str = "forward_variants", fp8_gelu_check: bool = True,
) -> None:
    """GPU time of one packed forward (512 mean-length samples, inputs already on the device) per variant, and the
    top kernels of each from the profiler: which switch pays, before any LoadGen run. ``sustain_s`` > 0 also times
    each variant at the clocks a sustained run settles at (``sustained_ms``): the rate LoadGen can see. Results go
    to ``details[key]`` and ``<key>_profile.txt``; ``fp8_gelu_check``: first check cuBLASLt's FP8 GELU GEMM."""
    from torch.profiler import ProfilerActivity, profile

    from code.bert.packed.packed_model import upload_packed
    from code.bert.packed.tuning import fastest, tune

    variants = forward_variants(amax)
    unknown = [n for n in names if n not in variants]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {list(variants)}")
    feats = BertFeatures.synthetic(512, seed=4)
    ids, seg, mask = feats.gather(np.arange(512))
    tensors, packed = upload_packed(ids, seg, mask, "cuda")
    if fp8_gelu_check:
        try:
            check_fp8_gelu_gemm(details)
        except Exception as e:  # the variants that use it will fail with their own message too
            ROWS.append(f"cuBLASLt FP8 GELU_BIAS GEMM: FAILED {type(e).__name__}: {str(e)[:200]}")
    cfg = model.config
    timings = tune(cfg.num_heads, cfg.head_dim, torch.float16, torch.device("cuda"))
    details["attention_tune_ms"] = {str(config): ms for config, ms in timings.items()}
    results, tables = {}, []
    for name in names:
        try:
            pm = packed_bert(model, **variants[name])
            pm.attention_config = fastest(timings)
            if sustain_s > 0:
                time.sleep(5.0)  # the short timing starts from a rested GPU, not the previous variant's settled clock
            with torch.inference_mode():
                for _ in range(3):
                    pm.forward(*tensors, max_len=packed.max_len)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                times = []
                for _ in range(reps):
                    start.record()
                    pm.forward(*tensors, max_len=packed.max_len)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    pm.forward(*tensors, max_len=packed.max_len)
                    torch.cuda.synchronize()
            ms = float(np.median(times))
            results[name] = {"ms_per_512": round(ms, 2), "samples_per_s": round(512 / ms * 1e3)}
            sustained = ""
            if sustain_s > 0:
                try:
                    with torch.inference_mode():
                        forward = functools.partial(pm.forward, *tensors, max_len=packed.max_len)
                        held, reading = sustained_ms(forward, reps, sustain_s)
                except Exception as e:  # the short timing above still stands
                    sustained = f"; sustained timing FAILED {type(e).__name__}: {str(e)[:120]}"
                else:
                    results[name].update(sustained_ms_per_512=round(held, 2),
                                         sustained_samples_per_s=round(512 / held * 1e3), **reading)
                    clock, watts = reading.get("sm_mhz", float("nan")), reading.get("watts", float("nan"))
                    sustained = (f"; sustained {held:.2f} ms ({512 / held * 1e3:,.0f}/s) at {clock:.0f} MHz, "
                                 f"{watts:.0f} W")
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=70)
            tables.append(f"== {name}: {ms:.2f} ms\n{table}")
            ROWS.append(f"forward {name}: {ms:.2f} ms per 512 samples ({512 / ms * 1e3:,.0f}/s GPU only){sustained}")
            del pm
        except Exception as e:  # one broken variant must not hide the others
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            ROWS.append(f"forward {name}: FAILED {type(e).__name__}: {str(e)[:200]}")
        torch.cuda.empty_cache()
    details[key] = {"tokens": int(mask.sum()), **results}
    name = "variants" if key == "forward_variants" else key
    (out_dir / f"{name}_profile.txt").write_text("\n\n".join(tables))


# ----------------------------------------------------------------------------------------------------------- INT8

INT8_FORWARD_VARIANTS = [
    "fp16 triton-attn",
    "fp16 triton-attn gelu-in-gemm",
    "fp8 triton-attn fast-accum",
    "fp8 triton-attn gelu-in-gemm fast-accum",
    "int8 triton-attn",
    "int8 triton-attn gelu-in-gemm",
]
# Tiles timed beside TILES' own for many rows, to tell whether the engine's choice is the fastest at 85k tokens.
EXTRA_INT8_TILES = [(256, 128, 128, 8, 8, 3), (128, 256, 64, 8, 8, 4), (128, 128, 128, 8, 4, 4),
                    (128, 256, 128, 8, 8, 4)]
GEMM_SHAPES = {"qkv": (1024, 3072), "wo": (1024, 1024), "w1": (1024, 4096), "w2": (4096, 1024)}  # name: (K, N)


def int8_stats(got: torch.Tensor, want: torch.Tensor, scale: float, exact: torch.Tensor) -> dict[str, Any]:
    """An int8 output against its definition's: the share of elements a level apart, the largest difference in
    levels, and the relative error of the dequantized output against the float32 value before quantization."""
    from code.numerics.int8 import dequantize

    diff = (got.int() - want.int()).abs()
    return {"off_share": float((diff > 0).float().mean()), "max_levels": int(diff.max()),
            "rel": rel(dequantize(got, scale), exact.float())}


def check_int8_kernels(details: dict[str, Any], device: str = "cuda", rows: int = 3001, h: int = 1024, f: int = 4096,
                       heads: int = 16) -> None:
    """Each kernel of an INT8 engine against its float32 definition (``TorchOps``, ``code.numerics.int8``) at
    BERT-large's widths (``h``, ``f``, ``heads`` of 64), 3001 rows: the LayerNorm and GELU kernels' int8 copies, the
    quantize kernel, the attention kernel's int8 output and the INT8 GEMM (fp16 out; GELU and int8 out; both
    methods). Two implementations of one float32 formula differ in their last bits, which moves a value across a
    rounding boundary now and then: a small share one level apart is expected, never two. (Smaller sizes on the CPU:
    tests/scripts/test_check_bert_packed.py runs it in Triton's interpreter.)"""
    import torch.nn.functional as F

    from code.bert.packed import attention
    from code.bert.packed.kernels import TritonOps
    from code.numerics import int8
    from code.numerics.int8_gemm import int8_gemm
    from code.numerics.int8_linear import Int8Linear

    seed = int(time.time())
    g = torch.Generator(device=device).manual_seed(seed)
    dev, i8 = device, int8.INT8

    def rnd(*shape: int, std: float = 1.0, dt: torch.dtype = torch.float16) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=dev) * std).to(dt)

    def f32(args: tuple) -> tuple:
        return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    results: dict[str, dict[str, Any]] = {}
    inputs = elementwise_inputs(g, dev, torch.float16, rows, h, f)
    x, hh, b1 = inputs.x, inputs.hh, inputs.b1
    for name in ("embed_ln", "add_ln"):
        args = getattr(inputs, name)
        exact, _ = getattr(TorchOps, name)(*f32(args), None)
        scale = int8.scale_from_amax(float(exact.abs().max()))
        _, got = getattr(TritonOps, name)(*args, scale, keep_out=False, q_dtype=i8)
        _, want = getattr(TorchOps, name)(*f32(args), scale, q_dtype=i8)
        results[f"{name} int8 copy"] = int8_stats(got, want, scale, exact)
    exact, _ = TorchOps.bias_gelu(hh.float(), b1.float(), None, True)
    scale = int8.scale_from_amax(float(exact.abs().max()))
    _, got = TritonOps.bias_gelu(hh, b1, scale, False, q_dtype=i8)
    _, want = TorchOps.bias_gelu(hh.float(), b1.float(), scale, True, q_dtype=i8)
    results["bias_gelu int8 copy"] = int8_stats(got, want, scale, exact)
    scale = int8.scale_from_amax(float(x.abs().max()))
    results["quantize"] = int8_stats(TritonOps.quantize(x, scale, i8), int8.quantize(x.float(), scale), scale, x)
    lengths = np.random.default_rng(seed).integers(1, min(385, rows // 8), 37 if rows > 400 else 4).tolist()
    qkv, cu, qkv_bias = attention.packed_batch(lengths, heads, 64, torch.float16, dev, seed=seed % 1000)
    n = sum(lengths)
    exact = attention.reference_attention(qkv, cu, 0.125, heads, qkv_bias)[:n]
    scale = int8.scale_from_amax(float(exact.abs().max()))
    got = attention.varlen_attention(qkv, cu, max(lengths), 0.125, heads, qkv_bias=qkv_bias, out_q_scale=scale,
                                     out_q_dtype=i8)[:n]
    results["attention int8 out"] = int8_stats(got, int8.quantize(exact, scale), scale, exact)
    xg, wg, bg = rnd(rows, h, std=2.0, dt=torch.float32), rnd(f, h, std=0.03), rnd(f, std=0.5)
    lin = Int8Linear(wg, float(xg.abs().max()), torch.float16)
    xq = lin.quantize_input(xg)
    want = int8.reference_gemm(xq, lin.weight_q, lin.dequant_scale, bg, out_dtype=torch.float32)
    unquantized = xg @ wg.float().t() + bg.float()
    gelu = F.gelu(want, approximate="tanh")
    out_scale = int8.scale_from_amax(float(gelu.abs().max()))
    want8 = int8.reference_gemm(xq, lin.weight_q, lin.dequant_scale, bg, gelu=True, out_scale=out_scale)
    for method in int8.GEMM_METHODS:
        try:
            got = int8_gemm(xq, lin.weight_q, lin.dequant_scale, bg, method=method)
            results[f"GEMM fp16 out [{method}]"] = {"rel": rel(got, want), "rel_vs_unquantized": rel(got, unquantized),
                                                    "max": float((got.float() - want).abs().max())}
            got = int8_gemm(xq, lin.weight_q, lin.dequant_scale, bg, gelu=True, out_scale=out_scale, method=method)
            results[f"GEMM gelu int8 out [{method}]"] = int8_stats(got, want8, out_scale, gelu)
        except Exception as e:  # the other method's figures still count
            results[f"GEMM [{method}]"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    details["int8_kernels"] = results
    ROWS.append(f"int8 kernels vs float32 definitions ({rows} rows; rel: dequantized output vs float32 before "
                "rounding):")
    result_rows(ROWS, results, 30, lambda key, r: (
        f"  {key:<30} rel {r['rel']:.2e}, {r['off_share']:.3%} one level off (max {r['max_levels']})"
        if "off_share" in r else
        f"  {key:<30} rel {r['rel']:.2e} (max {r['max']:.2e}), vs unquantized float32 {r['rel_vs_unquantized']:.2e}"))


def _gemm_fns(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor, gelu: bool) -> dict[str, Any]:
    """The GEMMs timed for one shape: fp16, cuBLASLt FP8, the INT8 GEMM (both methods, every tile) and cuBLAS's raw
    int8 product; ``gelu``: also w1's fused form (bias + GELU, 8-bit out) in FP8 (cuBLASLt) and INT8 (ours)."""
    from code.bert.packed.cublaslt import fp8_gelu_gemm
    from code.numerics import fp8
    from code.numerics.int8_gemm import TILES, Int8Tile, int8_gemm, tile_for
    from code.numerics.int8_linear import Int8Linear

    one = torch.tensor(1.0, device=a.device)
    aq, wq = fp8.quantize(a, float(a.abs().max()) / 448), fp8.quantize(w, float(w.abs().max()) / 448)
    lin = Int8Linear(w, float(a.abs().max()), torch.float16)
    xq, w8, s8 = lin.quantize_input(a), lin.weight_q, lin.dequant_scale
    chosen = tile_for(a.shape[0], a.device)
    fns: dict[str, Any] = {
        "fp16 cuBLAS": lambda: a @ w.t(),
        "fp8 cuBLASLt": lambda: torch._scaled_mm(aq, wq.t(), one, one, out_dtype=torch.float16),
        "fp8 cuBLASLt fast-accum": lambda: torch._scaled_mm(aq, wq.t(), one, one, out_dtype=torch.float16,
                                                            use_fast_accum=True),
        f"int8 triton {chosen} (engine)": lambda: int8_gemm(xq, w8, s8),
        "int8 int_mm + dequant kernel": lambda: int8_gemm(xq, w8, s8, method="int_mm"),
        "int8 int_mm alone (int32 out)": lambda: torch._int_mm(xq, w8.t()),
    }
    for tile in dict.fromkeys([*TILES[-1][1], *(Int8Tile(*t) for t in EXTRA_INT8_TILES)]):
        if tile != chosen:
            fns[f"int8 triton {tile}"] = lambda tile=tile: int8_gemm(xq, w8, s8, tile=tile)
    if gelu:
        lt, lt_fast = (fp8_gelu_gemm(wq, one, one, b, 0.05, fast) for fast in (False, True))
        fns["fp8 cuBLASLt +bias+gelu->e4m3"] = lambda: lt(aq)
        fns["fp8 cuBLASLt +bias+gelu->e4m3 fast"] = lambda: lt_fast(aq)
        fns["int8 triton +bias+gelu->int8"] = lambda: int8_gemm(xq, w8, s8, b, gelu=True, out_scale=0.05)
        fns["int8 int_mm+dequant +bias+gelu->int8"] = lambda: int8_gemm(xq, w8, s8, b, gelu=True, out_scale=0.05,
                                                                       method="int_mm")
    return fns


def time_int8_gemms(details: dict[str, Any], m: int | None = None, shapes: dict[str, tuple[int, int]] | None = None,
                    device: str = "cuda") -> None:
    """The INT8 GEMM beside cuBLAS fp16 and cuBLASLt FP8 at BERT-large's four GEMM shapes over ~85k tokens (512
    samples of mean length; 85,000 rounded up to the packed path's 16-row alignment): ms per GEMM (median of
    ``triton.testing.do_bench``), and their sum, one layer's GEMM time. Which method and tile an INT8 engine should
    run is read from this table (``code.numerics.int8_gemm.TILES``; ``Int8Linear``'s method, default triton).
    ``m``, ``shapes``, ``device``: other sizes, the CPU (tests of the step's plumbing)."""
    import triton.testing

    from code.bert.packed.packing import TOKEN_ALIGN, round_up

    m = m or round_up(85_000, TOKEN_ALIGN)
    shapes = shapes or GEMM_SHAPES
    timing: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for gemm, (k, n) in shapes.items():
        a = torch.randn(m, k, device=device, dtype=torch.float16)
        w = (torch.randn(n, k, device=device) * 0.03).half()
        b = (torch.randn(n, device=device) * 0.5).half()
        for name, fn in _gemm_fns(a, w, b, gelu=gemm == "w1").items():
            try:
                timing.setdefault(name, {})[gemm] = triton.testing.do_bench(fn, warmup=25, rep=100,
                                                                            return_mode="median")
            except Exception as e:  # e.g. a tile out of shared memory: the others still count
                timing.setdefault(name, {})[gemm] = float("nan")
                errors[f"{name} {gemm}"] = f"{type(e).__name__}: {str(e)[:200]}"
        del a, w, b
        torch.cuda.empty_cache()
    details["int8_gemm_ms"] = {"m": m, "timing": timing, "errors": errors}
    ROWS.append(f"GEMM ms at M={m:,} (K x N: " + ", ".join(f"{g} {k}x{n}" for g, (k, n) in shapes.items())
                + "); layer = the four, TOPS over the four")
    ROWS.append(f"  {'GEMM':<44}" + "".join(f"{g:>8}" for g in shapes) + f"{'layer':>8}{'TOPS':>7}")
    flops = 2 * m * sum(k * n for k, n in shapes.values())
    for name, t in timing.items():
        cells = "".join(f"{t[g]:8.3f}" if g in t else f"{'-':>8}" for g in shapes)
        if all(g in t for g in shapes):
            layer = sum(t.values())
            cells += f"{layer:8.3f}{flops / layer / 1e9:7.0f}"
        ROWS.append(f"  {name:<44}{cells}")
    for key, error in errors.items():
        ROWS.append(f"  FAILED {key}: {error[:150]}")


def check_int8_runner(details: dict[str, Any]) -> None:
    """The path ``make run RUN_ARGS="--benchmarks=bert-99 --precision=int8 ..."`` takes: an int8 engine built as
    ``make generate_engines`` builds it (random weights, calibrated on the GPU), loaded by the pytorch backend
    (code/bert/backends/pytorch.py -> packed/runner.py) with CUDA graphs on and bert-99's GELU epilogue. One batch
    that fits a graph bucket and one that runs eagerly: the INT8 GEMM kernel and no other GEMM but the QA head's
    float32 one may run, no separate quantize pass, and each batch's logits must equal the eager packed model's."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from code.bert.backends import create_backend
    from code.bert.backends.pytorch import PytorchOptions
    from code.bert.backends.pytorch_engine import CalibrationSet, EngineSpec, build_engine
    from code.numerics.int8_linear import Int8Linear

    spec = EngineSpec("large", "int8", "random", seed=0)
    calib = BertFeatures.synthetic(100, seed=0)
    graph_max_tokens, started = 4096, time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        engine = Path(folder) / "engine"
        build_engine(spec, engine, calibration=CalibrationSet(calib.input_ids, calib.segment_ids, calib.input_mask,
                                                              "synthetic:seed=0"), device="cuda")
        backend = create_backend("pytorch", PytorchOptions(
            engine_dir=engine, engine_spec=spec, device="cuda", max_batch_size=64, cuda_graphs=True,
            graph_max_tokens=graph_max_tokens, kernels=PackedKernels(precision="int8", gelu_in_gemm=True)))
    setup_s = time.perf_counter() - started
    runner = backend.packed
    if runner is None:
        raise RuntimeError("the pytorch backend did not take the packed path for an int8 engine")
    pm = runner.model
    layers_int8 = all(isinstance(q, Int8Linear) for layer in pm.layers for q in layer.q8.values())
    result: dict[str, Any] = {"setup_s": round(setup_s, 1), "format": pm.fmt.name, "all_gemms_int8": layers_int8,
                              "gemms_per_layer": sorted(pm.layers[0].q8), "buckets": len(runner.graph_buckets)}
    feats = BertFeatures.synthetic(64, seed=5)
    order = np.argsort(-feats.lengths, kind="stable")
    for label, idx in (("graph", order[:8]), ("eager", order)):
        ids, seg, mask = feats.gather(idx)
        with torch.inference_mode():
            backend.run_batch(idx, ids, seg, mask)  # warm: the profile below sees one batch only
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = backend.run_batch(idx, ids, seg, mask)
                torch.cuda.synchronize()
            ref = unpack(*run_packed(pm, ids, seg, mask))
        valid = mask.astype(bool)
        events = prof.key_averages()
        result[label] = {
            "tokens": int(mask.sum()),
            "max_abs_diff_vs_eager": float(np.abs(out[valid] - ref[valid]).max()),
            "int8_gemm_launches": sum(e.count for e in events if "_int8_gemm_kernel" in e.key),
            "quantize_launches": sum(e.count for e in events if "quantize_kernel" in e.key),
            "other_gemm_kernels": sorted({e.key[:80] for e in events if "_int8_gemm_kernel" not in e.key
                                          and any(s in e.key.lower() for s in ("gemm", "mma", "matmul", "sm90"))}),
        }
    details["int8_runner"] = result
    ROWS.append(f"int8 engine through the pytorch backend ({result['format']}, {result['buckets']} graph buckets up "
                f"to {graph_max_tokens} tokens, set up in {setup_s:.0f} s; GEMMs per layer in int8: "
                f"{'+'.join(result['gemms_per_layer'])}, all Int8Linear: {layers_int8}):")
    for label in ("graph", "eager"):
        r = result[label]
        untraced = (" (0 here: the profiler saw no kernel inside the graph's replay)"
                    if label == "graph" and not r["int8_gemm_launches"] else "")
        others = ", ".join(r["other_gemm_kernels"]) or "none"
        ROWS.append(f"  {label} batch ({r['tokens']} tokens): max |logit diff| vs eager packed "
                    f"{r['max_abs_diff_vs_eager']:.1e}, int8 GEMM launches {r['int8_gemm_launches']} (expect "
                    f"{4 * len(pm.layers)}){untraced}, quantize passes {r['quantize_launches']} (expect 0), other "
                    f"GEMM kernels (the QA head's float32 one expected): {others}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--count", type=int, default=2000, help="features for the accuracy check")
    parser.add_argument("--int8_count", type=int, default=1000, help="features for the int8_accuracy step (its "
                        "eager float32 reference is most of its time)")
    parser.add_argument("--batches", default="1,64,256,512,1024")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--graph_max_tokens", type=int, default=16384)
    parser.add_argument("--skip", default="", help="comma list of: kernels,accuracy,timing,gemm,profile,variants,"
                        "int8_kernels,int8_gemm,int8_accuracy,int8_forward,int8_runner")
    parser.add_argument("--sustain_s", type=float, default=0.0, help="variants: also time each after this many "
                        "seconds of forwards, at the clocks a sustained run settles at (0: only the short timing)")
    parser.add_argument("--variants", default="", help="comma list of forward_variants() names (default: all)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        from torch.nn.attention import varlen  # noqa: F401

        details["varlen_attn"] = True
    except ImportError:
        details["varlen_attn"] = False
    model = random_weights(BERT_CONFIGS["large"], 0)
    t0 = time.perf_counter()
    calib = BertFeatures.synthetic(100, seed=0)
    amax = collect_amax(model, calib.input_ids, calib.segment_ids, calib.input_mask, "cuda", torch.float16)
    details["calibration_s"] = time.perf_counter() - t0
    details["amax"] = amax
    steps = [
        ("gemm", lambda: gemm_ceiling(details)),
        ("kernels", lambda: check_kernels(details)),
        ("accuracy", lambda: check_accuracy(details, model, args.count, accuracy_variants(amax))),
        ("profile", lambda: profile_forward(details, model.to("cuda", torch.float16), amax, args.out)),
        (
            "variants",
            lambda: time_forward_variants(
                details,
                model,
                amax,
                args.out,
                [v for v in args.variants.split(",") if v] or list(forward_variants(amax)),
                max(args.reps, 10),
                args.sustain_s,
            ),
        ),
        (
            "timing",
            lambda: time_variants(
                details, model, amax, [int(b) for b in args.batches.split(",")], args.reps, args.graph_max_tokens
            ),
        ),
        ("int8_kernels", lambda: check_int8_kernels(details)),
        ("int8_gemm", lambda: time_int8_gemms(details)),
        ("int8_accuracy", lambda: check_accuracy(details, model, args.int8_count, int8_accuracy_variants(amax),
                                                 key="int8_accuracy", eager_fp16=False)),
        ("int8_forward", lambda: time_forward_variants(details, model, amax, args.out, INT8_FORWARD_VARIANTS,
                                                       max(args.reps, 10), args.sustain_s, key="int8_forward",
                                                       fp8_gelu_check=False)),
        ("int8_runner", lambda: check_int8_runner(details)),
    ]
    report = args.out / "check_bert_packed.json"
    run_steps(steps, skip, details, ROWS, lambda: report.write_text(json.dumps(details, indent=1, default=str)))
    print_summary("check_bert_packed", details, ROWS, f"varlen_attn={details['varlen_attn']}")


if __name__ == "__main__":
    main()
