"""Where BERT's Offline rate goes between the GPU-only forward and LoadGen: the packed runner fed without LoadGen.

Times one engine (random weights; unless told otherwise bert-99's first: FP8 with fast accumulation, the e4m3
residual, FP8 attention and GELU in w1's epilogue) on the batches the core's batcher makes (LoadGen's query drawn
from the loaded features, sorted longest first, cut into ``--batch`` samples), fed six ways:

1. ``gpu``: the forwards back to back on one stream, inputs already on the GPU (the ceiling), for several queries:
   each feature once, LoadGen's draw sorted and unsorted, every batch copies of one feature (repeated rows at
   their limit). A sustained BERT forward holds the GPU at its power limit, so each is timed after the clocks
   settled.
2. ``run x1``: ``PackedRunner.run`` from one thread (pack, one copy in, forward, one copy out, unpack), on inputs
   gathered before the clock starts.
3. ``run xN``: the same from N threads at once, one context (stream, buffers) each: what the batcher's workers do.
4. ``harness xN``: ``BertRunner.run_batch`` from N threads (gather from the features, run, pad to 384 tokens):
   the whole Python side of a batch as the C++ core calls it, without LoadGen.
5. ``one batch xK after 5 s idle``: K forwards of one mixed-length batch from an idle GPU, as a short profile or
   kernel check times them (10: before the power limit pulls the clocks down; 200: after).
6. the host costs of one batch alone (CPU ms): gather, pack, the forward's launches, unpack.

``--sample_times FILE`` instead reads a run's ``sample_times.npz`` (beside LoadGen's logs) and prints the spacing
of its batch completions: a GPU kept busy completes batches at the forward's pace.

Run on the device: ``PYTHONPATH=$PWD python3 scripts/gpu/check_bert_feeding.py --out $OUT``. Prints a short table
last.
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.bert.benchmark import BertRunner
from code.bert.dataset import BertFeatures
from code.bert.model import BERT_CONFIGS, random_weights
from code.bert.packed.packed_model import collect_amax, packed_tensors, upload_packed
from code.bert.packed.packing import pack_into, unpack
from code.bert.packed.runner import PackedRunner
from code.bert.packed.spec import PackedKernels
from code.bert.squad import PAD_LOGIT

ROWS: list[str] = []


def query_batches(features: BertFeatures, samples: int, batch: int, loaded: int, repeats: bool, sort: bool,
                  seed: int = 0) -> list[np.ndarray]:
    """An Offline query cut as the batcher cuts it: ``samples`` indices, each feature once (``repeats`` False) or
    drawn with replacement from the first ``loaded`` features, as LoadGen draws from the loaded set; longest first
    (stable) when ``sort``."""
    rng = np.random.default_rng(seed)
    if not repeats and samples > len(features.lengths):
        raise ValueError(f"{samples} distinct samples asked of {len(features.lengths)} features")
    query = rng.integers(0, loaded, samples) if repeats else rng.permutation(samples)
    if sort:
        query = query[np.argsort(-features.lengths[query], kind="stable")]
    return [query[i : i + batch] for i in range(0, len(query), batch)]


class _Backend:
    """The pytorch backend's ``run_batch`` over a runner (what ``BertRunner`` calls)."""

    def __init__(self, runner: PackedRunner) -> None:
        self.runner = runner

    def run_batch(self, _indices: np.ndarray, ids: np.ndarray, seg: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.runner.run(ids, seg, mask)


def threaded(work: Callable[[np.ndarray], Any], batches: list[np.ndarray], threads: int) -> float:
    """Seconds for ``threads`` threads to take every batch from one queue and run ``work`` on it."""
    todo: queue.Queue[np.ndarray] = queue.Queue()
    for b in batches:
        todo.put(b)
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while True:
                try:
                    b = todo.get_nowait()
                except queue.Empty:
                    return
                work(b)
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return seconds


def gpu_only(runner: PackedRunner, features: BertFeatures, batches: list[np.ndarray]) -> float:
    """Seconds of the forwards alone, back to back on one stream (inputs uploaded before the clock starts)."""
    uploaded = []
    for b in batches:
        tensors, packed = upload_packed(*features.gather(b), runner.model.device)
        uploaded.append((tensors, packed.max_len))
    torch.cuda.synchronize()
    with torch.inference_mode():
        start = time.perf_counter()
        for tensors, max_len in uploaded:
            runner.model.forward(*tensors, max_len=max_len)
        torch.cuda.synchronize()
    return time.perf_counter() - start


def gpu_burst(runner: PackedRunner, features: BertFeatures, batch: np.ndarray, forwards: int,
              idle_s: float) -> float:
    """Samples/s of ``forwards`` forwards of one batch after ``idle_s`` of idle GPU: how a short timing (a profile,
    a kernel check) sees the clocks before the power limit pulls them down."""
    tensors, packed = upload_packed(*features.gather(batch), runner.model.device)
    torch.cuda.synchronize()
    time.sleep(idle_s)
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(forwards):
            runner.model.forward(*tensors, max_len=packed.max_len)
        torch.cuda.synchronize()
    return len(batch) * forwards / (time.perf_counter() - start)


def host_costs(runner: PackedRunner, features: BertFeatures, batch: np.ndarray, reps: int) -> dict[str, float]:
    """CPU ms of one batch's host steps, each alone (medians)."""
    times: dict[str, list[float]] = {"gather": [], "pack": [], "launch forward": [], "unpack + pad": []}
    buffer = runner.contexts[0].host_in_np
    for _ in range(reps):
        t = time.perf_counter()
        ids, seg, mask = features.gather(batch)
        times["gather"].append(time.perf_counter() - t)
        t = time.perf_counter()
        packed = pack_into(buffer, ids, seg, mask)
        times["pack"].append(time.perf_counter() - t)
        tensors = packed_tensors(buffer, packed.padded_total, packed.slots, runner.model.device)
        torch.cuda.synchronize()
        with torch.inference_mode():
            t = time.perf_counter()
            logits = runner.model.forward(*tensors, max_len=packed.max_len)
            times["launch forward"].append(time.perf_counter() - t)
        host = logits[: packed.total].float().cpu().numpy()
        t = time.perf_counter()
        out = unpack(host, packed)
        padded = np.full((out.shape[0], 384, 2), PAD_LOGIT, dtype=np.float32)
        padded[:, : out.shape[1]] = out
        times["unpack + pad"].append(time.perf_counter() - t)
    return {k: round(float(np.median(v)) * 1e3, 2) for k, v in times.items()}


def sample_time_gaps(path: Path) -> None:
    """Batch completions of a run: how far apart they are, against their tokens."""
    from code.harness.core import SampleTimes
    from code.report.figures import batch_sizes

    times = SampleTimes.load(path)
    # a batch's samples share one completion time (one QuerySamplesComplete call), the rule of batch_sizes
    ends, batch_of = np.unique(times.completed_s, return_inverse=True)
    sizes = batch_sizes(times)
    tokens = np.bincount(batch_of, weights=times.length).astype(np.int64) if times.length is not None else sizes
    gaps = np.diff(ends)
    first_issue = float(times.issued_s.min())
    ROWS.append(f"{path}: {len(times.completed_s)} samples in {len(ends)} completions; first completion "
                f"{(ends[0] - first_issue) * 1e3:.1f} ms after the first issue, last at {ends[-1] - first_issue:.2f} s")
    common = np.unique(sizes, return_counts=True)
    top = sorted(zip(common[1].tolist(), common[0].tolist(), strict=True), reverse=True)[:3]
    ROWS.append(f"  samples/s over the test: {len(times.completed_s) / (ends[-1] - first_issue):,.0f}; commonest "
                f"batch sizes {[size for _, size in top]}")
    if len(gaps):
        per_token_us = gaps / np.maximum(tokens[1:], 1) * 1e6
        ROWS.append(f"  completion spacing ms: median {np.median(gaps) * 1e3:.1f}, "
                    f"p10 {np.percentile(gaps, 10) * 1e3:.1f}, p90 {np.percentile(gaps, 90) * 1e3:.1f}, "
                    f"max {gaps.max() * 1e3:.1f}; us per token: median "
                    f"{np.median(per_token_us):.3f}")
        ROWS.append(f"  tokens per second over completions: {tokens[1:].sum() / (ends[-1] - ends[0]):,.0f}; mean "
                    f"length {float(tokens.sum() / sizes.sum()):.1f}")


QUERIES = {
    # name: (samples drawn with replacement, sorted longest first, every batch one feature repeated)
    "distinct sorted": (False, True, False),
    "loadgen sorted": (True, True, False),  # the default query draws each loaded feature ~1.5 times
    "loadgen unsorted": (True, False, False),
    "one feature per batch": (True, True, True),  # a 600 s run: ~500 copies of each sample, a batch of one
}


def make_query(name: str, features: BertFeatures, samples: int, batch: int, loaded: int) -> list[np.ndarray]:
    repeats, sort, same = QUERIES[name]
    if same:
        rng = np.random.default_rng(1)
        return [np.full(batch, i) for i in rng.integers(0, loaded, -(-samples // batch))]
    return query_batches(features, samples, batch, loaded, repeats, sort)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--loaded", type=int, default=10833, help="features LoadGen's draws come from (SQuAD's "
                        "count); the distinct query takes --samples features of its own")
    parser.add_argument("--samples", type=int, default=16384, help="samples of the Offline query")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--passes", type=int, default=3, help="times each timed mode runs over its query")
    parser.add_argument("--kernels", default="fp8_fast_accum,fp8_residual,fp8_attention,gelu_in_gemm",
                        help="PackedKernels switches turned on (comma list)")
    parser.add_argument("--engine", type=Path, help="an fp8 engine directory make run built (random weights): its "
                        "calibration instead of one made here")
    parser.add_argument("--sample_times", type=Path, nargs="*", default=[], help="only analyse these files")
    args = parser.parse_args()
    if args.sample_times:
        for path in args.sample_times:
            sample_time_gaps(path)
        print("\n".join(ROWS))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",") if t]
    details: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "date": time.strftime("%Y-%m-%d %H:%M"), "kernels": args.kernels}
    if args.engine:
        from code.bert.backends.pytorch_engine import EngineSpec, load_engine_manifest

        model, manifest = load_engine_manifest(args.engine, EngineSpec("large", "fp8"), "cuda")
        details["engine"] = str(args.engine)
    else:
        model = random_weights(BERT_CONFIGS["large"], 0)
        calib = BertFeatures.synthetic(100, seed=0)
        amax = collect_amax(model, calib.input_ids, calib.segment_ids, calib.input_mask, "cuda", torch.float16)
        model, manifest = model.to("cuda", torch.float16), {"calibration": {"amax": amax}}
    details["amax"] = manifest["calibration"]["amax"]
    switches = {k: True for k in args.kernels.split(",") if k}
    runner = PackedRunner(model, manifest, PackedKernels(precision="fp8", **switches), args.batch, max(threads), True,
                          16384)
    features = BertFeatures.synthetic(max(args.loaded, args.samples), seed=7)
    harness = BertRunner(features, _Backend(runner))

    def run_one(inputs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        runner.run(*inputs)

    queries = {name: make_query(name, features, args.samples, args.batch, args.loaded) for name in QUERIES}
    loadgen = queries["loadgen sorted"]
    threaded(run_one, [features.gather(b) for b in loadgen[:4]], max(threads))  # warm-up batches, untimed
    gpu_only(runner, features, loadgen)  # the clocks settle at the power limit before any timed mode
    modes: dict[str, tuple[str, float, int]] = {}  # mode -> (query, seconds, samples)
    for name, batches in queries.items():
        timed = batches * args.passes
        modes[f"gpu, {name}"] = (name, gpu_only(runner, features, timed), sum(len(b) for b in timed))
    timed = loadgen * args.passes
    gathered = [features.gather(b) for b in timed]
    count = sum(len(b) for b in timed)
    for n in sorted({1, *threads}):
        modes[f"run x{n}, loadgen sorted"] = ("loadgen sorted", threaded(run_one, gathered, n), count)
    for n in threads:
        modes[f"harness x{n}, loadgen sorted"] = ("loadgen sorted", threaded(harness.run_batch, timed, n), count)
    modes["gpu, loadgen sorted (again)"] = ("loadgen sorted", gpu_only(runner, features, timed), count)
    rates = {k: samples / seconds for k, (_, seconds, samples) in modes.items()}
    query_of = {k: query for k, (query, _, _) in modes.items()}
    # one batch of mixed lengths (~the mean), timed after the GPU idled: 10 forwards (~0.6 s) and 200 (~12 s)
    middle = queries["loadgen unsorted"][0]
    for forwards in (10, 200):
        name = f"gpu, one batch x{forwards} after 5 s idle"
        rates[name] = gpu_burst(runner, features, middle, forwards, 5.0)
        query_of[name] = "middle batch"
    lengths_of_middle = float(np.mean(features.lengths[middle]))
    lengths = {name: float(np.mean(features.lengths[np.concatenate(b)])) for name, b in queries.items()}
    lengths["middle batch"] = lengths_of_middle
    details["samples_per_s"] = {k: round(v) for k, v in rates.items()}
    details["mean_length"] = lengths
    details["host_ms"] = host_costs(runner, features, loadgen[len(loadgen) // 4], 7)
    (args.out / "check_bert_feeding.json").write_text(json.dumps(details, indent=1))
    tokens = {name: rate * lengths[query_of[name]] for name, rate in rates.items()}
    ceiling = tokens["gpu, loadgen sorted"]  # tokens/s: the queries' mean lengths differ
    ROWS.append(f"=== check_bert_feeding {details['date']} {details['device']} torch {details['torch']}; "
                f"{args.samples} samples x {args.passes} passes drawn from {args.loaded} features, batches of "
                f"{args.batch}; kernels: {args.kernels}")
    ROWS.append(f"  {'mode':<40}{'samples/s':>10}{'tokens/s':>12}{'of gpu (tokens/s)':>19}")
    for name, rate in rates.items():
        ROWS.append(f"  {name:<40}{rate:>10,.0f}{tokens[name]:>12,.0f}{tokens[name] / ceiling:>19.1%}")
    ROWS.append(f"  host ms per batch: {details['host_ms']}")
    print("\n".join(ROWS))


if __name__ == "__main__":
    main()
