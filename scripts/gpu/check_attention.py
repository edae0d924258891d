"""Check and time the Triton varlen attention kernel (code/bert/packed/attention.py) against FA2 on one GPU.

On a realistic packed batch (512 synthetic SQuAD-like features, ~87k tokens, BERT-large: 16 heads, head_dim 64):

1. **Correctness.** Against ``reference_attention`` (float32, per-sequence SDPA) and against FA2
   (``aten._flash_attention_forward``, the kernel it replaces, on q/k/v with the bias added in fp16 as the GEMM
   epilogue would) over the whole batch: fp16 without and with bias, every candidate config, bf16, sharper
   softmax (q, k x3), FP8 output (dequantized, and against quantizing FA2's output). Padding rows past
   ``cu_seqlens[-1]`` must be untouched; a CUDA graph captured with all sequences empty must replay correctly.
2. **Tuning.** ``tune()`` on the same batch: ms per call of each candidate config.
3. **Timing** (median of ``triton.testing.do_bench``): FA2 alone, bias add + FA2 (what the kernel replaces in the
   fp16 path), + quantize (the fp8 path), cuDNN's fused attention over the same ragged batch (checked for
   correctness in step 1 too; in torch 2.11 it rebuilds its plan on the host every call, ~46 ms, so this row
   measures that), against ours with the best config; effective TFLOP/s over the useful ``4 * sum(L^2) * H * D``
   FLOPs, and per 24-layer forward.

Run on the device: ``PYTHONPATH=$PWD python3 scripts/gpu/check_attention.py --out $OUT/attention.json``. Each step
catches its own failure, so one broken step doesn't lose the others; a short table is printed last.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from scripts.gpu.steps import print_summary, result_rows, run_steps

ROWS: list[str] = []  # the short table printed last
HEADS, HEAD_DIM, LAYERS = 16, 64, 24
FP8_SCALE = 4.0 / 448  # |o| of random O(1) values stays well under 4


def batch_lengths(count: int) -> tuple[list[int], str]:
    """The profile's batch: synthetic features, seed 4, the lengths the FA2 figure of
    documentation/notes/bert_gpu_notes.md is for."""
    from code.bert.packed.tuning import tuning_lengths

    return tuning_lengths(count, seed=4), "BertFeatures.synthetic(seed=4)"


def fa2(qkv: torch.Tensor, cu: torch.Tensor, max_len: int, scale: float) -> torch.Tensor:
    q, k, v = qkv.view(qkv.shape[0], 3, HEADS, -1).unbind(1)
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, False, False, scale=scale)
    return out[0].view(qkv.shape[0], -1)


def cudnn(
    qkv: torch.Tensor, cu: torch.Tensor, max_len: int, scale: float, contiguous: bool = False
) -> torch.Tensor:
    """cuDNN's fused attention over the same packed (ragged) batch, as torch's nested-tensor SDPA calls it.
    ``contiguous``: copy q, k, v to contiguous [T, H, D] first (in case cuDNN needs them so)."""
    q, k, v = (t.contiguous() if contiguous else t for t in qkv.view(qkv.shape[0], 3, HEADS, -1).unbind(1))
    out = torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, False, 0.0, scale=scale)
    return out[0].reshape(qkv.shape[0], -1)


def errors(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    out, ref = out.double(), ref.double()
    diff = (out - ref).abs()
    return {
        "max": float(diff.max()),
        "mean": float(diff.mean()),
        "rel": float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)),
        "finite": bool(torch.isfinite(out).all()),
    }


class Setup:
    def __init__(self, count: int, pad_rows: int) -> None:
        from code.bert.packed.attention import packed_batch

        self.lengths, self.source = batch_lengths(count)
        self.max_len = max(self.lengths)
        self.scale = HEAD_DIM**-0.5
        self.tokens = sum(self.lengths)
        self.flops = 4.0 * sum(n * n for n in self.lengths) * HEADS * HEAD_DIM
        self.qkv, self.cu, self.bias = packed_batch(self.lengths, HEADS, HEAD_DIM, torch.float16, "cuda", 0, pad_rows)
        self.pad_rows = pad_rows
        self.config: Any = None  # the tile shape tuning picks (None: the kernel's default until it ran)
        self.qkv8, self.qkv_scales = e4m3_qkv(self.qkv, self.bias)


def e4m3_qkv(qkv: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, tuple[float, float, float]]:
    """What an FP8 QKV GEMM with the bias in its epilogue would write: ``qkv + bias`` in e4m3, one scale per part
    (q, k, v) from its own amax."""
    from code.numerics.fp8 import E4M3, E4M3_MAX

    x = (qkv.float() + bias.float()).view(qkv.shape[0], 3, -1)
    scales = x.abs().amax(dim=(0, 2)) / E4M3_MAX
    q8 = (x / scales[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).view(qkv.shape[0], -1)
    a, b, c = scales.tolist()
    return q8, (a, b, c)


def check_correctness(s: Setup, details: dict[str, Any]) -> None:
    from code.bert.packed import attention as A
    from code.numerics.fp8 import E4M3, E4M3_MAX, dequantize

    results: dict[str, Any] = {}
    n, width = s.tokens, HEADS * HEAD_DIM

    def run_case(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            results[name] = fn()
        except Exception as e:
            traceback.print_exc()
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}

    def case(
        qkv: torch.Tensor, bias: torch.Tensor | None, config: Any = None, fp8: bool = False
    ) -> Callable[[], dict[str, Any]]:
        def fn() -> dict[str, Any]:
            sentinel = torch.full((qkv.shape[0], width), 3.0, device="cuda").to(E4M3 if fp8 else qkv.dtype)
            out = A.varlen_attention(
                qkv, s.cu, s.max_len, s.scale, HEADS, qkv_bias=bias, out=sentinel,
                out_q_scale=FP8_SCALE if fp8 else None, config=config,
            )  # fmt: skip
            torch.cuda.synchronize()
            got = dequantize(out[:n], FP8_SCALE) if fp8 else out[:n].float()
            ref = A.reference_attention(qkv, s.cu, s.scale, HEADS, bias)[:n]
            biased = qkv if bias is None else (qkv.float() + bias.float()).to(qkv.dtype)  # the GEMM epilogue's
            flash = fa2(biased, s.cu, s.max_len, s.scale)[:n].float()
            r: dict[str, Any] = {"vs_ref": errors(got, ref), "fa2_vs_ref": errors(flash, ref)}
            if fp8:
                ref = ref.clamp(-E4M3_MAX * FP8_SCALE, E4M3_MAX * FP8_SCALE)
                r["vs_ref"] = errors(got, ref)
                # the path it replaces: FA2's 16-bit output quantized with the same scale
                q_flash = dequantize((flash.half().float() / FP8_SCALE).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), FP8_SCALE)
                r["vs_fa2_quantized"] = errors(got, q_flash)
                r["fa2_quantized_vs_ref"] = errors(q_flash, ref)
            else:
                r["vs_fa2"] = errors(got, flash)
            r["padding_untouched"] = bool((out[n:].float() == 3.0).all())
            return r

        return fn

    qkv, bias = s.qkv, s.bias
    run_case("fp16", case(qkv, None))
    for cfg in A.CANDIDATE_CONFIGS:
        run_case(f"fp16+bias {cfg}", case(qkv, bias, cfg))
    sharp = qkv * torch.tensor([3.0, 3.0, 1.0], device="cuda", dtype=qkv.dtype).repeat_interleave(width)
    run_case("fp16+bias sharp (q,k x3)", case(sharp, bias))
    run_case("bf16+bias", case(qkv.bfloat16(), bias.bfloat16()))
    run_case("fp8 out+bias", case(qkv, bias, fp8=True))
    run_case("fp8 out+bias q-bias-load", case(qkv, bias, A.AttentionConfig(64, 64, 4, 2, False), fp8=True))

    def e4m3_case(qk_dot: bool) -> Callable[[], dict[str, Any]]:
        """e4m3 in (the GEMM's bias included), e4m3 out: against float32 attention of the 16-bit qkv + bias (what
        quantizing the input costs) and of the dequantized e4m3 qkv (the kernel's own arithmetic)."""

        def fn() -> dict[str, Any]:
            out = torch.full((qkv.shape[0], width), 3.0, device="cuda").to(E4M3)
            A.varlen_attention(s.qkv8, s.cu, s.max_len, s.scale, HEADS, out=out, out_q_scale=FP8_SCALE,
                               config=s.config, qkv_scales=s.qkv_scales, fp8_qk_dot=qk_dot)  # fmt: skip
            torch.cuda.synchronize()
            got = dequantize(out[:n], FP8_SCALE)
            limit = E4M3_MAX * FP8_SCALE
            ref = A.reference_attention(qkv, s.cu, s.scale, HEADS, bias)[:n].clamp(-limit, limit)
            own = A.reference_attention(s.qkv8, s.cu, s.scale, HEADS, qkv_scales=s.qkv_scales)[:n]
            return {"vs_ref": errors(got, ref), "vs_dequantized_ref": errors(got, own.clamp(-limit, limit)),
                    "padding_untouched": bool((out[n:].float() == 3.0).all())}  # fmt: skip

        return fn

    run_case("e4m3 in, fp8 out (fp16 dots)", e4m3_case(False))
    run_case("e4m3 in, fp8 out (FP8 q.k dot)", e4m3_case(True))

    def graph_replay() -> dict[str, Any]:
        """Capture with every sequence empty (as graphs.py does), replay with the real lengths."""
        cu = torch.zeros_like(s.cu)
        out = torch.full((qkv.shape[0], width), 3.0, device="cuda", dtype=qkv.dtype)
        A.varlen_attention(qkv, cu, 384, s.scale, HEADS, qkv_bias=bias, out=out)  # compile outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            A.varlen_attention(qkv, cu, 384, s.scale, HEADS, qkv_bias=bias, out=out)
        graph.replay()
        torch.cuda.synchronize()
        empty_ok = bool((out.float() == 3.0).all())
        cu.copy_(s.cu)
        graph.replay()
        torch.cuda.synchronize()
        ref = A.reference_attention(qkv, s.cu, s.scale, HEADS, bias)[:n]
        return {"empty_untouched": empty_ok, "vs_ref": errors(out[:n].float(), ref)}

    run_case("cuda graph (captured empty, replayed)", graph_replay)

    def cudnn_case(contiguous: bool) -> Callable[[], dict[str, Any]]:
        def check() -> dict[str, Any]:
            got = cudnn(qkv, s.cu, s.max_len, s.scale, contiguous)[:n].float()
            ref = A.reference_attention(qkv, s.cu, s.scale, HEADS)[:n]
            return {"vs_ref": errors(got, ref), "vs_fa2": errors(got, fa2(qkv, s.cu, s.max_len, s.scale)[:n].float())}

        return check

    run_case("cuDNN varlen (strided q/k/v)", cudnn_case(False))
    run_case("cuDNN varlen (contiguous q/k/v)", cudnn_case(True))
    details["correctness"] = results
    ROWS.append(f"correctness on {len(s.lengths)} sequences, {n} tokens ({s.source}), max len {s.max_len}:")
    ROWS.append(f"  {'case':<48} {'max err':>9} {'rel':>9} {'vs FA2 max':>11} {'FA2 max':>9} pad")

    def row(name: str, r: dict[str, Any]) -> str:
        other = r.get("vs_fa2") or r.get("vs_fa2_quantized") or r.get("vs_dequantized_ref") or {}
        fa = r.get("fa2_quantized_vs_ref") or r.get("fa2_vs_ref") or {}
        pad = r.get("padding_untouched", r.get("empty_untouched"))
        return (f"  {name:<48} {r['vs_ref']['max']:9.2e} {r['vs_ref']['rel']:9.2e} "
                f"{other.get('max', float('nan')):11.2e} {fa.get('max', float('nan')):9.2e} {pad}")

    result_rows(ROWS, results, 48, row, cut=80)


def run_tune(s: Setup, details: dict[str, Any]) -> None:
    from code.bert.packed.tuning import fastest, tune

    t0 = time.perf_counter()
    times = tune(HEADS, HEAD_DIM, torch.float16, "cuda", lengths=s.lengths, iterations=20)
    details["tune_s"] = time.perf_counter() - t0
    details["tune_ms"] = {str(k): v for k, v in times.items()}
    s.config = fastest(times)
    details["best_config"] = str(s.config)
    ROWS.append(f"tune (bias, fp16 out; {details['tune_s']:.1f} s incl. compiles): ms per call")
    for cfg, ms in sorted(times.items(), key=lambda kv: kv[1]):
        ROWS.append(f"  {str(cfg):<36} {ms:8.3f} ms  {s.flops / ms / 1e9:6.0f} TFLOP/s")
    fp8_times = tune(HEADS, HEAD_DIM, torch.float16, "cuda", lengths=s.lengths, iterations=20, fp8_input=True)
    details["tune_fp8_input_ms"] = {str(k): v for k, v in fp8_times.items()}
    ROWS.append("tune (e4m3 in, FP8 q.k dot, fp16 out): ms per call")
    for cfg, ms in sorted(fp8_times.items(), key=lambda kv: kv[1]):
        ROWS.append(f"  {str(cfg):<36} {ms:8.3f} ms  {s.flops / ms / 1e9:6.0f} TFLOP/s")


def run_timing(s: Setup, details: dict[str, Any]) -> None:
    import triton.testing

    from code.bert.packed import attention as A
    from code.bert.packed.kernels import TritonOps

    qkv, cu, bias, n = s.qkv, s.cu, s.bias, s.max_len
    out16 = torch.empty(qkv.shape[0], HEADS * HEAD_DIM, device="cuda", dtype=qkv.dtype)
    out8 = torch.empty(qkv.shape[0], HEADS * HEAD_DIM, device="cuda", dtype=torch.float8_e4m3fn)

    def bias_fa2() -> torch.Tensor:
        return fa2(qkv + bias, cu, n, s.scale)

    fns: dict[str, Callable[[], Any]] = {
        "FA2": lambda: fa2(qkv, cu, n, s.scale),
        "bias add + FA2": bias_fa2,
        "bias add + FA2 + quantize": lambda: TritonOps.quantize(bias_fa2(), FP8_SCALE),
        "FA2 + quantize": lambda: TritonOps.quantize(fa2(qkv, cu, n, s.scale), FP8_SCALE),
        "cuDNN": lambda: cudnn(qkv, cu, n, s.scale),
        "cuDNN contiguous q/k/v": lambda: cudnn(qkv, cu, n, s.scale, contiguous=True),
        "ours": lambda: A.varlen_attention(qkv, cu, n, s.scale, HEADS, out=out16, config=s.config),
        "ours +bias": lambda: A.varlen_attention(qkv, cu, n, s.scale, HEADS, qkv_bias=bias, out=out16,
                                                 config=s.config),
        "ours +bias fp8 out": lambda: A.varlen_attention(
            qkv, cu, n, s.scale, HEADS, qkv_bias=bias, out=out8, out_q_scale=FP8_SCALE, config=s.config
        ),
        "ours e4m3 in, fp8 out": lambda: A.varlen_attention(
            s.qkv8, cu, n, s.scale, HEADS, out=out8, out_q_scale=FP8_SCALE, config=s.config,
            qkv_scales=s.qkv_scales,
        ),
        "ours e4m3 in, FP8 q.k, fp8 out": lambda: A.varlen_attention(
            s.qkv8, cu, n, s.scale, HEADS, out=out8, out_q_scale=FP8_SCALE, config=s.config,
            qkv_scales=s.qkv_scales, fp8_qk_dot=True,
        ),
        "ours +bias max_len=384": lambda: A.varlen_attention(qkv, cu, 384, s.scale, HEADS, qkv_bias=bias, out=out16,
                                                             config=s.config),
    }
    ms: dict[str, float] = {}
    for name, fn in fns.items():
        try:
            ms[name] = float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))
        except Exception as e:
            traceback.print_exc()
            ROWS.append(f"timing {name}: FAILED {type(e).__name__}: {str(e)[:200]}")
    details["timing_ms"] = ms
    details["config_used"] = str(s.config or A.DEFAULT_CONFIG)
    ROWS.append(
        f"timing per layer ({details['config_used']}; useful {s.flops / 1e9:.1f} GFLOP/layer; x{LAYERS} = forward):"
    )
    ROWS.append(f"  {'variant':<28} {'ms/layer':>9} {'ms/fwd':>8} {'TFLOP/s':>8} {'vs FA2':>7} {'vs path':>8}")
    # "path": what ours replaces. The bias add is a separate kernel here; in the model it is the QKV GEMM's epilogue
    # (~2 ms per fp8 forward, documentation/notes/bert_gpu_notes.md), so "vs FA2" is the conservative figure.
    paths = {"ours +bias": "bias add + FA2", "ours +bias fp8 out": "bias add + FA2 + quantize"}
    for name, t in ms.items():
        cells = ["", ""]
        if name.startswith("ours"):
            for i, base in enumerate((ms.get("FA2"), ms.get(paths.get(name, "FA2")))):
                cells[i] = f"{base / t:.2f}x" if base else "-"
        ROWS.append(f"  {name:<28} {t:9.3f} {t * LAYERS:8.2f} {s.flops / t / 1e9:8.0f} {cells[0]:>7} {cells[1]:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("build/bench/attention.json"))
    parser.add_argument("--count", type=int, default=512, help="sequences in the batch")
    parser.add_argument("--pad_rows", type=int, default=64, help="rows past cu_seqlens[-1] (must stay untouched)")
    parser.add_argument("--skip", default="", help="comma list of: correctness,tune,timing")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        import triton

        details["triton"] = triton.__version__
    except ImportError as e:
        details["triton"] = f"missing: {e}"
    setup = Setup(args.count, args.pad_rows)
    details.update(
        tokens=setup.tokens, sequences=len(setup.lengths), max_len=setup.max_len, lengths_source=setup.source,
        useful_gflop_per_layer=setup.flops / 1e9,
    )  # fmt: skip
    steps = [
        ("correctness", lambda: check_correctness(setup, details)),
        ("tune", lambda: run_tune(setup, details)),
        ("timing", lambda: run_timing(setup, details)),
    ]
    run_steps(steps, skip, details, ROWS, lambda: args.out.write_text(json.dumps(details, indent=1, default=str)))
    print_summary("check_attention", details, ROWS, f"triton {details['triton']}")


if __name__ == "__main__":
    main()
