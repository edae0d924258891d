"""GPT-J in-flight engine on a GPU: the decode kernels against their reference, beam-4 tokens against the eager
reference model, FP8 against bf16, engine throughput of several variants, and the reference-style HF baseline, in
one call.

    python3 -m scripts.gpu.check_gptj_inflight --out DIR [--variants ...] [--samples 384] [--steps attention,...]
        [--skip hf,...]

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
- ``agreement``: GPT-J 6B with random bf16 weights; the engine's beam-4 tokens vs ``generation.generate`` on the
  eager model for the same prompts (16-bit ties may flip a few).
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
Writes ``DIR/gptj_inflight.json`` and prints a short table last.
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
from code.gptj.model import GptjConfig, hf_config, random_weights
from code.llm.generation import GenerationConfig, cache_shape, generate
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.kv_cache import CacheShape, KVCache
from code.llm.paged_attention import decode_attention, decode_attention_reference
from code.numerics.fp8 import E4M3, quantize
from scripts.gpu.steps import run_steps

DECODE_SLOTS = 256  # the engine's FP8 batch (configs: gpu_batch_size)
# decode_splits: today's launch first (the baseline of every speed-up), then SPLITS 2/4/8 at its tile, then one
# program per (slot, head) with fewer warps (a 16-row tile split over 4 warps reduces each softmax row across warps
# through shared memory) and other tiles and depths, then a few of those split 2 ways
DECODE_SPLIT_CHOICES: list[dict[str, int]] = [
    {"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": 1},
    *({"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": n} for n in (2, 4, 8)),
    *({"KEYS": keys, "num_warps": warps, "num_stages": stages, "SPLITS": 1}
      for warps in (1, 2) for keys in (32, 64, 128) for stages in (2, 3, 4)),
    *({"KEYS": keys, "num_warps": 2, "num_stages": 3, "SPLITS": 2} for keys in (32, 64)),
]
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


def filled_cache(lengths: list[int], device: torch.device, fp8: bool) -> KVCache:
    """A one-layer cache of GPT-J's head shape holding one prompt of each length, every key and value random."""
    shape = CacheShape(layers=1, heads=16, head_dim=256, slots=len(lengths), beams=4, max_new_tokens=128,
                       page_size=64, pages=int(sum(math.ceil(n / 64) for n in lengths)), max_prompt_length=1919)
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
    """The GB one layer's decode attention must read: keys and values of every prompt once (shared by the 4 beams)
    and of each beam's generated tokens, 16 heads of 256."""
    keys = int(cache.prompt_lengths.sum()) + 4 * int(counts.sum())
    return keys * 2 * 16 * 256 * cache.prompt_k.element_size() / 1e9


def time_launches(attend: Callable[[], torch.Tensor]) -> dict[str, float | str]:
    """The median time of ``attend`` under each (KEYS, num_warps, num_stages) choice of ``DECODE_LAUNCH``."""
    launches: dict[str, float | str] = {}
    for keys, warps, stages in ((32, 4, 4), (64, 4, 2), (64, 4, 3), (64, 4, 4), (128, 4, 2), (128, 8, 2)):
        launch = {"KEYS": keys, "num_warps": warps, "num_stages": stages}
        launches[launch_name(launch)] = with_launch(launch, functools.partial(bench_ms, attend))
    return launches


def launch_name(launch: dict[str, int]) -> str:
    name = f"k{launch['KEYS']}w{launch['num_warps']}s{launch['num_stages']}"
    return name + (f"x{launch['SPLITS']}" if launch.get("SPLITS", 1) > 1 else "")


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


def decode_splits_case(check: Check, fp8: bool) -> None:
    label = "fp8" if fp8 else "bf16"
    slots, device = DECODE_SLOTS, check.device
    gen = torch.Generator().manual_seed(0)
    lengths = np.resize(check.samples.lengths, slots).tolist()
    forced = np.resize(check.samples.forced_lengths, slots)
    cache = filled_cache(lengths, device, fp8)
    # Mid-generation: each slot somewhere between its first generated token and its last
    counts = torch.from_numpy((np.random.default_rng(0).random(slots) * forced).astype(np.int64) + 1).to(device)
    ancestry = torch.randint(0, 4, (slots, 4, 128), generator=gen, dtype=torch.int32).to(device)
    q = torch.randn(slots * 4, 16, 256, device=device, dtype=torch.bfloat16)
    want = decode_attention_reference(q, cache, 0, ancestry, counts)
    attend = functools.partial(decode_attention, q, cache, 0, ancestry, counts)
    gbytes = cache_read_gb(cache, counts)

    def measure_launch() -> dict[str, float]:
        error = rel_error(attend(), want)
        ms = bench_ms(attend)
        return {"rel_error": error, "ms": ms, "gb_per_s": gbytes / ms * 1e3}

    launches = {launch_name(launch): with_launch(launch, measure_launch) for launch in DECODE_SPLIT_CHOICES}
    today = launches[launch_name(DECODE_SPLIT_CHOICES[0])]
    for result in launches.values():
        if isinstance(result, dict) and isinstance(today, dict):
            result["speedup"] = today["ms"] / result["ms"]
    graph_launch = {**DECODE_SPLIT_CHOICES[0], "SPLITS": 4}
    graph_equal = with_launch(graph_launch, functools.partial(graph_replay_equals_eager, attend, device))
    check.details.setdefault("decode_splits", {})[label] = {
        "slots": slots, "mean_prompt": float(np.mean(lengths)), "mean_generated": float(counts.float().mean()),
        "gb_read": gbytes, "launches": launches, f"graph_replay_equal_{launch_name(graph_launch)}": graph_equal}
    check.rows.append(f"decode splits {label} cache, {slots} slots, mean prompt {np.mean(lengths):.0f}, "
                      f"{gbytes:.2f} GB read; graph replay {launch_name(graph_launch)} equal to eager: {graph_equal}")
    for name, result in launches.items():
        if isinstance(result, dict):
            check.rows.append(f"  {name:>12}: {result['ms']:.3f} ms {result['gb_per_s']:6.0f} GB/s "
                              f"x{result.get('speedup', float('nan')):.2f}  rel error {result['rel_error']:.1e}")
        else:
            check.rows.append(f"  {name:>12}: {result}")
    del cache


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
    check.state["model"] = random_weights(GptjConfig.from_name("6b"), 0, torch.bfloat16, check.device,
                                          draw_on_device=True)
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
    config = hf_config(GptjConfig.from_name("6b"))
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


STEPS: dict[str, Callable[[Check], None]] = {"attention": attention_step, "decode_splits": decode_splits_step,
                                             "load": load_step, "agreement": agreement_step,
                                             "variants": variants_step, "hf": hf_step}


NEEDS_MODEL = ("agreement", "variants")  # the steps that take the model ``load`` draws


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
    """The shared state of a run: the variants, the prompts (enough for every variant and the agreement step)."""
    variants = [parse_variant(v) for v in args.variants.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "date": time.strftime("%Y-%m-%d"), "variants": {}}
    count = max(args.samples, 2 * max(v["slots"] for v in variants), args.agreement_prompts)
    samples = GptjSamples.synthetic(count, seed=0).with_forced_lengths(0)
    details["prompts"] = samples.describe_lengths()
    details["forced_output_mean"] = float(samples.forced_lengths.mean())
    return Check(args, variants, torch.device("cuda"), details, GenerationConfig(), samples,
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
