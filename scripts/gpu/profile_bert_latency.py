"""Where one BERT sample's latency goes on the GPU (the SingleStream path), engine by engine.

For each engine (the bert-99 ladder's rungs, random weights of BERT-large, built as ``make generate_engines``
builds them) and each sequence length, the pytorch backend as SingleStream runs it (batch 1, a CUDA graph per
token bucket) is timed three ways, median of ``--reps``:

- ``run_batch``: what LoadGen's sample sees in the worker: pack, copy in, graph replay, copy out, unpack;
- ``replay``: the graph's replay alone, CUDA events around it (the GPU's time for the forward);
- ``kernels``: the sum of the eager forward's kernel durations from the profiler (launch gaps excluded),

so ``run_batch - replay`` is the host's share and ``replay - kernels`` the gaps between kernels in the graph. The
eager forward's kernels are grouped by kind (GEMM, attention, LayerNorm...) per length, which says where a latency
engine has to cut.

``--jitter_s S`` (first engine only) then times one sample after another for S seconds a phase, SQuAD-like lengths,
as a SingleStream test issues them: without readers, with the test's power and host readers running
(``code.mlperf.power.power_sampler``, ``HostReader``), and without again. A SingleStream p90 is a tail: this says
whether the readers a test runs beside the samples lengthen it. ``bert_latency.json`` holds each engine's rows by
length under its name and the phases under ``jitter``, by engine.

    PYTHONPATH=$PWD python3 scripts/gpu/profile_bert_latency.py --out DIR [--lengths 128,171,256,384] [--reps 200]
        [--engines fp8-attention,fp8-residual,fp8-fast-accum,int8,fp16]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.bert.backends import create_backend
from code.bert.backends.pytorch import PytorchOptions
from code.bert.backends.pytorch_engine import CalibrationSet, EngineSpec, build_engine
from code.bert.dataset import BertFeatures
from code.bert.packed.runner import PackedKernels
from code.bert.squad import MAX_SEQ_LENGTH

ENGINES: dict[str, PackedKernels] = {  # the bert-99 ladder's rungs (configs/bert/__init__.py)
    "fp8-attention": PackedKernels(precision="fp8", fp8_fast_accum=True, gelu_in_gemm=True, fp8_residual=True,
                                   fp8_attention=True),
    "fp8-residual": PackedKernels(precision="fp8", fp8_fast_accum=True, gelu_in_gemm=True, fp8_residual=True),
    "fp8-fast-accum": PackedKernels(precision="fp8", fp8_fast_accum=True, gelu_in_gemm=True),
    "int8": PackedKernels(precision="int8", gelu_in_gemm=True),
    "fp16": PackedKernels(precision="fp16", gelu_in_gemm=True),
}
KINDS = (  # the first pattern a kernel's name matches names its kind
    ("attention", r"attention|attn|flash|fmha"),
    ("layernorm", r"layer_?norm|_ln|add_ln|embed"),
    ("gemm", r"gemm|sm90|cutlass|matmul|mma|_scaled_mm|nvjet|int8_gemm"),
    ("quantize/cast", r"quant|cast|copy|memcpy|convert"),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, pattern in KINDS if re.search(pattern, low)), "other")


def features(length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One feature of ``length`` real tokens (random ids, the second half segment 1), padded to the model's 384."""
    ids, seg, mask = (np.zeros((1, MAX_SEQ_LENGTH), dtype=np.int32) for _ in range(3))
    ids[0, :length] = np.random.default_rng(length).integers(1000, 20000, length)
    seg[0, length // 2:length] = 1
    mask[0, :length] = 1
    return ids, seg, mask


def host_stages(runner: Any, ids: np.ndarray, seg: np.ndarray, mask: np.ndarray, reps: int) -> dict[str, float]:
    """``PackedRunner._run``'s graph path stage by stage, median ms each: pack into the pinned buffer, issue the
    copy in + replay + copy out, wait for the GPU, unpack; ``gpu_after_issue`` is how long the wait took."""
    from code.bert.packed.packing import pack_into, unpack

    ctx = runner.contexts[0]
    tokens = int(np.count_nonzero(mask))
    bucket = ctx.graphs.bucket_for(tokens, 1)
    stages: dict[str, list[float]] = defaultdict(list)
    for _ in range(reps):
        t0 = time.perf_counter()
        packed = pack_into(ctx.host_in_np, ids, seg, mask, bucket, ctx.graphs.slots[bucket])
        t1 = time.perf_counter()
        with torch.cuda.stream(ctx.stream):
            ctx.graphs.input_buffer(bucket).copy_(ctx.host_in[: packed.words], non_blocking=True)
            logits = ctx.graphs.replay(bucket)
            ctx.host_out[: packed.total].copy_(logits[: packed.total], non_blocking=True)
            ctx.done.record(ctx.stream)
        t2 = time.perf_counter()
        ctx.done.synchronize()
        t3 = time.perf_counter()
        unpack(ctx.host_out_np, packed)
        t4 = time.perf_counter()
        for name, seconds in (("pack", t1 - t0), ("issue", t2 - t1), ("wait", t3 - t2), ("unpack", t4 - t3),
                              ("total", t4 - t0)):
            stages[name].append(seconds * 1000)
    return {name: median_ms(values) for name, values in stages.items()}


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples), 4)


