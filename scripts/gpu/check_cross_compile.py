"""Cross-compile every Triton kernel of the product for the GPU architectures it claims: sm_80 (A100), sm_86 (A10,
RTX 30xx), sm_89 (L4, L40S, RTX 4090), sm_90 (H100, H200, GH200), sm_100 (B200).

Triton compiles each kernel on the user's machine for that machine's GPU, so a kernel that does not compile for an
architecture fails only there, at its first launch. This script finds out beforehand:

1. ``bert``, ``gptj`` and ``llama``: run the product's own entry points once on small inputs, so that the JIT
   compiles every specialization an engine can launch: BERT's packed forward (``PackedBert``) for fp16, bf16 and
   fp8 engines (fp8 GEMM subsets, fp8_residual, fp8_attention, the bert-99 engine) at BERT-large's widths, each
   with every attention tile a tuning may pick (``CANDIDATE_CONFIGS``); GPT-J's in-flight engine at GPT-J 6B's
   widths (one layer) with bf16 and FP8 GEMMs over bf16 and FP8 KV caches; Llama 3.1 8B's in-flight engine at its
   widths (two layers; grouped-query decode with its own launch, ``decode_launch``) over a bf16 and an FP8 KV
   cache; each engine under every decode split count of ``DECODE_SPLITS``.
2. ``compile``: list every Triton function of the loaded ``code.*`` modules (discovery: a new kernel file is found
   without naming it here), read what the JIT compiled from each one's per-device cache, and ``triton.compile``
   each specialization for every target (in worker processes; no GPU involved), recording ok or the error and
   the compile time. A kernel needing more shared memory than the target gives a block counts as failed.

Prints a short table last; writes ``OUT/check_cross_compile.json``, ``OUT/kernel_specs.json`` (every
specialization) and a small ``cross_compile_specs.json`` (``--record``) for tests/scripts/test_check_cross_compile.py.

On the device: ``PYTHONPATH=$PWD python3 scripts/gpu/check_cross_compile.py --out $OUT``. Without a GPU (Triton
installed): ``--specs OUT/kernel_specs.json`` compiles the specializations a GPU run recorded. ``--skip=compile``
splits the two: the GPU run only discovers and records (``record`` step: kernel_specs.json and the ``--record``
file, without outcomes), and ``--specs`` compiles them elsewhere (with ``--record``, writing the CPU test's few
with their outcomes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scripts.gpu import cross_compile as xc
from scripts.gpu.steps import print_summary, run_steps

ROWS: list[str] = []  # the summary printed before the table
BERT_LAYERS = 2  # BERT-large's widths; two layers: the first and the last differ (fp8_residual)
BERT_SEQUENCES = 12  # synthetic SQuAD-like features (~1,600 tokens) for calibration and each forward
GPTJ_LAYERS = 1  # GPT-J 6B's widths: the kernels' constexprs (head_dim, widths) are the product's
GPTJ_PROMPTS = (70, 130)  # prompt tokens: a partial page and more than two pages of 64
GPTJ_OUTPUT = (3, 4)  # forced output lengths: a few decode steps each
# Llama 3.1 8B's widths (GQA 32 query heads over 8 key/value heads of 128, its vocabulary); two layers: the second
# layer's cache views start past the first's, as every layer's but the first do in a run
LLAMA_LAYERS = 2
LLAMA_PROMPTS = (70, 130)  # as GPT-J's: a partial page and more than two pages of 64
LLAMA_OUTPUT = (3, 4)
# The decode splits each engine runs: the one-program kernel, the split kernel at Llama's fixed 2, and a count for
# each merge tile (``_merge_kernel``'s SPLIT_TILE: the next power of two) the engine's split rule picks for few
# slots (``decode_launch_for``: at most a typical prompt's 64-token pages, 15 for Llama's 1,000 tokens, so never a
# multiple of 16, which Triton would specialize the split kernel's ``splits`` for).
DECODE_SPLITS = (1, 2, 4, 8, 15)


# -- exercising the product ------------------------------------------------------------------------------------------
def bert_engines(amax: dict[str, float]) -> list[tuple[str, torch.dtype, dict[str, Any]]]:
    """The packed path's engines as ``(name, dtype, packed_bert keyword arguments)``: every precision and every switch
    of ``PackedKernels`` that changes which kernel specializations run (fp8_gemms subsets change which LayerNorms
    write an e4m3 copy and which attention writes e4m3; flash attention has the separate quantize pass)."""
    fp8 = {"amax": amax}
    int8 = {"amax": amax, "eight_bit": "int8"}
    return [
        ("fp16", torch.float16, {}),
        ("fp16 gelu-in-gemm", torch.float16, {"gelu_in_gemm": True}),
        ("bf16", torch.bfloat16, {}),
        ("fp8", torch.float16, fp8),
        ("fp8 flash", torch.float16, {**fp8, "attention": "flash"}),
        ("fp8[qkv]", torch.float16, {**fp8, "fp8_gemms": "qkv"}),
        ("fp8[w1+w2]", torch.float16, {**fp8, "fp8_gemms": "w1+w2"}),
        ("fp8 fp8-residual", torch.float16, {**fp8, "fp8_residual": True}),
        ("fp8 fp8-attention", torch.float16, {**fp8, "fp8_attention": True}),
        ("fp8[qkv] fp8-attention", torch.float16, {**fp8, "fp8_gemms": "qkv", "fp8_attention": True}),
        ("fp8 bert-99", torch.float16, {**fp8, "fast_accum": True, "gelu_in_gemm": True, "fp8_residual": True,
                                        "fp8_attention": True}),
        ("int8", torch.float16, int8),
        ("int8 gelu-in-gemm", torch.float16, {**int8, "gelu_in_gemm": True}),
        ("int8 flash", torch.float16, {**int8, "attention": "flash"}),
        ("int8[w1+w2]", torch.float16, {**int8, "fp8_gemms": "w1+w2"}),
    ]


@torch.inference_mode()
def exercise_bert(device: str, layers: int = BERT_LAYERS, config_name: str = "large") -> None:
    """One packed forward per engine and attention tile (each tile a tuning may keep on some GPU)."""
    from code.bert.dataset import BertFeatures
    from code.bert.model import BERT_CONFIGS, random_weights
    from code.bert.packed.packed_model import collect_amax, run_packed
    from scripts.gpu.packed_variants import packed_bert

    config = dataclasses.replace(BERT_CONFIGS[config_name], num_layers=layers)
    model = random_weights(config, 0)
    ids, seg, mask = BertFeatures.synthetic(BERT_SEQUENCES, seed=0).gather(np.arange(BERT_SEQUENCES))
    amax = collect_amax(model, ids, seg, mask, device, torch.float16)
    tiles = [None]
    if torch.device(device).type == "cuda":
        from code.bert.packed.attention import CANDIDATE_CONFIGS

        tiles = list(CANDIDATE_CONFIGS)
    done = []
    for name, dtype, kw in bert_engines(amax):
        try:
            packed = packed_bert(model, dtype, device, **kw)
            for tile in tiles if packed.triton_attention is not None else [None]:
                packed.attention_config = tile
                run_packed(packed, ids, seg, mask)
            done.append(name)
        except Exception as error:  # noqa: BLE001 - the other engines' kernels still count
            ROWS.append(f"bert {name}: FAILED {type(error).__name__}: {str(error)[:300]}")
    ROWS.append(f"bert: {len(done)} engines ran ({', '.join(done)}) x {len(tiles)} attention tiles, "
                f"{BERT_SEQUENCES} sequences of {int(mask.sum())} tokens, {layers} layers of BERT-{config_name}")


def random_inflight(config: Any, random_weights: Any, inflight_type: Any, elementwise_type: Any,
                    device: str) -> tuple[Any, torch.dtype]:
    """An LLM's in-flight model (``inflight_type.from_model``) of seeded random weights, bf16 on a GPU and float32 on
    the CPU, and that dtype. Its decode step's elementwise work (``elementwise_type``) runs uncompiled: under
    ``torch.compile`` it is Inductor's generated kernels (torch's, not in ``code``), and compiling them would cost
    GPU time this check does not need."""
    cuda = torch.device(device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    inflight = inflight_type.from_model(random_weights(config, 0, dtype, device, draw_on_device=cuda), consume=True)
    inflight.elementwise.decode = elementwise_type(compiled=False).decode
    return inflight, dtype


def run_engines(family: str, inflight: Any, device: str, generation: Any, longest: int, prompt_lengths: tuple[int, ...],
                output_lengths: tuple[int, ...], sixteen: str) -> list[str]:
    """``generate`` on ``inflight``'s engine with 16-bit (``sixteen``) and then FP8 GEMMs, each over a 16-bit and an
    FP8 KV cache, under every split count of ``DECODE_SPLITS`` with the model's own decode launch (one engine per
    count: an engine runs the launch it was built with), on random prompts of ``prompt_lengths`` tokens forced to
    ``output_lengths`` new ones. The GEMMs' and the FP8 cache's scales come from one pass over the same prompts
    (``collect_amax``); ``longest`` is the engine's longest prompt, so that the cache's strides are a run's. A
    variant that fails is a FAILED row of ``ROWS`` and the others still run, since their kernels still count.
    Returns the names of the variants that ran."""
    from code.llm.inflight_engine import EngineOptions, InflightEngine
    from code.numerics.fp8 import E4M3

    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, inflight.config.vocab_size, (n,), generator=generator) for n in prompt_lengths]
    amax = inflight.collect_amax([p.to(device) for p in prompts])
    pages = len(prompts) * -(-longest // 64)
    launch = dict(inflight.decode_launch)
    done = []
    for gemms, kv in ((sixteen, sixteen), (sixteen, "fp8"), ("fp8", sixteen), ("fp8", "fp8")):
        name = f"{gemms} GEMMs, {kv} KV"
        try:
            if gemms == "fp8" and not inflight.uses_fp8_gemms:
                inflight.use_fp8_gemms(amax)  # one way: it frees the 16-bit weights, so the 16-bit variants go first
            options = EngineOptions(slots=len(prompts), max_prompt_length=longest, page_size=64, kv_pages=pages,
                                    kv_dtype=E4M3 if kv == "fp8" else None, cuda_graphs=False)
            for splits in DECODE_SPLITS:
                engine = InflightEngine(inflight, generation, options, kv_amax=amax,
                                        decode_launch={**launch, "SPLITS": splits})
                engine.generate([p.numpy() for p in prompts], list(output_lengths))
                del engine
            done.append(name)
        except Exception as error:  # noqa: BLE001 - the other variants' kernels still count
            ROWS.append(f"{family} {name}: FAILED {type(error).__name__}: {str(error)[:300]}")
    return done


def exercise_gptj(device: str, config: Any = None) -> None:
    """GPT-J's in-flight engine (``run_engines``): bf16 and FP8 GEMMs over bf16 and FP8 KV caches, under every split
    count of ``DECODE_SPLITS``, with MLPerf's beam search."""
    from code.gptj.inflight.elementwise import Elementwise
    from code.gptj.inflight.layers import InflightModel
    from code.gptj.model import GptjConfig, random_weights
    from code.llm.generation import GenerationConfig

    config = config or dataclasses.replace(GptjConfig(), n_layer=GPTJ_LAYERS)
    inflight, _ = random_inflight(config, random_weights, InflightModel, Elementwise, device)
    generation = GenerationConfig()  # MLPerf's: 4 beams, up to 128 new tokens (the cache's strides as in a run)
    longest = config.n_positions - generation.max_new_tokens + 1
    done = run_engines("gptj", inflight, device, generation, longest, GPTJ_PROMPTS, GPTJ_OUTPUT, "bf16")
    ROWS.append(f"gptj: {len(done)} engines ran ({'; '.join(done)}), prompts of {GPTJ_PROMPTS} tokens, "
                f"{config.n_layer} layer(s) of n_embd {config.n_embd}, decode splits {DECODE_SPLITS}")


