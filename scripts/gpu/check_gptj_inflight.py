"""GPT-J in-flight engine on a GPU: the decode kernels against their reference, beam-4 tokens against the eager
reference model, FP8 against bf16, engine throughput of several variants, and the reference-style HF baseline, in
one call.

    python3 -m scripts.gpu.check_gptj_inflight --out DIR [--variants ...] [--samples 384] [--steps attention,...]
        [--skip hf,...] [--slots 256] [--device cuda] [--model 6b]

Steps (each timed; a failing step does not stop the others; ``--steps`` picks some, in this order):
- ``attention``: Triton decode attention vs ``decode_attention_reference`` on a random cache, bf16 and FP8
  (relative error), and its time at full size against the bytes it must read (achieved bandwidth).
- ``decode_splits``: the split (multi-block) decode attention at the engine's shape (256 slots of CNN/DailyMail-like
  prompts, generated counts drawn up to each sample's forced output length), bf16 and FP8 caches: today's kernel
  (``SPLITS`` 1) against ``SPLITS`` 2/4/8, one- and two-warp launches and other tiles and depths
  (``DECODE_SPLIT_CHOICES``), each checked against
  the reference, timed (median), with its cache-read bandwidth and speed-up; and one split choice captured in a
  CUDA graph, whose replay must equal the eager call. Alone, well under 2 minutes:
  ``python3 -m scripts.gpu.check_gptj_inflight --out DIR --steps=decode_splits``.
- ``decode_heads``: ``DECODE_LAUNCH["HEADS"]`` (key/value heads per program) at the same GPT-J shape, bf16 and FP8
  caches: today's launch (the baseline of every speed-up) and k32w2s2, then HEADS 2 and 4 at the tiles a 16-row
  tile of real rows may want (``DECODE_HEADS_CHOICES``: fewer keys a tile for the same bytes, 8 warps); then
  grouped-query attention at Llama 3.1 8B's decode shape (256 slots, 1 beam, 32 query heads over 8 key/value
  heads of 128, prompts of mean ~1,000 tokens; ``LLAMA_HEADS_CHOICES``), HEADS 1, 2 and 4. Each launch checked
  against the reference and timed (median), with its cache-read bandwidth and what it compiled to (registers a
  thread, local memory, shared memory; decode_splits' rows say the same). Alone:
  ``python3 -m scripts.gpu.check_gptj_inflight --out DIR --steps=decode_heads``.
- ``agreement``: GPT-J 6B with random bf16 weights; the engine's beam-4 tokens vs ``generation.generate`` on the
  eager model for the same prompts (16-bit ties may flip a few).
- ``splits``: GPT-J 6B's engine at ``--split-slots`` slots (SingleStream's 1 first) under its fixed decode launch
  (``DECODE_LAUNCH``: SPLITS 1) and under the split rule's (``code.llm.paged_attention.decode_launch_for``), bf16
  and FP8 caches, every slot at a typical 930-token prompt and 64 generated tokens: one decode step's time (CUDA
  graph replay, median of ``--repeats``), SPLITS old/new, speed-up, and both launches' layer-0 attention against
  each other and the reference (``scripts/gpu/decode_splits.py``). Alone:
  ``python3 -m scripts.gpu.check_gptj_inflight --out DIR --steps=splits``.
- ``variants``: the engine over synthetic CNN/DailyMail-like prompts, one row per variant
  ``GEMMS/KV/SLOTS/OUTPUTS`` (GEMMS bf16|fp8|fp8fast, fp8fast being FP8 with cuBLASLt's fast accumulation; KV
  bf16|fp8; OUTPUTS full|forced): random weights never choose EOS,
  so ``full`` generates 128 tokens per sample (the worst case) and ``forced`` ends each at a drawn length of mean
  ~70 (``GptjSamples.with_forced_lengths``); an optional ``/plain`` runs the elementwise work uncompiled (the
  baseline of ``code/gptj/inflight/elementwise.py``). bf16 variants must come before fp8 ones (the FP8 switch frees
  the 16-bit weights). The switch also reports the FP8 prefill logits' error against the eager model's in float32,
  with and without fast accumulation.
- ``hf``: transformers' ``GPTJForCausalLM.generate`` (bf16, beam 4, batch 1, as the MLPerf reference calls it) on
  a few of the same prompts, for the ratio.
- ``profile``: the engine as ``make run`` runs it on a GPU (FP8 GEMMs with fast accumulation, FP8 KV cache) under
  the profiler: one prefill pass (prompts packed up to its 16,384 tokens) and one eager decode step of the engine
  (``engine._step``, beam search's 4 beams a slot) with ``--slots`` slots each holding one of the synthetic
  prompts; each one's kernels grouped by kind (GEMM, attention, the rest) with their share of the GPU time, the
  GEMMs' rate in TFLOP/s, and the top kernels (``scripts/gpu/inflight_profile.py``, shared with
  ``check_llama_inflight``). Tables go to ``DIR/profile_prefill.txt`` and ``profile_step.txt``. Unlike
  ``--profile`` (a whole generate of the last variant), one pass and one step, each by kind. Alone:
  ``python3 -m scripts.gpu.check_gptj_inflight --out DIR --steps=profile``.
Writes ``DIR/gptj_inflight.json`` and prints a short table last. Random weights of ``--model`` (a ``GPTJ_CONFIGS``
name) in every step that draws a model; on a machine without a GPU ``--device cpu --model tiny --steps=profile`` runs
the profile step in float32 (FP8 GEMMs emulated, a 16-bit cache; its events are operators, not kernels).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import code.llm.paged_attention as attention_module
from code.gptj.backends.inflight import calibrate
from code.gptj.dataset import GptjSamples
from code.gptj.inflight.elementwise import Elementwise
from code.gptj.inflight.layers import InflightModel
from code.gptj.memory_plan import TYPICAL_PROMPT_TOKENS
from code.gptj.model import GPTJ_CONFIGS, GptjConfig, hf_config, random_weights
from code.llama31.inflight_model import DECODE_LAUNCH as LLAMA_LAUNCH
from code.llm.generation import GenerationConfig, cache_shape, generate
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.kv_cache import CacheShape, KVCache
from code.llm.paged_attention import DECODE_LAUNCH, decode_attention, decode_attention_reference
from code.numerics.fp8 import E4M3, quantize
from scripts.gpu.decode_splits import SplitCases
from scripts.gpu.inflight_profile import profile_engine, profile_rows
from scripts.gpu.steps import run_steps

DECODE_SLOTS = 256  # the engine's FP8 batch (configs: gpu_batch_size)
# decode_splits: the one-head launch first (the baseline of every speed-up), then SPLITS 2/4/8 at its tile, then one
# program per (slot, head) with fewer warps (a 16-row tile split over 4 warps reduces each softmax row across warps
# through shared memory) and other tiles and depths, then a few of those split 2 ways
# The CUDA decode kernel's launches (``decode_cuda``): warps a block and tile buffers a warp, as built.
DECODE_CUDA_CHOICES: list[dict[str, int]] = [
    {**attention_module.CUDA_LAUNCH, "num_warps": warps, "num_stages": stages, "BLOCKS": blocks, "ORDER": order}
    for order in (0, 1) for warps, stages, blocks in ((4, 2, 1), (4, 3, 1), (4, 2, 4))
]
DECODE_CUDA_CHOICES.append({**DECODE_CUDA_CHOICES[-2], "SPLITS": 2})  # heads first, w4s3, two splits
DECODE_SPLIT_CHOICES: list[dict[str, int]] = [
    {"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 1},
    *({"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": n, "HEADS": 1} for n in (2, 4, 8)),
    *({"KEYS": keys, "num_warps": warps, "num_stages": stages, "SPLITS": 1, "HEADS": 1}
      for warps in (1, 2) for keys in (32, 64, 128) for stages in (2, 3, 4)),
    *({"KEYS": keys, "num_warps": 2, "num_stages": 3, "SPLITS": 2, "HEADS": 1} for keys in (32, 64)),
]
# decode_heads at GPT-J's shape: today's launch (DECODE_LAUNCH, two heads a program) first, the baseline; then the
# one-head launches (k64w4s3, the default before it, and k32w2s2), HEADS 2 (8 real rows of 16) and HEADS 4 (16 real
# rows). HEADS h reads h heads' keys a tile, so KEYS 64 / h reads one head's k64 bytes a tile. What each compiles
# to for sm_90a (ptxas -v, Triton 3.6; FP8 / bf16 cache): k64w4s3 255 registers with 280 B spilled / 206; HEADS 4
# k16w4s3 255 + 48 B / 230, k16w8 210 / 160, k32w4s3 255 + 120 B /
# 255 + 108 B, k32w8 255 / 226, none spilled at 8 warps but k64w8s2 (FP8 255 + 144 B; bf16 needs 272 KB of shared
# memory, more than the H200's 227 KB: it fails here as such); HEADS 2 k32w4s3 255 + 4 B / 190, k32w8 194 / 139.
DECODE_HEADS_CHOICES: list[dict[str, int]] = [
    dict(DECODE_LAUNCH),
    {"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 1},
    {"KEYS": 32, "num_warps": 2, "num_stages": 2, "SPLITS": 1, "HEADS": 1},
    *({"KEYS": keys, "num_warps": warps, "num_stages": 3, "SPLITS": 1, "HEADS": 2}
      for keys, warps in ((64, 4), (32, 8))),
    *({"KEYS": keys, "num_warps": warps, "num_stages": stages, "SPLITS": 1, "HEADS": 4}
      for keys, warps, stages in ((16, 4, 3), (16, 8, 2), (16, 8, 3), (32, 4, 3), (32, 8, 2), (32, 8, 3),
                                  (64, 8, 2))),
    {"KEYS": 16, "num_warps": 8, "num_stages": 3, "SPLITS": 2, "HEADS": 4},
]
# decode_heads at Llama 3.1 8B's shape (1 beam, 4 query heads a key/value head of 128): HEADS 1 is 4 real rows of
# 16, HEADS 2 8, HEADS 4 16. 256 slots x 8 / HEADS programs: HEADS 4's 512 may want splits. sm_90a, FP8 / bf16:
# HEADS 1 k64w4s3 194 / 115 registers; HEADS 4 k32w4s3 180 / 144, k64w4s3 255 + 280 B spilled / 158, k64w8s3
# 182 / 112 (k128w8s3: FP8 spills 264 B, bf16 needs 270 KB of shared memory; left out).
LLAMA_HEADS_CHOICES: list[dict[str, int]] = [
    dict(LLAMA_LAUNCH),  # the engine's, first: the baseline
    {"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 1},
    {"KEYS": 32, "num_warps": 2, "num_stages": 2, "SPLITS": 1, "HEADS": 1},
    *({"KEYS": keys, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 2} for keys in (32, 64)),
    *({"KEYS": keys, "num_warps": warps, "num_stages": 3, "SPLITS": 1, "HEADS": 4}
      for keys, warps in ((32, 4), (32, 8), (64, 4), (64, 8))),
    *({"KEYS": keys, "num_warps": warps, "num_stages": 3, "SPLITS": splits, "HEADS": 4}
      for keys, warps, splits in ((32, 4, 4), (64, 8, 2))),
]
MODELS = ("gptj", "llama")  # decode_heads' shapes, in order
LLAMA_DECODE = {"slots": 256, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "mean_prompt": 1000, "max_new": 128}
DEFAULT_VARIANTS = ("bf16/bf16/96/full,bf16/bf16/96/forced,bf16/fp8/96/full,fp8/fp8/96/full,fp8/fp8/192/full,"
                    "fp8/fp8/192/forced,fp8fast/fp8/192/full,fp8fast/fp8/192/forced")


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def random_cache(slots: int, mean_prompt: int, device: torch.device, generator: torch.Generator, fp8: bool = False
                 ) -> tuple[KVCache, torch.Tensor, torch.Tensor]:
    """A one-layer cache of GPT-J's head shape with random prompts, generated rows and ancestry (FP8: the same
    random values quantized with a scale from their magnitude)."""
    lengths = torch.randint(mean_prompt // 2, 2 * mean_prompt, (slots,), generator=generator).clamp(max=1919)
    cache = filled_cache(lengths.tolist(), device, fp8)
    counts = torch.randint(1, 129, (slots,), generator=generator).to(device)
    ancestry = torch.randint(0, 4, (slots, 4, 128), generator=generator, dtype=torch.int32).to(device)
    return cache, ancestry, counts


def filled_cache(lengths: list[int], device: torch.device, fp8: bool, heads: int = 16, head_dim: int = 256,
                 beams: int = 4, longest: int = 1919) -> KVCache:
    """A one-layer cache holding one prompt of each length, every key and value random; GPT-J's head shape, beams
    and longest prompt (the block table's width) unless told."""
    shape = CacheShape(layers=1, heads=heads, head_dim=head_dim, slots=len(lengths), beams=beams, max_new_tokens=128,
                       page_size=64, pages=int(sum(math.ceil(n / 64) for n in lengths)), max_prompt_length=longest)
    cache = KVCache(shape, torch.bfloat16, device, E4M3 if fp8 else None)
    if fp8:  # different key and value scales, so a swapped scale in the kernels shows as an error
        cache.set_scales([4.5], [7.5])
    for name in ("prompt_k", "prompt_v", "gen_k", "gen_v"):
        values = torch.randn(getattr(cache, name).shape, device=device) * (3.0 if name.endswith("v") else 1.0)
        scale = cache.v_scale[0] if name.endswith("v") else cache.k_scale[0]
        getattr(cache, name).copy_(quantize(values, scale) if fp8 else values)
    slot_list = list(range(len(lengths)))
    for slot, n in zip(slot_list, lengths, strict=True):
        cache.assign(slot, n)
    cache.set_tables(slot_list, lengths)
    return cache


def parse_variant(text: str) -> dict[str, Any]:
    parts = text.split("/")
    gemms, kv, slots, outputs = parts[:4]
    elementwise = parts[4] if len(parts) == 5 else "fused"
    if (len(parts) not in (4, 5) or gemms not in ("bf16", "fp8", "fp8fast") or kv not in ("bf16", "fp8")
            or outputs not in ("full", "forced") or elementwise not in ("fused", "plain")):
        raise SystemExit(f"variant {text!r}: expected GEMMS/KV/SLOTS/OUTPUTS[/ELEMENTWISE] with bf16|fp8|fp8fast, "
                         f"bf16|fp8, an int, full|forced, fused|plain")
    return {"name": text, "gemms": gemms, "kv": kv, "slots": int(slots), "outputs": outputs,
            "elementwise": elementwise}


@dataclass
class Check:
    """What the steps share: the options, the device, the prompts, the figures and table rows found so far
    (``details`` is the JSON; ``rows`` the table printed last), and what one step leaves for the next in ``state``
    (the model, the eager logits, the calibration)."""

    args: argparse.Namespace
    variants: list[dict[str, Any]]
    device: torch.device
    details: dict[str, Any]
    generation: GenerationConfig
    samples: GptjSamples
    prompts: list[np.ndarray]
    rows: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> GptjConfig:
        """The architecture the model steps draw random weights of (``--model``)."""
        return GptjConfig.from_name(self.args.model)

    def save(self) -> None:
        (self.args.out / "gptj_inflight.json").write_text(json.dumps(self.details, indent=2))


def attention_step(check: Check) -> None:
    """Decode attention against its reference, its time and the launch settings' times, bf16 then FP8 cache."""
    for fp8 in (False, True):
        attention_case(check, fp8)


def attention_case(check: Check, fp8: bool) -> None:
    device, details, rows = check.device, check.details, check.rows
    label = "fp8" if fp8 else "bf16"
    gen = torch.Generator().manual_seed(0)
    cache, ancestry, counts = random_cache(6, 300, device, gen, fp8)
    q = torch.randn(6 * 4, 16, 256, device=device, dtype=torch.bfloat16)
    err = rel_error(decode_attention(q, cache, 0, ancestry, counts),
                    decode_attention_reference(q, cache, 0, ancestry, counts))
    slots = 192
    cache, ancestry, counts = random_cache(slots, 950, device, gen, fp8)
    q = torch.randn(slots * 4, 16, 256, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        decode_attention(q, cache, 0, ancestry, counts)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        decode_attention(q, cache, 0, ancestry, counts)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / reps
    gbytes = cache_read_gb(cache, counts)
    details[f"attention_{label}"] = {"rel_error": err, "ms_per_layer": ms, "gb_read": gbytes,
                                     "gb_per_s": gbytes / ms * 1e3}
    rows.append(f"decode attention {label} cache: rel error {err:.2e} vs reference; {ms:.3f} ms/layer at "
                f"{slots} slots (~1,190-token prompts): {gbytes / ms * 1e3:.0f} GB/s")
    launches = time_launches(functools.partial(decode_attention, q, cache, 0, ancestry, counts))
    details[f"attention_{label}"]["launches_ms"] = launches
    rows.append(f"  {label} launches (ms/layer): " + ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in launches.items()))


def cache_read_gb(cache: KVCache, counts: torch.Tensor) -> float:
    """The GB one layer's decode attention must read: keys and values of every prompt once (shared by the beams)
    and of each beam's generated tokens, every key/value head (the query heads sharing one read it once)."""
    s = cache.shape
    keys = int(cache.prompt_lengths.sum()) + s.beams * int(counts.sum())
    return keys * 2 * s.heads * s.head_dim * cache.prompt_k.element_size() / 1e9


def time_launches(attend: Callable[[], torch.Tensor]) -> dict[str, float | str]:
    """The median time of ``attend`` under each (KEYS, num_warps, num_stages) choice of ``DECODE_LAUNCH``."""
    launches: dict[str, float | str] = {}
    for keys, warps, stages in ((32, 4, 4), (64, 4, 2), (64, 4, 3), (64, 4, 4), (128, 4, 2), (128, 8, 2)):
        launch = {"KEYS": keys, "num_warps": warps, "num_stages": stages, "SPLITS": 1, "HEADS": 1}  # as named
        launches[launch_name(launch)] = with_launch(launch, functools.partial(bench_ms, attend))
    return launches


def launch_name(launch: dict[str, int]) -> str:
    if launch.get("CUDA"):
        name = f"cuda{'' if launch.get('ORDER', 1) else '-slots'} w{launch['num_warps']}s{launch['num_stages']}"
        name += f"m{launch.get('BLOCKS', 1)}"
        return name + (f"x{launch['SPLITS']}" if launch.get("SPLITS", 1) > 1 else "")
    name = f"k{launch['KEYS']}w{launch['num_warps']}s{launch['num_stages']}"
    name += f"x{launch['SPLITS']}" if launch.get("SPLITS", 1) > 1 else ""
    return name + (f"h{launch['HEADS']}" if launch.get("HEADS", 1) > 1 else "")


def bench_ms(attend: Callable[[], torch.Tensor]) -> float:
    """The median time of one call, in milliseconds (triton's do_bench: warm-up, L2 flushed between calls)."""
    import triton.testing

    return triton.testing.do_bench(attend, return_mode="median")


def with_launch(launch: dict[str, int], run: Callable[[], Any]) -> Any:
    """``run()`` with ``launch`` over the default ``DECODE_LAUNCH``; a failure (e.g. OutOfResources: too much shared
    memory for a tile) is returned as ``"failed: <error>"``. The default comes back whatever happens."""
    default = dict(attention_module.DECODE_LAUNCH)
    attention_module.DECODE_LAUNCH.update(launch)
    try:
        return run()
    except Exception as error:
        return f"failed: {type(error).__name__}"
    finally:
        attention_module.DECODE_LAUNCH.clear()
        attention_module.DECODE_LAUNCH.update(default)


def decode_splits_step(check: Check) -> None:
    """The split decode attention against today's kernel at the engine's shape, bf16 then FP8 cache."""
    for fp8 in (False, True):
        decode_splits_case(check, fp8)


@dataclass
class DecodeCase:
    """One layer's decode attention inputs at a shape, and what every launch is checked against."""

    cache: KVCache
    ancestry: torch.Tensor
    counts: torch.Tensor
    q: torch.Tensor
    want: torch.Tensor  # decode_attention_reference's output
    gb_read: float

    @property
    def attend(self) -> Callable[[], torch.Tensor]:
        return functools.partial(decode_attention, self.q, self.cache, 0, self.ancestry, self.counts)


def gptj_decode_case(check: Check, fp8: bool) -> DecodeCase:
    """The engine's decode shape: 256 slots of CNN/DailyMail-like prompts, 4 beams of 16 heads of 256, each slot
    somewhere between its first generated token and its forced last."""
    slots, device = DECODE_SLOTS, check.device
    gen = torch.Generator().manual_seed(0)
    lengths = np.resize(check.samples.lengths, slots).tolist()
    forced = np.resize(check.samples.forced_lengths, slots)
    cache = filled_cache(lengths, device, fp8)
    counts = torch.from_numpy((np.random.default_rng(0).random(slots) * forced).astype(np.int64) + 1).to(device)
    ancestry = torch.randint(0, 4, (slots, 4, 128), generator=gen, dtype=torch.int32).to(device)
    q = torch.randn(slots * 4, 16, 256, device=device, dtype=torch.bfloat16)
    return DecodeCase(cache, ancestry, counts, q, decode_attention_reference(q, cache, 0, ancestry, counts),
                      cache_read_gb(cache, counts))


def llama_decode_case(device: torch.device, fp8: bool) -> DecodeCase:
    """Llama 3.1 8B's decode shape (``LLAMA_DECODE``): one beam, 32 query heads over 8 key/value heads of 128
    (grouped-query attention), prompts drawn around a mean of ~1,000 tokens, up to 128 generated."""
    shape = LLAMA_DECODE
    slots, mean = shape["slots"], shape["mean_prompt"]
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(mean // 2, 3 * mean // 2 + 1, (slots,), generator=gen).tolist()
    cache = filled_cache(lengths, device, fp8, heads=shape["kv_heads"], head_dim=shape["head_dim"], beams=1,
                         longest=max(lengths))
    counts = torch.randint(1, shape["max_new"] + 1, (slots,), generator=gen).to(device)
    ancestry = torch.zeros((slots, 1, shape["max_new"]), dtype=torch.int32, device=device)  # one beam: its own row
    q = torch.randn(slots, shape["q_heads"], shape["head_dim"], device=device, dtype=torch.bfloat16)
    return DecodeCase(cache, ancestry, counts, q, decode_attention_reference(q, cache, 0, ancestry, counts),
                      cache_read_gb(cache, counts))


def time_decode_launches(case: DecodeCase, choices: list[dict[str, int]]) -> dict[str, dict[str, float] | str]:
    """Each launch of ``choices`` checked against the reference and timed (median); speed-ups against the first."""
    attend = case.attend

    def measure_launch() -> dict[str, float]:
        error = rel_error(attend(), case.want)
        ms = bench_ms(attend)
        return {"rel_error": error, "ms": ms, "gb_per_s": case.gb_read / ms * 1e3, **compiled_resources(attend)}

    launches = {launch_name(launch): with_launch(launch, measure_launch) for launch in choices}
    baseline = launches[launch_name(choices[0])]
    for result in launches.values():
        if isinstance(result, dict) and isinstance(baseline, dict):
            result["speedup"] = baseline["ms"] / result["ms"]
    return launches


def compiled_resources(attend: Callable[[], torch.Tensor]) -> dict[str, int]:
    """What the decode kernel that ``attend`` launches (``_decode_kernel``, or ``_decode_split_kernel`` when split)
    was compiled to: registers a thread, local memory bytes a thread (the stack frame spills go to: ptxas's
    "cumulative stack size"), shared memory bytes; read from the compiled kernel Triton's launch returns, so one call
    tells a launch's time and why. Empty where no kernel runs."""
    kernels = (attention_module._decode_kernel, attention_module._decode_split_kernel)
    compiled: list[Any] = []

    def recording(run: Callable[..., Any]) -> Callable[..., Any]:
        def run_and_record(*args: Any, **kwargs: Any) -> Any:
            kernel = run(*args, **kwargs)
            compiled.append(kernel)
            return kernel

        return run_and_record

    for kernel in kernels:
        kernel.run = recording(kernel.run)  # an instance attribute over JITFunction.run, removed below
    try:
        attend()
    finally:
        for kernel in kernels:
            kernel.__dict__.pop("run", None)
    if not compiled or getattr(compiled[0], "n_regs", None) is None:
        return {}
    # Triton's n_spills is CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4
    return {"registers": compiled[0].n_regs, "local_bytes": 4 * compiled[0].n_spills,
            "shared_bytes": compiled[0].metadata.shared}


def launch_rows(launches: dict[str, dict[str, float] | str]) -> list[str]:
    rows = []
    for name, result in launches.items():
        if isinstance(result, dict):
            compiled = (f"  {result['registers']} regs, {result['local_bytes']} B local, "
                        f"{result['shared_bytes'] // 1024} KB shared" if "registers" in result else "")
            rows.append(f"  {name:>12}: {result['ms']:.3f} ms {result['gb_per_s']:6.0f} GB/s "
                        f"x{result.get('speedup', float('nan')):.2f}  rel error {result['rel_error']:.1e}{compiled}")
        else:
            rows.append(f"  {name:>12}: {result}")
    return rows


def decode_splits_case(check: Check, fp8: bool) -> None:
    label = "fp8" if fp8 else "bf16"
    slots, device = DECODE_SLOTS, check.device
    case = gptj_decode_case(check, fp8)
    cache, counts, attend, gbytes = case.cache, case.counts, case.attend, case.gb_read
    lengths = cache.prompt_lengths.tolist()
    launches = time_decode_launches(case, DECODE_SPLIT_CHOICES)
    graph_launch = {**DECODE_SPLIT_CHOICES[0], "SPLITS": 4}
    graph_equal = with_launch(graph_launch, functools.partial(graph_replay_equals_eager, attend, device))
    check.details.setdefault("decode_splits", {})[label] = {
        "slots": slots, "mean_prompt": float(np.mean(lengths)), "mean_generated": float(counts.float().mean()),
        "gb_read": gbytes, "launches": launches, f"graph_replay_equal_{launch_name(graph_launch)}": graph_equal}
    check.rows.append(f"decode splits {label} cache, {slots} slots, mean prompt {np.mean(lengths):.0f}, "
                      f"{gbytes:.2f} GB read; graph replay {launch_name(graph_launch)} equal to eager: {graph_equal}")
    check.rows.extend(launch_rows(launches))
    del cache, case


def decode_heads_step(check: Check) -> None:
    """HEADS key/value heads per decode program: GPT-J's shape, then Llama 3.1 8B's grouped-query shape, bf16 then
    FP8 cache each."""
    for model in MODELS:
        for fp8 in (False, True):
            decode_heads_case(check, model, fp8)


def decode_heads_case(check: Check, model: str, fp8: bool) -> None:
    label = "fp8" if fp8 else "bf16"
    if model == "gptj":
        case, choices = gptj_decode_case(check, fp8), DECODE_HEADS_CHOICES
        shape = f"GPT-J, {DECODE_SLOTS} slots x 4 beams, 16 heads of 256"
    else:
        case, choices = llama_decode_case(check.device, fp8), LLAMA_HEADS_CHOICES
        shape = (f"Llama 3.1 8B, {LLAMA_DECODE['slots']} slots x 1 beam, {LLAMA_DECODE['q_heads']} query heads over "
                 f"{LLAMA_DECODE['kv_heads']} key/value heads of {LLAMA_DECODE['head_dim']}")
    launches = time_decode_launches(case, choices)
    mean_prompt = float(case.cache.prompt_lengths.float().mean())
    check.details.setdefault("decode_heads", {})[f"{model}_{label}"] = {
        "shape": shape, "mean_prompt": mean_prompt, "mean_generated": float(case.counts.float().mean()),
        "gb_read": case.gb_read, "launches": launches}
    check.rows.append(f"decode heads {label} cache, {shape}, mean prompt {mean_prompt:.0f}, {case.gb_read:.2f} GB "
                      f"read (speed-ups against {launch_name(choices[0])})")
    check.rows.extend(launch_rows(launches))
    del case


def decode_cuda_step(check: Check) -> None:
    """The CUDA decode kernel (``code/llm/cuda_decode.py``) against each model's Triton launch on the FP8 cache:
    GPT-J's and Llama 3.1 8B's engine shapes, then GPT-J at one slot (SingleStream: splits and the merge), each
    launch checked against the reference; one CUDA launch captured in a CUDA graph must replay equal to eager."""
    cases = {"gptj": (gptj_decode_case(check, True), [dict(attention_module.DECODE_LAUNCH), *DECODE_CUDA_CHOICES]),
             "llama": (llama_decode_case(check.device, True), [dict(LLAMA_LAUNCH), *DECODE_CUDA_CHOICES])}
    for model, (case, choices) in cases.items():
        launches = time_decode_launches(case, choices)
        graph_launch = {**DECODE_CUDA_CHOICES[0], "SPLITS": 3}
        graph_equal = with_launch(graph_launch, functools.partial(graph_replay_equals_eager, case.attend,
                                                                  check.device))
        check.details.setdefault("decode_cuda", {})[model] = {
            "mean_prompt": float(case.cache.prompt_lengths.float().mean()), "gb_read": case.gb_read,
            "launches": launches, "graph_replay_equal": graph_equal}
        check.rows.append(f"decode cuda {model} fp8 cache, {case.gb_read:.2f} GB read (speed-ups against "
                          f"{launch_name(choices[0])}); graph replay {launch_name(graph_launch)} equal: {graph_equal}")
        check.rows.extend(launch_rows(launches))
        del case
    one = one_slot_case(check)
    choices = [{**attention_module.DECODE_LAUNCH, "SPLITS": 8},
               *({**DECODE_CUDA_CHOICES[0], "SPLITS": n} for n in (1, 4, 8, 15))]
    launches = time_decode_launches(one, choices)
    check.details.setdefault("decode_cuda", {})["gptj_one_slot"] = {"gb_read": one.gb_read, "launches": launches}
    check.rows.append(f"decode cuda gptj fp8 cache, one slot, {one.gb_read * 1e3:.1f} MB read")
    check.rows.extend(launch_rows(launches))


def one_slot_case(check: Check) -> DecodeCase:
    """GPT-J's decode at one slot of a 1,900-token prompt, 60 tokens generated (a SingleStream step)."""
    device = check.device
    cache = filled_cache([1900], device, True)
    counts = torch.tensor([60], device=device)
    gen = torch.Generator().manual_seed(2)
    ancestry = torch.randint(0, 4, (1, 4, 128), generator=gen, dtype=torch.int32).to(device)
    q = torch.randn(4, 16, 256, device=device, dtype=torch.bfloat16)
    return DecodeCase(cache, ancestry, counts, q, decode_attention_reference(q, cache, 0, ancestry, counts),
                      cache_read_gb(cache, counts))


def graph_replay_equals_eager(attend: Callable[[], torch.Tensor], device: torch.device) -> bool:
    """Capture ``attend`` in a CUDA graph (after a warm-up on a side stream, as the engine does) and replay it onto an
    output first filled with NaN: it must equal the eager call's."""
    eager = attend()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        attend()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        captured = attend()
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(device)
    return bool(torch.equal(captured, eager))


def load_step(check: Check) -> None:
    started = time.perf_counter()
    check.state["model"] = random_weights(check.config, 0, torch.bfloat16, check.device, draw_on_device=True)
    check.details["load_s"] = round(time.perf_counter() - started, 1)


def agreement_step(check: Check) -> None:
    """The engine's prefill logits and beam-4 tokens against the eager model's, on the first prompts."""
    args, device, details, rows = check.args, check.device, check.details, check.rows
    model = check.state["model"]
    chosen = check.prompts[: args.agreement_prompts]
    model.setup_caches(*cache_shape([len(p) for p in chosen], check.generation))
    started = time.perf_counter()
    want = generate(model, chosen, check.generation)
    eager_s = time.perf_counter() - started
    model.setup_caches(1, 1)  # free the eager caches
    engine = InflightEngine(InflightModel.from_model(model), check.generation,
                            EngineOptions(slots=len(chosen), max_prompt_length=1919))
    # Logits of each prompt's last token: the engine's prefill (fused GEMMs, FlashAttention) vs the eager model
    with torch.inference_mode():
        fast = prefill_logits(engine, chosen, device)
        eager = eager_logits(model, chosen, device).float()
        reference = float32_logits(model, chosen, device)
    check.state["reference_logits"] = reference
    logit_error = rel_error(fast, eager)
    details["prefill_logits_rel_error"] = logit_error
    details["bf16_prefill_logits_vs_float32"] = {"engine": rel_error(fast, reference),
                                                 "eager": rel_error(eager, reference)}
    rows.append(f"prefill logits vs eager model (bf16, 6B random): rel error {logit_error:.2e}; vs float32: engine "
                f"{rel_error(fast, reference):.2e}, eager bf16 {rel_error(eager, reference):.2e}")
    got = engine.generate(chosen)
    same = sum(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    prefix = [next((i for i, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
              for g, w in zip(got, want, strict=True)]
    details["agreement"] = {"identical": same, "prompts": len(chosen), "first_difference": prefix,
                            "lengths": [len(g) for g in got], "eager_reference_s": eager_s}
    rows.append(f"beam-4 tokens vs eager reference (bf16, 6B random): {same}/{len(chosen)} identical; first "
                f"differences at {prefix}")
    del engine


def eager_logits(model: torch.nn.Module, chosen: list[np.ndarray], device: torch.device) -> torch.Tensor:
    """The eager model's logits of each prompt's last token, in its dtype (its caches freed after)."""
    with torch.inference_mode():
        model.setup_caches(1, 2048)
        logits = torch.stack([model(torch.as_tensor(p, dtype=torch.long, device=device)[None], last_only=True)[0]
                              for p in chosen])
        model.setup_caches(1, 1)
    return logits


def float32_logits(model: torch.nn.Module, chosen: list[np.ndarray], device: torch.device) -> torch.Tensor:
    """``eager_logits`` in float32: the model's bf16 weights widened (exactly), then narrowed back."""
    model.float()
    try:
        return eager_logits(model, chosen, device)
    finally:
        model.to(torch.bfloat16)


def prefill_logits(engine: InflightEngine, chosen: list[np.ndarray], device: torch.device) -> torch.Tensor:
    slots = list(range(len(chosen)))
    for slot, p in zip(slots, chosen, strict=True):
        engine.cache.assign(slot, len(p))
    logits = engine.model.prefill([torch.as_tensor(p, dtype=torch.long, device=device) for p in chosen], slots,
                                  engine.cache)
    for slot in slots:
        engine.cache.release(slot)
    return logits


def to_fp8(check: Check, inflight: InflightModel) -> None:
    """Calibrate, switch the GEMMs to FP8, and compare prefill logits with the eager model's in float32, with
    float32 and with fast accumulation."""
    amax = check.state.get("amax") or calibrate(inflight, 0, 1919)
    inflight.use_fp8_gemms(amax)
    torch.cuda.empty_cache()
    if "reference_logits" not in check.state:
        return
    count = check.args.agreement_prompts
    want = check.state["reference_logits"]
    for fast in (False, True):
        inflight.set_fp8_fast_accum(fast)
        engine = InflightEngine(inflight, check.generation, EngineOptions(slots=count, max_prompt_length=1919,
                                                                          kv_dtype=E4M3),
                                kv_amax=amax)
        with torch.inference_mode():
            got = prefill_logits(engine, check.prompts[:count], check.device)
        name = "fp8_fast_accum" if fast else "fp8"
        error, largest = rel_error(got, want), float((got - want).abs().max())
        check.details[f"{name}_prefill_logits_rel_error"] = error
        check.details[f"{name}_prefill_logits_max_error"] = largest
        check.rows.append(f"FP8 GEMMs{' (fast accumulation)' if fast else ''} prefill logits vs float32 eager: "
                          f"rel error {error:.2e}, max {largest:.3f} (logits' std {float(want.std()):.3f})")
        del engine


def splits_step(check: Check) -> None:
    """The split rule's decode launch against GPT-J's fixed one at few slots (``scripts/gpu/decode_splits.py``)."""
    args, config = check.args, check.config
    cases = SplitCases(InflightModel.from_model(check.state["model"]), check.generation, check.device,
                       torch.bfloat16, q_heads=config.n_head, layers=config.n_layer, sms=args.sms,
                       prompt_tokens=TYPICAL_PROMPT_TOKENS, repeats=args.repeats)
    check.details["splits"] = cases.run([int(n) for n in args.split_slots.split(",")], "bf16", check.save)
    check.rows.extend(cases.rows(check.details["splits"]))
    torch.cuda.empty_cache()


def variants_step(check: Check) -> None:
    """The engine's throughput, one variant after another (bf16 GEMMs first: the FP8 switch frees them)."""
    model = check.state.pop("model")
    inflight = InflightModel.from_model(model, consume=True)
    del model
    torch.cuda.empty_cache()
    check.state["amax"] = calibrate(inflight, 0, 1919)
    for variant in check.variants:
        if variant["gemms"].startswith("fp8") and not inflight.uses_fp8_gemms:
            to_fp8(check, inflight)
        if variant["gemms"] == "bf16" and inflight.uses_fp8_gemms:
            check.rows.append(f"{variant['name']}: skipped (bf16 variants must come before fp8 ones)")
            continue
        measure(check, inflight, variant)
        torch.cuda.empty_cache()


def measure(check: Check, inflight: InflightModel, variant: dict[str, Any]) -> None:
    """One variant: build its engine, warm it up on one batch of prompts, then time ``generate`` over them all."""
    args = check.args
    slots = variant["slots"]
    inflight.elementwise = Elementwise(compiled=variant["elementwise"] == "fused")
    if inflight.uses_fp8_gemms:
        inflight.set_fp8_fast_accum(variant["gemms"] == "fp8fast")
    started = time.perf_counter()
    engine = InflightEngine(inflight, check.generation,
                            EngineOptions(slots=slots, max_prompt_length=1919,
                                          kv_dtype=E4M3 if variant["kv"] == "fp8" else None),
                            kv_amax=check.state["amax"])
    build_s = time.perf_counter() - started
    chosen = check.prompts[: max(args.samples, 2 * slots)]
    forced = check.samples.forced_lengths[: len(chosen)] if variant["outputs"] == "forced" else None
    engine.generate(chosen[:slots], None if forced is None else forced[:slots])  # warm-up: prefill shapes
    engine.stats = type(engine.stats)(kv_pages=engine.stats.kv_pages)
    torch.cuda.synchronize()
    started = time.perf_counter()
    outputs = engine.generate(chosen, forced)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    tokens = sum(len(o) for o in outputs)
    result = {"samples": len(chosen), "seconds": seconds, "samples_per_s": len(chosen) / seconds,
              "tokens_per_s": tokens / seconds, "mean_output": tokens / len(chosen), "engine_build_s": build_s,
              "stats": engine.stats.as_dict(), "gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
    check.details["variants"][variant["name"]] = result
    stats = result["stats"]
    steps = stats["decode_steps"] / max(stats["completed"], 1)  # may exceed the output: beam search's own end
    check.rows.append(f"{variant['name']:>22}: {result['samples_per_s']:6.2f} samples/s "
                      f"{result['tokens_per_s']:7.0f} tok/s (mean output {result['mean_output']:.0f}, decode steps "
                      f"{steps:.1f} a sample, running slots {stats['mean_running_slots']}, {stats['kv_pages']} pages)")
    if args.profile and variant is check.variants[-1]:
        profile_generate(engine, chosen[:slots], None if forced is None else forced[:slots], args.out)
    del engine


def profile_generate(engine: InflightEngine, chosen: list[np.ndarray], forced: np.ndarray | None, out: Path) -> None:
    """A whole generate (prefill passes and graphed steps) under the profiler; its table goes to ``out``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        engine.generate(chosen, forced)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70)
    (out / "generate_profile.txt").write_text(table)
    print(table)


def hf_step(check: Check) -> None:
    """transformers' generate on the first prompts, as the reference calls it, and each full variant's ratio."""
    import transformers

    details, rows = check.details, check.rows
    config = hf_config(check.config)
    with torch.device(check.device):
        model = transformers.GPTJForCausalLM(config).to(torch.bfloat16).eval()
    chosen = check.prompts[: check.args.hf_prompts]
    kwargs = dict(num_beams=4, min_new_tokens=30, max_new_tokens=128, early_stopping=True, pad_token_id=50256)
    with torch.inference_mode():
        model.generate(torch.as_tensor(chosen[0][:64], dtype=torch.long, device=check.device)[None], **kwargs)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for p in chosen:
            model.generate(torch.as_tensor(p, dtype=torch.long, device=check.device)[None], **kwargs)
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    details["hf"] = {"prompts": len(chosen), "samples_per_s": len(chosen) / seconds}
    rows.append(f"HF GPTJForCausalLM.generate bf16 beam 4 batch 1 (128 tokens): {len(chosen) / seconds:.3f} "
                f"samples/s")
    for name, result in details["variants"].items():
        if name.endswith("/full"):
            rows.append(f"  {name}: x{result['samples_per_s'] / (len(chosen) / seconds):.1f} the HF baseline")


def profile_step(check: Check) -> None:
    """Where one FP8 prefill pass's and one decode step's GPU time goes, by kernel kind, at ``--slots`` slots of
    beam-4 search (``scripts/gpu/inflight_profile.py``)."""
    on_gpu = check.device.type == "cuda"
    model = check.state.pop("model", None)  # load's, where a model step ran before (the last to use it)
    if model is None:
        model = random_weights(check.config, 0, torch.bfloat16 if on_gpu else torch.float32, check.device,
                               draw_on_device=on_gpu)
    inflight = InflightModel.from_model(model, consume=True)
    del model
    if on_gpu:
        torch.cuda.empty_cache()
    amax = check.state.get("amax") or calibrate(inflight, 0, 1919)  # variants': the same weights (seed 0)
    check.details["profile"] = profile_engine(inflight, amax, check.generation, check.prompts[: check.args.slots],
                                              check.args.out)
    check.rows.extend(profile_rows(check.details["profile"], on_gpu))


STEPS: dict[str, Callable[[Check], None]] = {"attention": attention_step, "decode_splits": decode_splits_step,
                                             "decode_heads": decode_heads_step, "decode_cuda": decode_cuda_step,
                                             "load": load_step,
                                             "agreement": agreement_step, "splits": splits_step,
                                             "variants": variants_step, "hf": hf_step, "profile": profile_step}


NEEDS_MODEL = ("agreement", "splits", "variants")  # the steps that take the model ``load`` draws (variants frees it)


def steps_in_order(names: str) -> list[str]:
    """The steps of a comma-separated list, in the order of ``STEPS``, with ``load`` added where a chosen step
    takes its model (the model steps depend on each other)."""
    chosen = set(names.split(","))
    if chosen & set(NEEDS_MODEL):
        chosen.add("load")
    return [name for name in STEPS if name in chosen]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--samples", type=int, default=384, help="samples per variant (at least 2 x slots)")
    parser.add_argument("--agreement-prompts", type=int, default=4)
    parser.add_argument("--hf-prompts", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="profile one eager step of the last variant")
    parser.add_argument("--split-slots", default="1,4,16", help="splits: the slot counts timed")
    parser.add_argument("--repeats", type=int, default=20, help="splits: decode steps timed (the median is kept)")
    parser.add_argument("--sms", type=int, default=0, help="splits: the SM count the rule fills (0: the GPU's)")
    parser.add_argument("--slots", type=int, default=DECODE_SLOTS, help="profile: the engine's slots, each holding "
                        "a prompt in the decode step")
    parser.add_argument("--device", default="cuda", help="cpu: the profile step without a GPU (with --model tiny)")
    parser.add_argument("--model", default="6b", choices=sorted(GPTJ_CONFIGS), help="the architecture of the random "
                        "weights")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help="steps to run, comma-separated (they run in the order of the default)")
    parser.add_argument("--skip", default="")
    args = parser.parse_args(argv)
    for option, names in (("--steps", args.steps), ("--skip", args.skip)):
        unknown = set(filter(None, names.split(","))) - set(STEPS)
        if unknown:
            parser.error(f"{option}: unknown steps {sorted(unknown)}: choose among {','.join(STEPS)}")
    return args


def prepare(args: argparse.Namespace) -> Check:
    """The shared state of a run: the variants, the prompts (enough for every variant, the agreement step and the
    profile's slots)."""
    variants = [parse_variant(v) for v in args.variants.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    details: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "variants": {}}
    count = max(args.samples, 2 * max(v["slots"] for v in variants), args.agreement_prompts, args.slots)
    samples = GptjSamples.synthetic(count, seed=0).with_forced_lengths(0)
    details["prompts"] = samples.describe_lengths()
    details["forced_output_mean"] = float(samples.forced_lengths.mean())
    return Check(args, variants, device, details, GenerationConfig(), samples,
                 [samples.prompt(i) for i in range(len(samples))])


def main(argv: list[str] | None = None) -> None:
    check = prepare(parse_args(argv))
    steps = [(name, functools.partial(STEPS[name], check)) for name in steps_in_order(check.args.steps)]
    run_steps(steps, set(filter(None, check.args.skip.split(","))), check.details, check.rows, check.save)
    print("\n=== GPT-J in-flight engine on", check.details["device"], "===")
    for row in check.rows:
        print(row)


if __name__ == "__main__":
    main()
