"""Time cuBLASLt's candidate algorithms for BERT-large's (or GPT-J's) GEMMs against the kernels torch picks (GPU).

Why: in the profile of the packed forward the ``w1`` GEMMs with the bias + GELU epilogue (16-bit and FP8) run
below the plain GEMMs' rate (figures: documentation/notes/journal/2026-11-22.md). Both are cuBLASLt's first heuristic
guess
(torch's ``_addmm_activation``, our ``cublaslt.LtGemm``). This script lists up to ``--candidates`` algorithms per
GEMM, checks each one's output against torch's (so a fast wrong algorithm cannot win), times them with CUDA events,
and prints each GEMM's torch time, heuristic-first time and best time. It changes nothing in the engine. The engine
keeps cuBLASLt's first guess because inside a full forward a tuned choice is no faster
(documentation/notes/journal/2026-11-22.md,
documentation/notes/bert_gpu_notes.md).

    python3 scripts/gpu/check_gemm_algos.py --out build/bench/gemm_algos.json [--tokens 85296] [--candidates 16]
    python3 scripts/gpu/check_gemm_algos.py --model gptj --tokens 1024,4096 --out build/bench/gemm_gptj.json

``--graph 24``: each GEMM timed inside a CUDA graph of 24 copies with their own weights (as a forward's layers), in
microseconds per GEMM: at SingleStream's few hundred rows one launch at a time times the launch, not the GEMM.

``--model gptj``: the in-flight engine's two FP8 GEMMs per layer at the given row counts (decode steps: 4 rows per
slot), with and without the bias epilogue, against ``torch._scaled_mm`` (the engine's call).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from code.bert.packed.cublaslt import LtGemm
from code.numerics.fp8 import Fp8Linear

ROWS: list[str] = []
HIDDEN, FFN = 1024, 4096
# (name, N, K): BERT-large's four GEMMs per layer
SHAPES = [("qkv", 3 * HIDDEN, HIDDEN), ("wo", HIDDEN, HIDDEN), ("w1", FFN, HIDDEN), ("w2", HIDDEN, FFN)]
# (name, N, K): GPT-J's two GEMMs per layer in the in-flight engine (q, k, v and fc_in fused; attention output and
# fc_out fused over the concatenated inputs)
GPTJ_HIDDEN, GPTJ_FFN = 4096, 16384
GPTJ_SHAPES = [("in", 3 * GPTJ_HIDDEN + GPTJ_FFN, GPTJ_HIDDEN), ("out", GPTJ_HIDDEN, GPTJ_HIDDEN + GPTJ_FFN)]


def gpu_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median of ``reps`` CUDA-event timings after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def case_16bit(name: str, n: int, k: int, tokens: int, gelu: bool, copy: int = 0
               ) -> tuple[LtGemm, Callable, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(n + k + 7919 * copy)
    x = torch.randn(tokens, k, generator=g, device="cuda").half()
    w = (torch.randn(n, k, generator=g, device="cuda") * 0.03).half()
    b = (torch.randn(n, generator=g, device="cuda") * 0.1).half()
    if gelu:
        lt = LtGemm(w, b, gelu=True)
        return lt, lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True), x
    lt = LtGemm(w)
    return lt, lambda: F.linear(x, w), x


def fp8_operands(
    n: int, k: int, tokens: int, dtype: torch.dtype, weight_std: float, bias: bool, fast_accum: bool = False,
    copy: int = 0,
) -> tuple[Fp8Linear, torch.Tensor, torch.Tensor | None]:
    """A random FP8 GEMM (``dtype`` weight and output, the input's scale from its own amax), its quantized input and
    its bias (None without ``bias``); seeded by the shape and ``copy``, so every candidate sees the same operands."""
    g = torch.Generator(device="cuda").manual_seed(n + k + 7919 * copy)
    x = torch.randn(tokens, k, generator=g, device="cuda")
    w = (torch.randn(n, k, generator=g, device="cuda") * weight_std).to(dtype)
    b = (torch.randn(n, generator=g, device="cuda") * 0.1).to(dtype) if bias else None
    lin = Fp8Linear(w, float(x.abs().max()), dtype, fast_accum=fast_accum)
    return lin, lin.quantize_input(x), b


def case_fp8(name: str, n: int, k: int, tokens: int, gelu: bool, copy: int = 0
             ) -> tuple[LtGemm, Callable, torch.Tensor]:
    lin, xq, b = fp8_operands(n, k, tokens, torch.float16, 0.03, bias=True, copy=copy)
    if gelu:  # writes e4m3 for w2: compare dequantized against the same GEMM's 16-bit output + torch's tanh GELU
        out_scale = 0.01
        lt = LtGemm(lin.weight_q, b, gelu=True, weight_scale=lin.weight_scale, act_scale=lin.act_scale,
                    out_scale=out_scale)  # fmt: skip

        def reference() -> torch.Tensor:
            h = lin(xq, b).float()
            return (F.gelu(h, approximate="tanh") / out_scale).clamp(-448, 448).to(torch.float8_e4m3fn)

        return lt, reference, xq
    lt = LtGemm(lin.weight_q, weight_scale=lin.weight_scale, act_scale=lin.act_scale, out_dtype=torch.float16)
    return lt, lambda: lin(xq), xq


def case_gptj(name: str, n: int, k: int, tokens: int, bias: bool, copy: int = 0
              ) -> tuple[LtGemm, Callable, torch.Tensor]:
    """A GPT-J decode GEMM as the in-flight engine runs it: e4m3 in, bf16 out, cuBLASLt fast accumulation, bias in
    the epilogue (torch's ``_scaled_mm``, the engine's call) or none (the bias folded into the next kernel)."""
    lin, xq, b = fp8_operands(n, k, tokens, torch.bfloat16, 0.02, bias, fast_accum=True, copy=copy)
    lt = LtGemm(lin.weight_q, b, weight_scale=lin.weight_scale, act_scale=lin.act_scale, out_dtype=torch.bfloat16,
                fast_accum=True)  # fmt: skip
    return lt, lambda: lin(xq, b), xq


def graph_ms(calls: list[Callable[[], Any]], reps: int) -> float:
    """Per-call time of ``calls`` captured in one CUDA graph and replayed: no launch gaps, as in the engine's graph
    path, where a GEMM of a few hundred rows takes a few microseconds and one launch at a time would time the launch."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture (workspaces, lazy init)
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return gpu_ms(graph.replay, reps) / len(calls)



def try_candidates(heuristics: list[Any], measure: Callable[[Any], tuple[float, float]], unit: str,
                   max_rel: float) -> tuple[list[dict], list[dict], dict | None, dict | None]:
    """Each algorithm cuBLASLt offers, measured (``measure``: its error against torch's output and its time in
    ``unit``), or the error it raised (one it offers but cannot run or capture is noted and skipped); then those
    within ``max_rel``, the heuristic's first choice and the fastest of those (None where there is none)."""
    results = []
    for i, heuristic in enumerate(heuristics):
        try:
            err, took = measure(heuristic)
        except Exception as error:  # noqa: BLE001 - the other algorithms' figures still count
            results.append({"index": i, "error": str(error)[:200]})
            continue
        results.append({"index": i, unit: took, "rel": err, "waves": heuristic.waves_count})
    ok = [r for r in results if unit in r and r["rel"] < max_rel]
    first = next((r for r in results if r["index"] == 0 and unit in r), None)
    return results, ok, first, min(ok, key=lambda r: r[unit]) if ok else None


def time_case_graph(label: str, make: Callable, n: int, k: int, m: int, flag: bool, args: Any) -> dict:
    """``time_case`` in a CUDA graph of ``args.graph`` GEMMs of the shape, each with its own weights (as a forward's
    layers: no weight stays in L2 from one call to the next); microseconds per GEMM."""
    copies = [make(label, n, k, m, flag, copy) for copy in range(args.graph)]
    lt0, torch0, x0 = copies[0]
    ref = torch0()
    torch_us = graph_ms([fn for _, fn, _ in copies], args.reps) * 1e3

    def measure(heuristic: Any) -> tuple[float, float]:
        err = rel(lt0.run(x0, heuristic), ref)
        return err, graph_ms([lambda lt=lt, x=x: lt.run(x, heuristic) for lt, _, x in copies], args.reps) * 1e3

    results, ok, first, best = try_candidates(lt0.heuristics(m, args.candidates), measure, "us", args.max_rel)
    weight_mb = n * k * copies[0][0].weight.element_size() / 1e6
    first_text = f"{first['us']:.2f}" if first else "-"
    best_text = f"#{best['index']} {best['us']:.2f} ({weight_mb / best['us']:.2f} TB/s)" if best else "-"
    gain = f"{first['us'] / best['us']:.2f}x" if best and first else "-"
    ROWS.append(f"  {label:<18} {torch_us:8.2f}  {first_text:>10}  {best_text:>24}  {gain:>6}  "
                f"{len(ok)}/{len(results)} ok")
    return {"torch_us": torch_us, "first": first, "best": best, "candidates": results, "weight_mb": weight_mb}


def time_case(label: str, lt: LtGemm, torch_fn: Callable, x: torch.Tensor, n: int, k: int, args: Any) -> dict:
    tokens = x.shape[0]
    flop = 2.0 * tokens * n * k
    ref = torch_fn()
    torch_ms = gpu_ms(torch_fn, args.reps)

    def measure(heuristic: Any) -> tuple[float, float]:
        return rel(lt.run(x, heuristic), ref), gpu_ms(lambda: lt.run(x, heuristic), args.reps)

    results, ok, first, best = try_candidates(lt.heuristics(tokens, args.candidates), measure, "ms", args.max_rel)
    row = {"torch_ms": torch_ms, "first": first, "best": best, "candidates": results, "gflop": flop / 1e9}
    tf = lambda ms: flop / ms / 1e9  # noqa: E731 - TFLOP/s from ms
    first_text = f"{first['ms']:.3f} ({tf(first['ms']):.0f})" if first else "-"
    best_text = f"#{best['index']} {best['ms']:.3f} ({tf(best['ms']):.0f})" if best else "-"
    gain = f"{torch_ms / best['ms']:.3f}x" if best else "-"
    ROWS.append(
        f"  {label:<18} {torch_ms:8.3f} ({tf(torch_ms):4.0f})  {first_text:>16}  {best_text:>20}  {gain:>7}  "
        f"{len(ok)}/{len(results)} ok"
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("build/bench/gemm_algos.json"))
    parser.add_argument("--tokens", default="85296",
                        help="M, or a comma list of them: 512 samples x 166.6 mean tokens by default")
    parser.add_argument("--model", choices=("bert", "gptj"), default="bert",
                        help="gptj: the in-flight engine's two FP8 GEMMs per layer (M: decode rows, 4 per slot)")
    parser.add_argument("--candidates", type=int, default=16, help="cuBLASLt heuristic results per GEMM")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--max_rel", type=float, default=2e-2, help="an algorithm further from torch's is wrong")
    parser.add_argument("--graph", type=int, default=0,
                        help="time each GEMM inside a CUDA graph of this many copies with their own weights (24: "
                             "BERT-large's layers), in us per GEMM, instead of one launch at a time")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "tokens": args.tokens,
        "cases": {},
    }
    cases = []  # (label, make, n, k, flag, M)
    for m in (int(t) for t in args.tokens.split(",")):
        if args.model == "gptj":
            cases += [(f"M{m} {name}{' bias' if bias else ''}", case_gptj, n, k, bias, m)
                      for name, n, k in GPTJ_SHAPES for bias in (True, False)]  # fmt: skip
            continue
        for precision, make in (("fp16", case_16bit), ("fp8", case_fp8)):
            for name, n, k in SHAPES:
                cases += [(f"M{m} {precision} {name}{' gelu' if gelu else ''}", make, n, k, gelu, m)
                          for gelu in ((False, True) if name == "w1" else (False,))]  # fmt: skip
    if args.graph:
        ROWS.append(f"GEMM algorithms ({args.model}) in a CUDA graph of {args.graph}: us per GEMM")
        ROWS.append(f"  {'gemm':<18} {'torch':>8}  {'lt #0':>10}  {'lt best (weight bytes)':>24}  {'#0/best':>6}")
    else:
        ROWS.append(f"GEMM algorithms ({args.model}): ms (TFLOP/s)")
        ROWS.append(f"  {'gemm':<18} {'torch':>15}  {'lt heuristic #0':>16}  {'lt best':>20}  {'torch/best':>7}")
    for label, make, n, k, flag, m in cases:
        try:
            if args.graph:
                details["cases"][label] = time_case_graph(label, make, n, k, m, flag, args)
            else:
                lt, torch_fn, x = make(label, n, k, m, flag)
                details["cases"][label] = time_case(label, lt, torch_fn, x, n, k, args)
        except Exception as error:  # keep the other shapes' figures
            ROWS.append(f"  {label:<18} FAILED {type(error).__name__}: {str(error)[:200]}")
        args.out.write_text(json.dumps(details, indent=1, default=str))
        torch.cuda.empty_cache()
    print(f"\n=== check_gemm_algos {details['date']} {details['device']} torch {details['torch']}")
    print("\n".join(ROWS))


if __name__ == "__main__":
    main()
