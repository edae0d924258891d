# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""Can a split-K FP8 GEMM beat cuBLASLt at SingleStream's few hundred rows? (GPU; an experiment, nothing wired.)

Why: at 128-384 rows BERT-large's FP8 GEMMs take 3.7-7.8 us each inside a CUDA graph, their weights read at
0.3-0.8 TB/s of the H200's 4.8 (``check_gemm_algos.py --graph 24``): a 1024 x 1024 GEMM at 128 rows is 16 output
tiles of 64 x 128 for 132 SMs, so most of the GPU waits. Splitting K over more programs lets every SM stream a part
of the weight. This script times one Triton kernel (e4m3 tiles, float32 accumulation; K split SPLIT_K ways, the
parts added with float32 atomics into a zeroed buffer, then a bias epilogue kernel: three graph nodes) against
cuBLASLt's heuristic choice (``LtGemm``, one node), both in a CUDA graph of 24 GEMMs with their own weights, and
checks each result against ``torch._scaled_mm``.

    PYTHONPATH=$PWD python3 scripts/gpu/check_split_k_gemm.py --out build/bench/split_k.json [--tokens 128,256]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_gemm_algos import SHAPES, fp8_operands, graph_ms, rel  # noqa: E402 - the sibling script's cases, timing

from code.bert.packed.cublaslt import LtGemm  # noqa: E402


@triton.jit
def _split_k_kernel(x_ptr, w_ptr, acc_ptr, y_ptr, scale_ptr, bias_ptr, M, N, K_PER_SPLIT, stride_xm, stride_wn,
                    stride_am, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SPLIT_K: tl.constexpr):
    """Program (tile, split): the split's run of K for one output tile; with one split the epilogue (scale, bias,
    fp16) runs here, else the tile is added into ``acc_ptr`` (float32, zeroed before)."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    grid_n = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = split * K_PER_SPLIT + tl.arange(0, BLOCK_K)
    rows = offs_m % M  # past M (or N): a valid row whose results are never stored
    cols = offs_n % N
    x_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + cols.to(tl.int64)[None, :] * stride_wn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K_PER_SPLIT, BLOCK_K):
        acc = tl.dot(tl.load(x_ptrs), tl.load(w_ptrs), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    if SPLIT_K == 1:
        y = acc * tl.load(scale_ptr) + tl.load(bias_ptr + cols).to(tl.float32)[None, :]
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(acc_ptr + offs_m[:, None] * stride_am + offs_n[None, :], acc, mask=mask, sem="relaxed")


@triton.jit
def _bias_epilogue(acc_ptr, y_ptr, scale_ptr, bias_ptr, total, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    y = tl.load(acc_ptr + offs, mask=ok) * tl.load(scale_ptr) + tl.load(bias_ptr + offs % N, mask=ok).to(tl.float32)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=ok)


def split_k_gemm(xq: torch.Tensor, wq: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, config: dict[str, int]
                 ) -> torch.Tensor:
    """``(xq @ wq.T) * scale + bias`` in fp16; ``scale``: the one-element product of the two e4m3 scales."""
    m, (n, k) = xq.shape[0], wq.shape
    bm, bn, bk, splits = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    if k % (splits * bk):
        raise ValueError(f"K={k} is not a multiple of SPLIT_K x BLOCK_K = {splits * bk}")
    y = torch.empty((m, n), dtype=torch.float16, device=xq.device)
    acc = torch.zeros((m, n), dtype=torch.float32, device=xq.device) if splits > 1 else y
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), splits)
    _split_k_kernel[grid](xq, wq, acc, y, scale, bias, m, n, k // splits, xq.stride(0), wq.stride(0), acc.stride(0),
                          y.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=splits,
                          num_warps=config["num_warps"], num_stages=config["num_stages"])
    if splits > 1:
        _bias_epilogue[(triton.cdiv(m * n, 2048),)](acc, y, scale, bias, m * n, n, BLOCK=2048, num_warps=4)
    return y


def configs(k: int) -> list[dict[str, int]]:
    """The launch shapes tried: 64/128-row and -column tiles, K steps of 128, K split 1 to 16 ways."""
    return [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": splits, "num_warps": 4, "num_stages": 3}
            for bm, bn, splits in itertools.product((64, 128), (64, 128), (1, 2, 4, 8, 16))
            if k % (splits * 128) == 0]


def name(config: dict[str, int]) -> str:
    return f"m{config['BLOCK_M']}n{config['BLOCK_N']}k{config['BLOCK_K']}x{config['SPLIT_K']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench/split_k.json"))
    parser.add_argument("--tokens", default="128,192,256,384")
    parser.add_argument("--copies", type=int, default=24, help="GEMMs with their own weights in one graph")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--max_rel", type=float, default=2e-2)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M"), "cases": {}}
    rows = [f"split-K FP8 GEMM vs cuBLASLt, us per GEMM in a CUDA graph of {args.copies} (weight read rate)",
            f"  {'gemm':<10} {'cuBLASLt':>16} {'best split-K':>32} {'gain':>6}  {'split 1':>8}"]
    for m, (label, n, k) in itertools.product((int(t) for t in args.tokens.split(",")), SHAPES):
        copies = []  # cuBLASLt's GEMM with the bias epilogue (as the engine's qkv runs), its input, its bias
        for copy in range(args.copies):
            lin, xq, bias = fp8_operands(n, k, m, torch.float16, 0.03, bias=True, copy=copy)
            copies.append((LtGemm(lin.weight_q, bias, weight_scale=lin.weight_scale, act_scale=lin.act_scale,
                                  out_dtype=torch.float16), None, xq))
        weight_mb = n * k / 1e6
        lt_us = graph_ms([lambda lt=lt, x=x: lt.run(x) for lt, _, x in copies], args.reps) * 1e3
        scales = [lt.weight_scale * lt.act_scale for lt, _, _ in copies]
        ref = copies[0][0].run(copies[0][2]).float()
        results = {}
        for config in configs(k):
            try:
                got = split_k_gemm(copies[0][2], copies[0][0].weight, scales[0], copies[0][0].bias, config)
                error = rel(got, ref)
                us = graph_ms([lambda lt=lt, x=x, s=s, c=config: split_k_gemm(x, lt.weight, s, lt.bias, c)
                               for (lt, _, x), s in zip(copies, scales, strict=True)], args.reps) * 1e3
                results[name(config)] = {"us": us, "rel": error}
            except Exception as error:  # a shape Triton cannot compile or run: noted, the others go on
                results[name(config)] = {"error": f"{type(error).__name__}: {str(error)[:160]}"}
        ok = {key: r for key, r in results.items() if "us" in r and r["rel"] < args.max_rel}
        best = min(ok, key=lambda key: ok[key]["us"]) if ok else None
        one = min((r["us"] for key, r in ok.items() if key.endswith("x1")), default=float("nan"))
        details["cases"][f"M{m} {label}"] = {"cublaslt_us": lt_us, "weight_mb": weight_mb, "configs": results}
        best_text = f"{best} {ok[best]['us']:.2f} ({weight_mb / ok[best]['us']:.2f} TB/s)" if best else "-"
        gain = f"{lt_us / ok[best]['us']:.2f}x" if best else "-"
        rows.append(f"  M{m:<4}{label:<5} {lt_us:7.2f} ({weight_mb / lt_us:.2f} TB/s) {best_text:>32} {gain:>6}  "
                    f"{one:8.2f}")
        args.out.write_text(json.dumps(details, indent=1))
        del copies
        torch.cuda.empty_cache()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