def time_engine(name: str, lengths: list[int], reps: int, folder: Path,
                jitter_s: float = 0.0) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The engine's figures per length, and with ``jitter_s`` its ``jitter`` phases (else None). The phases come
    apart from the rows, so a reader of the rows takes every key as a length."""
    from torch.profiler import ProfilerActivity, profile

    from code.bert.packed.packed_model import run_packed

    kernels = ENGINES[name]
    spec = EngineSpec("large", kernels.precision, "random", seed=0)
    calib = BertFeatures.synthetic(100, seed=0)
    engine = folder / name
    build_engine(spec, engine, calibration=CalibrationSet(calib.input_ids, calib.segment_ids, calib.input_mask,
                                                          "synthetic:seed=0"), device="cuda")
    backend = create_backend("pytorch", PytorchOptions(
        engine_dir=engine, engine_spec=spec, device="cuda", max_batch_size=1, cuda_graphs=True,
        graph_max_tokens=16384, kernels=kernels))
    runner = backend.packed
    ctx = runner.contexts[0]
    rows: dict[str, Any] = {}
    for length in lengths:
        ids, seg, mask = features(length)
        idx = np.array([0])
        with torch.inference_mode():
            for _ in range(20):
                backend.run_batch(idx, ids, seg, mask)
            e2e = []
            for _ in range(reps):
                start = time.perf_counter()
                backend.run_batch(idx, ids, seg, mask)
                e2e.append((time.perf_counter() - start) * 1000)
            bucket = ctx.graphs.bucket_for(length, 1) if ctx.graphs is not None else None
            replay = []
            if bucket is not None:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(ctx.stream):
                    for _ in range(reps):
                        begin.record(ctx.stream)
                        ctx.graphs.replay(bucket)
                        end.record(ctx.stream)
                        end.synchronize()
                        replay.append(begin.elapsed_time(end))
            stages = host_stages(runner, ids, seg, mask, reps) if bucket is not None else {}
            run_packed(runner.model, ids, seg, mask)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run_packed(runner.model, ids, seg, mask)
                torch.cuda.synchronize()
        by_kind: dict[str, float] = defaultdict(float)
        launches = 0
        top: list[tuple[str, float, int]] = []
        for event in prof.key_averages():
            us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
            if us <= 0:
                continue
            by_kind[kind_of(event.key)] += us / 1000
            launches += event.count
            top.append((event.key[:70], us / 1000, event.count))
        top.sort(key=lambda item: -item[1])
        rows[str(length)] = {
            "bucket": bucket, "run_batch_ms": median_ms(e2e), "replay_ms": median_ms(replay) if replay else None,
            "kernels_ms": round(sum(by_kind.values()), 4), "launches": launches, "host_stages_ms": stages,
            "by_kind_ms": {k: round(v, 4) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            "top": [(k, round(ms, 4), n) for k, ms, n in top[:12]],
        }
    phases = jitter(backend, jitter_s) if jitter_s > 0 else None
    del backend, runner
    torch.cuda.empty_cache()
    return rows, phases


def jitter(backend: Any, seconds: float) -> dict[str, Any]:
    """Per-sample latency (ms) of samples run one after another, phase by phase: no readers, the test's power and
    host readers, no readers again; each phase's percentiles and its medians per second."""
    from contextlib import nullcontext

    from code.common.host_load import HostReader
    from code.mlperf.power import power_sampler

    feats = BertFeatures.synthetic(4096, seed=1)
    idx = np.array([0])
    phases: dict[str, Any] = {}
    for phase in ("none", "readers", "none_again"):
        readers = power_sampler(["cuda:0"], host=HostReader()) if phase == "readers" else nullcontext()
        lat, when = [], []
        with readers, torch.inference_mode():
            start = time.perf_counter()
            i = 0
            while time.perf_counter() - start < seconds:
                j = i % len(feats.lengths)
                t0 = time.perf_counter()
                backend.run_batch(idx, feats.input_ids[j : j + 1], feats.segment_ids[j : j + 1],
                                  feats.input_mask[j : j + 1])
                lat.append((time.perf_counter() - t0) * 1000)
                when.append(t0 - start)
                i += 1
        values, times = np.array(lat), np.array(when)
        per_second = [round(float(np.median(values[(times >= a) & (times < a + 1)])), 3)
                      for a in range(math.ceil(seconds)) if ((times >= a) & (times < a + 1)).any()]
        phases[phase] = {"samples": len(values), "p50": round(float(np.percentile(values, 50)), 4),
                         "p90": round(float(np.percentile(values, 90)), 4),
                         "p99": round(float(np.percentile(values, 99)), 4), "median_per_second": per_second}
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--lengths", default="128,171,256,384")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--jitter_s", type=float, default=0.0, help="seconds a phase of the readers' jitter test")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in args.lengths.split(",")]
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    jitters: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for number, name in enumerate(args.engines.split(",")):
            try:
                jitter_s = args.jitter_s if number == 0 else 0.0
                results[name], phases = time_engine(name, lengths, args.reps, Path(folder), jitter_s)
                if phases is not None:
                    jitters[name] = phases
            except Exception as error:  # one engine's failure must not hide the others' figures
                results[name] = {"error": f"{type(error).__name__}: {error}"[:300]}
    if jitters:
        results["jitter"] = jitters
    (args.out / "bert_latency.json").write_text(json.dumps(results, indent=1))
    print(f"{results['device']}, torch {results['torch']}: ms, median of {args.reps}")
    print("| engine | tokens | run_batch | replay | kernels | launches | by kind (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.engines.split(","):
        rows = results[name]
        if "error" in rows:
            print(f"| {name} | - | {rows['error']} |")
            continue
        for length, r in rows.items():
            kinds = ", ".join(f"{k} {v:.3f}" for k, v in r["by_kind_ms"].items())
            print(f"| {name} | {length} | {r['run_batch_ms']:.3f} | {r['replay_ms']} | {r['kernels_ms']:.3f} | "
                  f"{r['launches']} | {kinds} |")
    print("\nhost stages of the graph path (ms, median): pack, issue (copy in, replay, copy out), wait, unpack")
    for name in args.engines.split(","):
        for length, r in results[name].items() if "error" not in results[name] else ():
            print(f"  {name} {length}: " + ", ".join(f"{k} {v:.4f}" for k, v in r["host_stages_ms"].items()))
    first = args.engines.split(",")[0]
    if "error" not in results[first]:
        print(f"\ntop kernels of {first} at {lengths[-1]} tokens (eager): ms total, launches")
        for key, ms, n in results[first][str(lengths[-1])]["top"]:
            print(f"  {ms:8.4f} {n:4d}  {key}")
        if first in jitters:
            print(f"\none sample after another, {first} ({args.jitter_s:.0f} s a phase; ms): samples, p50, p90, p99, "
                  "medians per second")
            for phase, r in jitters[first].items():
                print(f"  {phase:10s} {r['samples']:6d} {r['p50']:.3f} {r['p90']:.3f} {r['p99']:.3f}  "
                      + " ".join(f"{m:.3f}" for m in r["median_per_second"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