def exercise_llama(device: str, config: Any = None) -> None:
    """Llama 3.1 8B's in-flight engine (``code/llama31/inflight_model.py``, through ``run_engines``): 16-bit and FP8
    GEMMs (the prompt passes' kernels write 16-bit or e4m3 GEMM inputs) over bf16 and FP8 KV caches, with the
    engine's own decode launch (``decode_launch``: grouped-query attention, several key/value heads a program),
    under every split count of ``DECODE_SPLITS``, with the run's greedy decoding."""
    from code.llama31.architecture import LlamaConfig
    from code.llama31.backends.pytorch import generation_config
    from code.llama31.elementwise import Elementwise
    from code.llama31.inflight_model import InflightLlama
    from code.llama31.memory_plan import MAX_PROMPT_TOKENS
    from code.llama31.model import random_weights

    config = config or dataclasses.replace(LlamaConfig(), n_layers=LLAMA_LAYERS)
    inflight, dtype = random_inflight(config, random_weights, InflightLlama, Elementwise, device)
    generation = generation_config(config)  # the run's: greedy, up to 128 new tokens
    # the run's longest prompt (the memory plan's), so the cache's strides are a run's
    longest = min(MAX_PROMPT_TOKENS, config.n_positions - generation.max_new_tokens + 1)
    done = run_engines("llama", inflight, device, generation, longest, LLAMA_PROMPTS, LLAMA_OUTPUT,
                       str(dtype).removeprefix("torch."))
    shown = ", ".join(f"{k} {v}" for k, v in inflight.decode_launch.items() if k != "SPLITS")
    ROWS.append(f"llama: {len(done)} engines ran ({'; '.join(done)}; scales from one pass over the prompts), "
                f"prompts of {LLAMA_PROMPTS} tokens, {config.n_layers} layer(s) of dim {config.dim}, "
                f"{config.n_heads} query heads over {config.n_kv_heads} key/value heads, decode launch "
                f"{shown} with splits {DECODE_SPLITS}")


# -- compiling -------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_cache() -> Iterator[str]:
    """An empty Triton cache directory for the cross-compiles, removed afterwards."""
    path = tempfile.mkdtemp(prefix="xcompile-cache-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class CrossCompiler:
    """Compiles records for every target in worker processes while the GPU steps go on: ``submit`` takes the
    records a step's launches added, ``results`` waits for all. Workers are spawned (no CUDA state inherited) at
    once, so that their imports overlap the first GPU step, and each compiles into its own empty Triton cache (every
    compile a real one, the JIT's own cache untouched). With one worker it compiles in this process, in ``results``.

    A compile that kills its process (an LLVM abort) breaks the pool and loses every task still in it: those then
    run again each in a process of its own, so that a crash costs only the task that crashed, which reports it."""

    def __init__(self, targets: list[str], workers: int, cache_dir: str) -> None:
        self.targets, self.cache_dir, self.workers = targets, cache_dir, workers
        self.specs: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str]] = set()
        self._tasks: dict[tuple[int, str], Future | None] = {}
        self.pool: ProcessPoolExecutor | None = self._pool(workers) if workers > 1 else None
        for _ in range(workers if self.pool is not None else 0):
            self.pool.submit(xc.ready)

    def _pool(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=xc.init_worker,
                                   initargs=(self.cache_dir,))

    def submit(self, specs: list[dict[str, Any]]) -> int:
        """Queue the records not queued before (by kernel and native hash; a recording has none: all are new);
        the largest kernels first, so that the last tasks are short ones. Returns how many were new."""
        new = []
        for spec in specs:
            key = (spec["kernel"], spec.get("native", {}).get("hash") or json.dumps(spec, sort_keys=True))
            if key not in self._seen:
                self._seen.add(key)
                new.append(len(self.specs))
                self.specs.append(spec)
        new.sort(key=lambda i: len(json.dumps(self.specs[i])), reverse=True)
        for i in new:
            for target in self.targets:
                future = None
                if self.pool is not None:
                    with contextlib.suppress(BrokenProcessPool):  # run alone in results()
                        future = self.pool.submit(xc.compile_task, i, self.specs[i], target)
                self._tasks[(i, target)] = future
        return len(new)

    def results(self) -> list[dict[str, dict[str, Any]]]:
        """Per record (in ``specs``' order), ``{target: result}`` (``cross_compile.compile_one``)."""
        out: list[dict[str, dict[str, Any]]] = [{} for _ in self.specs]
        if self.pool is None:
            saved = os.environ.get("TRITON_CACHE_DIR")
            os.environ["TRITON_CACHE_DIR"] = self.cache_dir
            try:
                for i, target in self._tasks:
                    out[i][target] = xc.compile_one(self.specs[i], target)
            finally:
                if saved is None:
                    os.environ.pop("TRITON_CACHE_DIR", None)
                else:
                    os.environ["TRITON_CACHE_DIR"] = saved
            return [{t: r[t] for t in self.targets if t in r} for r in out]
        running = {future: key for key, future in self._tasks.items() if future is not None}
        for future in as_completed(running):
            with contextlib.suppress(BrokenProcessPool):
                i, target, result = future.result()
                out[i][target] = result
        lost = [key for key in self._tasks if key[1] not in out[key[0]]]
        if lost:
            ROWS.append(f"a compile worker died: {len(lost)} compiles ran again, each in a process of its own")
            with ThreadPoolExecutor(self.workers) as threads:
                for (i, target), result in zip(lost, threads.map(self._alone, lost), strict=True):
                    out[i][target] = result
        return [{t: r[t] for t in self.targets if t in r} for r in out]

    def _alone(self, key: tuple[int, str]) -> dict[str, Any]:
        i, target = key
        started = time.perf_counter()
        with self._pool(1) as one:
            try:
                return one.submit(xc.compile_task, i, self.specs[i], target).result()[2]
            except BrokenProcessPool:
                return {"ok": False, "error": "CompilerCrash: the compile killed its process (an abort in Triton's "
                                              "compiler: its message is in this run's stderr)",
                        "seconds": round(time.perf_counter() - started, 2)}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def by_row(rows: list[str], results: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {row: results[i] for row, i in sorted((row, i) for i, row in enumerate(rows))}


def captured() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The product's Triton functions and every specialization this process has compiled of them."""
    kernels = xc.find_kernels()
    return kernels, xc.capture(kernels)


def summarize(details: dict[str, Any], results: dict[str, dict[str, dict[str, Any]]], targets: list[str]) -> None:
    failed = {t: sum(not r[t]["ok"] for r in results.values() if t in r) for t in targets}
    seconds = sum(c["seconds"] for r in results.values() for c in r.values())
    ROWS.append(f"compiled {len(results)} specializations x {len(targets)} targets in {seconds:.0f} s of compile "
                f"time; failed per target: {', '.join(f'{t} {n}' for t, n in failed.items())}")
    for target, tool in details["ptxas"].items():
        ROWS.append(f"  ptxas for {target}: {tool}")


def native_check(details: dict[str, Any], specs: list[dict[str, Any]], rows: list[str],
                 results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Whether compiling a record for the GPU it was recorded on gives the JIT's own kernel (the same cache hash):
    the proof that a record holds everything the compile depends on."""
    same, differ = 0, []
    for spec, row in zip(specs, rows, strict=True):
        target = f"sm_{spec['native']['arch']}"
        got = results.get(row, {}).get(target)
        if got is None:
            continue
        if got.get("hash") == spec["native"]["hash"]:
            same += 1
        else:
            differ.append(row)
    details["native_hash"] = {"same": same, "differ": differ}
    if same or differ:
        ROWS.append(f"recompiled for the run's own GPU: {same} of {same + len(differ)} equal the JIT's kernels "
                    f"(same hash){'; differ: ' + ', '.join(differ[:5]) if differ else ''}")


def discover(details: dict[str, Any], compiler: CrossCompiler) -> tuple[list[dict[str, Any]], list[str]]:
    """List the product's Triton functions (every module of ``cross_compile.KERNEL_PACKAGES`` imported first) and
    take what the steps compiled; returns the specializations and their row names. A kernel no step launched is
    named, since it has no row."""
    failed_imports = xc.import_kernel_modules()
    kernels, specs = captured()
    compiler.submit(specs)
    specs = compiler.specs
    rows = xc.row_names(specs)
    compiled = {spec["kernel"] for spec in specs}
    helper = xc.helpers(kernels)
    details["import_errors"] = failed_imports
    details["helpers"] = sorted(helper)
    details["not_exercised"] = sorted(set(kernels) - compiled - helper)
    ROWS.append(f"found {len(kernels)} Triton functions in code.*: {len(compiled)} kernels compiled by the run "
                f"({len(specs)} specializations), {len(helper)} helpers inlined into them")
    if details["not_exercised"]:
        ROWS.append(f"  NOT EXERCISED (no row below; add it to a step): {', '.join(details['not_exercised'])}")
    for module, error in failed_imports.items():
        ROWS.append(f"  import of {module} FAILED: {error[:200]}")
    return specs, rows


def write_records(out: Path, record: Path, specs: list[dict[str, Any]], rows: list[str],
                  results: dict[str, dict[str, dict[str, Any]]], source: str) -> None:
    """Every specialization to ``OUT/kernel_specs.json``, the few the CPU test compiles to ``record``; each with the
    outcomes ``results`` holds for it (none when the compile was skipped)."""
    xc.write_specs(out / "kernel_specs.json", specs, rows, results, source)
    chosen = xc.pick_for_record(specs, rows, results)
    xc.write_specs(record, [specs[i] for i in chosen], [rows[i] for i in chosen], results, source)
    ROWS.append(f"wrote every specialization to {out / 'kernel_specs.json'}, {len(chosen)} of them to {record}")


def gpu_source(details: dict[str, Any]) -> str:
    return f"GPU run on {details['device']}, {details['date']}, torch {details['torch']}"


def compile_step(details: dict[str, Any], compiler: CrossCompiler, out: Path, record: Path) -> None:
    """Discover the specializations, wait for the cross-compiles and write the records with their outcomes."""
    specs, rows = discover(details, compiler)
    per_spec = compiler.results()
    results = by_row(rows, per_spec)
    details["kernels"] = results
    summarize(details, results, compiler.targets)
    native_check(details, specs, rows, results)
    write_records(out, record, specs, rows, results, gpu_source(details))
    details["table"] = xc.table(results, compiler.targets)


def record_step(details: dict[str, Any], compiler: CrossCompiler, out: Path, record: Path) -> None:
    """``--skip=compile``: discover the specializations and write the records without outcomes, so the GPU's time
    goes to the launches alone; ``--specs OUT/kernel_specs.json`` compiles them on any machine with Triton."""
    specs, rows = discover(details, compiler)
    write_records(out, record, specs, rows, {}, f"{gpu_source(details)} (discovery only: not compiled)")
    ROWS.append(f"compile skipped: compile them without a GPU with --specs {out / 'kernel_specs.json'}")


def compile_recorded(details: dict[str, Any], path: Path, compiler: CrossCompiler, record: Path | None = None
                     ) -> None:
    """The ``--specs`` path: compile recorded specializations here (no GPU needed) and compare each target's outcome
    with the recording's. With ``record`` it also writes the few the CPU test compiles, with this compile's outcomes:
    the second half of a split run, whose GPU half (``--skip=compile``) recorded none."""
    data = xc.read_specs(path)
    compiler.submit(data["specs"])
    specs = compiler.specs
    rows = [spec.get("row") or name for spec, name in zip(specs, xc.row_names(specs), strict=True)]
    details.update(recorded_by=data["source"], recorded_triton=data["triton"])
    ROWS.append(f"{len(specs)} recorded specializations from {path} ({data['source']}, Triton {data['triton']})")
    results = by_row(rows, compiler.results())
    details["kernels"] = results
    summarize(details, results, compiler.targets)
    differ = []
    for spec, row in zip(specs, rows, strict=True):
        for target, want in spec.get("expected", {}).items():
            got = results[row].get(target)
            if got is not None and got["ok"] != want["ok"]:
                differ.append({"row": row, "target": target, "recorded": want, "now": got})
    details["differ_from_recording"] = differ
    stale = sorted(row for row, r in results.items() if any(c.get("stale") for c in r.values()))
    details["stale"] = stale
    compared = sum(bool(spec.get("expected")) for spec in specs)
    ROWS.append(f"outcomes that differ from the recording: {len(differ)} ({compared} of {len(specs)} records hold "
                f"outcomes to compare); stale records: {len(stale)}")
    for d in differ[:10]:
        ROWS.append(f"  {d['row']} {d['target']}: recorded {'ok' if d['recorded']['ok'] else 'FAIL'}, now "
                    f"{'ok' if d['now']['ok'] else 'FAIL: ' + str(d['now']['error'])[:150]}")
    if record is not None:
        chosen = xc.pick_for_record(specs, rows, results)
        xc.write_specs(record, [specs[i] for i in chosen], [rows[i] for i in chosen], results,
                       f"{data['source']}; compiled without a GPU {details['date']}")
        ROWS.append(f"wrote {len(chosen)} of them with this compile's outcomes to {record}")
    details["table"] = xc.table(results, compiler.targets)


GPU_STEPS = ("bert", "gptj", "llama")  # the steps that run the product; "compile" follows them


def parse_args(argv: list[str] | None = None, gpu: bool = True) -> argparse.Namespace:
    """The command line, checked before anything loads: unknown targets or steps, and a run that cannot work here
    (no GPU and no ``--specs``; ``--specs`` with the compile skipped, which leaves nothing to do), stop it at once."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("build/check_cross_compile"))
    parser.add_argument("--targets", default=",".join(xc.TARGETS), help=f"comma list of {', '.join(xc.TARGETS)}")
    parser.add_argument("--skip", default="", help=f"comma list of steps: {','.join(GPU_STEPS)},compile (compile: "
                        "discovery only, the GPU run writes kernel_specs.json and the --record file without "
                        "compiling them; --specs compiles them later on a machine without a GPU)")
    parser.add_argument("--workers", type=int, default=xc.default_workers(), help="compile processes")
    parser.add_argument("--specs", type=Path, help="no GPU needed: compile the specializations of this file (a "
                        "GPU run's kernel_specs.json or cross_compile_specs.json) instead of running the product")
    parser.add_argument("--record", type=Path, help="where the few specializations the CPU test compiles go, with "
                        "their outcomes (GPU run: default OUT/cross_compile_specs.json; with --specs: written only "
                        "when given; tests/fixtures/ keeps the committed one)")
    args = parser.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(args.targets) - set(xc.TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(xc.TARGETS)}")
    args.skip = set(filter(None, args.skip.split(",")))
    unknown = sorted(args.skip - {*GPU_STEPS, "compile"})
    if unknown:
        parser.error(f"unknown steps {unknown} in --skip; known: {', '.join(GPU_STEPS)}, compile")
    if args.specs is not None and "compile" in args.skip:
        parser.error("--specs with --skip=compile leaves nothing to do: --specs only compiles")
    if args.specs is None and not gpu:
        parser.error("no GPU here: pass --specs FILE to compile the specializations a GPU run recorded")
    return args


def main() -> None:
    gpu = torch.cuda.is_available()
    args = parse_args(gpu=gpu)
    targets = args.targets
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    details: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": torch.cuda.get_device_name() if gpu else "none (cross-compile only)",
        "capability": list(torch.cuda.get_device_capability()) if gpu else None,
        "targets": targets,
        "ptxas": xc.ptxas_versions(targets),
    }
    report = args.out / "check_cross_compile.json"

    def save() -> None:
        report.write_text(json.dumps(details, indent=1, default=str) + "\n")

    def step(run: Any) -> Any:
        """A GPU step, then its new specializations handed to the compile workers at once."""
        def body() -> None:
            try:
                run()
            finally:
                try:
                    compiler.submit(captured()[1])
                except Exception:  # noqa: BLE001 - the compile step captures again and reports it
                    traceback.print_exc()

        return body

    discovery_only = "compile" in args.skip
    with fresh_cache() as cache_dir:
        # discovery only starts no compile workers: one worker compiles in this process, in results(), never called
        compiler = CrossCompiler(targets, 1 if discovery_only else args.workers, cache_dir)
        try:
            if args.specs is not None:
                steps = [("compile", lambda: compile_recorded(details, args.specs, compiler, args.record))]
            else:
                record = args.record or args.out / "cross_compile_specs.json"
                last = record_step if discovery_only else compile_step
                steps = [
                    ("bert", step(lambda: exercise_bert("cuda"))),
                    ("gptj", step(lambda: exercise_gptj("cuda"))),
                    ("llama", step(lambda: exercise_llama("cuda"))),
                    ("record" if discovery_only else "compile", lambda: last(details, compiler, args.out, record)),
                ]
            # the step that discovers and records always runs: it is what the GPU steps are for
            run_steps(steps, args.skip - {"compile"}, details, ROWS, save)
        finally:
            compiler.close()
    print_summary("check_cross_compile", details, ROWS, f"triton {details['triton']}")
    print("\n".join(details.get("table", [])))


if __name__ == "__main__":
    main()
