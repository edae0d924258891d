"""Llama 3.1 in-flight engine on a GPU: grouped-query decode attention against its reference, prefill logits and
greedy tokens against the eager model, CUDA graph replay against eager steps, and engine throughput, in one call.

    python3 -m scripts.gpu.check_llama_inflight --out DIR [--steps attention,prefill,agreement,throughput,fp8]
        [--layers 32] [--slots 512] [--samples 1536] [--prompts 8] [--calibration_prompts 8] [--plain_elementwise]
        [--split_slots 1,4,16] [--repeats 20] [--sms 0]

Steps (each timed; a failing step does not stop the others):
- ``attention``: ``decode_attention`` (Triton on CUDA) vs ``decode_attention_reference`` on a random paged cache of
  the model's key/value heads (8) for its query heads (32): relative error per layer-sized case.
- ``prefill``: packed prompts through ``InflightLlama.prompt_logits`` (FlashAttention-2 varlen with 8 key/value
  heads on CUDA) vs the eager model's left-padded last-token logits: relative error and argmax agreement; and both
  against the eager model in float32 (the same weights widened), so each 16-bit path's own error shows.
- ``agreement``: the engine's greedy tokens (CUDA graphs on, and off) vs ``generate`` on the eager model for the
  same prompts: the graph and eager steps must agree exactly; against the eager model, bf16 ties may flip a few.
- ``throughput``: the engine over synthetic CNN/DailyMail-like prompts (random weights never choose EOS, so every
  sample generates 128 tokens: the worst case), ``--slots`` in flight: samples/s, tokens/s, the engine's counters.
- ``fp8``: amax calibrated on ``--calibration_prompts`` synthetic prompts (``collect_amax``, as an engine folder's
  build), then the engine in 16 bits, with FP8 GEMMs, and with FP8 GEMMs and an FP8 KV cache: the time of one
  prefill pass (prompts packed up to the engine's 16,384 tokens) and of one decode step with ``--slots`` slots each
  holding a synthetic prompt's keys and values (zeros: the time depends on lengths, not values); and two relative
  errors against the float32 eager model (``prefill``'s reference) on ``--prompts`` prompts: the prefill logits
  (FP8 GEMMs show; prefill attends over fresh keys, not the cache) and the last token's logits through one decode
  step over the cached rest of its prompt (the FP8 KV cache shows too). The FP8 GEMMs run without fast
  accumulation here. 26 s on an H200 with the 8B model.
- ``fp8_gemms``: each of the four GEMMs of the first layer alone, on its inputs of a float32 forward over
  ``--prompts`` prompts: the FP8 GEMM's output (weights and inputs in e4m3, scales from ``--calibration_prompts``
  prompts) and the GEMM of bf16-rounded operands, each against float32's: what one GEMM's rounding costs, apart
  from how the rest of the model carries it to the logits (random weights amplify it).
- ``profile``: the engine as ``make run`` runs it on a GPU (FP8 GEMMs with fast accumulation, FP8 KV cache) under
  the profiler: one prefill pass (prompts packed up to its 16,384 tokens) and one eager decode step at ``--slots``
  slots; each one's kernels grouped by kind (GEMM, attention, the rest) with their share of the GPU time, the
  GEMMs' rate in TFLOP/s, and the top kernels. Tables go to ``DIR/profile_prefill.txt`` and ``profile_step.txt``.
- ``splits``: the decode launch's split rule (``code.llm.paged_attention.decode_launch_for``) against the model's
  fixed launch (``DECODE_LAUNCH``), at each of ``--split_slots`` slot counts, with a bf16 and an FP8 KV cache: one
  decode step's time (the engine's CUDA graph replayed, median of ``--repeats``) with every slot holding a typical
  prompt's keys (1,000 tokens x ``--length_scale``) and 64 generated ones (random values), under each launch, and
  layer 0's decode attention of both launches on the same cache (max abs and relative error between them, and the
  rule's against ``decode_attention_reference``); ``scripts/gpu/decode_splits.py``. ``--sms`` stands in for the
  GPU's SM count (0: the device's). Alone, on the 8B: ``--steps splits``.
Random weights (``--layers`` shortens the model for a quicker check); ``--plain_elementwise`` runs the work between
the GEMMs as plain torch operations instead of the fused kernels (``code/llama31/elementwise.py``): a run with it
and one without are the before and after of those kernels. Writes ``DIR/llama_inflight.json`` and prints
a short table last. On a machine without a GPU ``--device cpu --model tiny`` runs the same steps in float32.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.llama31.architecture import LlamaConfig
from code.llama31.backends.inflight_engine import calibrate_on
from code.llama31.backends.pytorch import generation_config
from code.llama31.dataset import LlamaSamples
from code.llama31.elementwise import Elementwise
from code.llama31.inflight_model import Amax, InflightLlama, decode_launch
from code.llama31.memory_plan import TYPICAL_PROMPT_TOKENS
from code.llama31.model import random_weights
from code.llm.generation import cache_shape, generate, left_pad
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.kv_cache import KVCache
from code.llm.memory_plan import PAGE_SIZE
from code.llm.paged_attention import decode_attention, decode_attention_reference
from code.numerics.fp8 import E4M3, Fp8Linear, quantize_fast
from scripts.gpu.decode_splits import SplitCases, median_ms
from scripts.gpu.inflight_profile import fill_slots, prefill_pass, profile_engine, profile_rows
from scripts.gpu.steps import print_summary, run_steps

STEPS = ("attention", "prefill", "agreement", "throughput", "fp8", "fp8_gemms", "profile", "splits")
FP8_VARIANTS = ("16-bit", "fp8 gemms", "fp8 gemms+kv")  # in this order: the FP8 switch frees the 16-bit weights


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm().clamp(min=1e-30))


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        config = LlamaConfig.from_name(args.model)
        self.config = dataclasses.replace(config, n_layers=args.layers) if args.layers else config
        self.details: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
                                        "device": torch.cuda.get_device_name(self.device)
                                        if self.device.type == "cuda" else "cpu",
                                        "config": {**self.config.to_dict(), "rope_scaling": None},
                                        "plain_elementwise": args.plain_elementwise}
        self.rows: list[str] = []
        self._model: torch.nn.Module | None = None
        self.generation = generation_config(self.config)

    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._model = random_weights(self.config, 0, self.dtype, self.device,
                                         draw_on_device=self.device.type == "cuda")
        return self._model

    def inflight(self, model: torch.nn.Module, consume: bool = False) -> InflightLlama:
        """The engine's model of ``model``; with ``--plain_elementwise`` its elementwise work between the GEMMs
        runs as plain torch operations (the baseline of the fused kernels, ``code/llama31/elementwise.py``)."""
        inflight = InflightLlama.from_model(model, consume=consume)
        if self.args.plain_elementwise:
            inflight.elementwise = Elementwise(compiled=False)
        return inflight

    def prompts(self, count: int, seed: int = 1) -> list[np.ndarray]:
        samples = LlamaSamples.synthetic(count, seed=seed, length_scale=self.args.length_scale)
        return [samples.prompt(i) for i in range(count)]

    def save(self) -> None:
        self.args.out.mkdir(parents=True, exist_ok=True)
        (self.args.out / "llama_inflight.json").write_text(json.dumps(self.details, indent=1, default=str))


def attention_step(check: Check) -> None:
    cfg, device, dtype = check.config, check.device, check.dtype
    generator = torch.Generator().manual_seed(0)
    results = {}
    for slots, mean_prompt in ((8, 64), (64, 1000)):
        lengths = torch.randint(max(1, mean_prompt // 2), mean_prompt * 3 // 2, (slots,), generator=generator)
        page = 64
        pages = sum(math.ceil(int(n) / page) for n in lengths)
        cache = KVCache(_shape(cfg, slots, page, pages, int(lengths.max())), dtype, device)
        for name in ("prompt_k", "prompt_v", "gen_k", "gen_v"):
            getattr(cache, name).copy_(torch.randn(getattr(cache, name).shape, generator=generator))
        for slot, n in enumerate(lengths.tolist()):
            cache.assign(slot, n)
        cache.set_tables(list(range(slots)), lengths.tolist())
        counts = torch.randint(1, 128, (slots,), generator=generator).to(device)
        ancestry = torch.zeros((slots, 1, 128), dtype=torch.int32, device=device)
        q = torch.randn((slots, cfg.n_heads, cfg.head_dim), generator=generator).to(device, dtype)
        got = decode_attention(q, cache, 0, ancestry, counts, decode_launch(cfg.n_kv_heads))  # the engine's
        want = decode_attention_reference(q, cache, 0, ancestry, counts)
        results[f"{slots} slots ~{mean_prompt} tokens"] = {"rel_error": rel_error(got, want)}
    check.details["attention"] = results
    for name, result in results.items():
        check.rows.append(f"attention {name}: rel error {result['rel_error']:.2e} (bf16: < 1e-2 expected)")


def _shape(cfg: LlamaConfig, slots: int, page: int, pages: int, longest: int):  # noqa: ANN202 - CacheShape
    from code.llm.cache_shape import CacheShape

    return CacheShape(layers=1, heads=cfg.n_kv_heads, head_dim=cfg.head_dim, slots=slots, beams=1,
                      max_new_tokens=128, page_size=page, pages=pages, max_prompt_length=longest)


def prefill_step(check: Check) -> None:
    model = check.model()
    prompts = [torch.as_tensor(np.array(p, dtype=np.int64), device=check.device)
               for p in check.prompts(check.args.prompts)]
    inflight = check.inflight(model)
    got = inflight.prompt_logits(prompts)
    want = eager_logits(check, model, prompts)
    exact = float32_logits(check, model, prompts)
    result = {"rel_error": rel_error(got, want), "argmax_agree": int((got.argmax(-1) == want.argmax(-1)).sum()),
              "engine_vs_float32": rel_error(got, exact), "eager_vs_float32": rel_error(want, exact),
              "engine_argmax_as_float32": int((got.argmax(-1) == exact.argmax(-1)).sum()),
              "eager_argmax_as_float32": int((want.argmax(-1) == exact.argmax(-1)).sum()),
              "prompts": len(prompts), "lengths": [len(p) for p in prompts]}
    check.details["prefill"] = result
    n = len(prompts)
    check.rows.append(
        f"prefill: rel error {result['rel_error']:.2e} against the eager model, argmax agrees "
        f"{result['argmax_agree']}/{n}; against float32: engine {result['engine_vs_float32']:.2e} (argmax "
        f"{result['engine_argmax_as_float32']}/{n}), eager {result['eager_vs_float32']:.2e} (argmax "
        f"{result['eager_argmax_as_float32']}/{n})")


def eager_logits(check: Check, model: torch.nn.Module, prompts: list[torch.Tensor]) -> torch.Tensor:
    """The eager model's last-token logits of left-padded ``prompts`` (float32 out), in its own dtype."""
    model.setup_caches(*cache_shape([len(p) for p in prompts], check.generation))
    tokens, pad = left_pad([p.cpu() for p in prompts], check.config.eos_token_id)
    with torch.inference_mode():
        return model(tokens.to(check.device), 0, pad.to(check.device), last_only=True).float()


def float32_logits(check: Check, model: torch.nn.Module, prompts: list[torch.Tensor]) -> torch.Tensor:
    """The float32 reference: ``eager_logits`` with the same weights widened (exactly), so each path's error is
    its own; the model is narrowed back after."""
    dtype = model.output.weight.dtype
    model.float()
    try:
        return eager_logits(check, model, prompts)
    finally:
        model.to(dtype)


def agreement_step(check: Check) -> None:
    model = check.model()
    prompts = check.prompts(check.args.prompts)
    model.setup_caches(*cache_shape([len(p) for p in prompts], check.generation))
    want = generate(model, prompts, check.generation)
    longest = max(len(p) for p in prompts)
    outputs = {}
    for graphs in (True, False):
        engine = InflightEngine(check.inflight(model), check.generation,
                                EngineOptions(slots=max(1, len(prompts) // 2), max_prompt_length=longest,
                                              cuda_graphs=graphs))
        outputs[graphs] = engine.generate(prompts)
        del engine
    same_graph = all(np.array_equal(a, b) for a, b in zip(outputs[True], outputs[False], strict=True))

    def first_difference(a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        differ = np.nonzero(a[:n] != b[:n])[0]
        return int(differ[0]) if len(differ) else (-1 if len(a) == len(b) else n)

    result = {"graph_equals_eager_step": same_graph,
              "exact": sum(np.array_equal(g, e) for g, e in zip(outputs[True], want, strict=True)),
              "first_difference": [first_difference(g, e) for g, e in zip(outputs[True], want, strict=True)],
              "prompts": len(prompts)}
    check.details["agreement"] = result
    check.rows.append(f"agreement: graph replay == eager steps: {same_graph}; engine == eager model: "
                      f"{result['exact']}/{len(prompts)} (first differences {result['first_difference']})")


def throughput_step(check: Check) -> None:
    model = check.model()
    prompts = check.prompts(check.args.samples, seed=2)
    engine = InflightEngine(check.inflight(model), check.generation,
                            EngineOptions(slots=check.args.slots, max_prompt_length=max(len(p) for p in prompts)))
    engine.generate(prompts[: check.args.slots])  # warm-up: Triton compiles, cuBLAS picks, the allocator settles
    engine.stats = type(engine.stats)(kv_pages=engine.stats.kv_pages)
    if check.device.type == "cuda":
        torch.cuda.synchronize(check.device)
    started = time.perf_counter()
    outputs = engine.generate(prompts)
    seconds = time.perf_counter() - started
    tokens = sum(len(o) for o in outputs)
    result = {"slots": check.args.slots, "samples": len(prompts), "seconds": round(seconds, 2),
              "samples_per_s": round(len(prompts) / seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
              "mean_prompt": round(float(np.mean([len(p) for p in prompts])), 1), "stats": engine.stats.as_dict()}
    check.details["throughput"] = result
    check.rows.append(f"throughput: {result['samples_per_s']} samples/s, {result['tokens_per_s']} tokens/s at "
                      f"{check.args.slots} slots ({len(prompts)} samples, mean prompt {result['mean_prompt']}, "
                      f"{result['stats']['mean_running_slots']} slots busy on average)")


def fp8_step(check: Check) -> None:
    """16-bit, FP8 GEMMs, FP8 GEMMs and KV cache: prefill and decode step times, logits' errors against float32."""
    args = check.args
    model = check.model()
    chosen = check.prompts(args.prompts)
    tensors = [torch.as_tensor(np.asarray(p, dtype=np.int64), device=check.device) for p in chosen]
    exact = float32_logits(check, model, tensors)
    inflight = check.inflight(model, consume=True)  # the eager model's weights go: 16 GB on the 8B
    check._model = None
    del model
    if check.device.type == "cuda":
        torch.cuda.empty_cache()
    started = time.perf_counter()
    amax = calibrate_on(inflight, check.prompts(args.calibration_prompts, seed=3))
    results: dict[str, Any] = {"calibration": {"prompts": args.calibration_prompts,
                                               "seconds": round(time.perf_counter() - started, 2)}}
    filled = check.prompts(args.slots, seed=2)  # the timed engine's slots, at the data set's lengths
    for name in FP8_VARIANTS:
        if name.startswith("fp8") and not inflight.uses_fp8_gemms:
            inflight.use_fp8_gemms(amax)
            if check.device.type == "cuda":
                torch.cuda.empty_cache()  # the freed 16-bit GEMM weights' blocks, before the next KV pool
        kv_dtype = E4M3 if name.endswith("+kv") else None
        result = {**fp8_errors(check, inflight, amax, kv_dtype, chosen, exact),
                  **fp8_times(check, inflight, amax, kv_dtype, filled)}
        results[name] = result
        check.details["fp8"] = results
        check.save()
        gc.collect()  # the variant's engines (their KV pools and CUDA graph) go before the next one sizes its pool
        if check.device.type == "cuda":
            torch.cuda.empty_cache()
    check.rows.append(f"fp8 ({args.slots} slots; errors against float32 on {len(chosen)} prompts; amax from "
                      f"{args.calibration_prompts} synthetic prompts):")
    check.rows.append(f"  {'engine':<14} {'prefill ms':>10} {'tokens':>7} {'step ms':>8} {'prefill err':>11} "
                      f"{'decode err':>10}")
    for name in FP8_VARIANTS:
        r = results[name]
        label = name if name != "16-bit" else str(check.dtype).removeprefix("torch.")
        check.rows.append(f"  {label:<14} {r['prefill_ms']:>10.2f} {r['prefill_tokens']:>7} {r['step_ms']:>8.2f} "
                          f"{r['prefill_rel_error']:>11.2e} {r['decode_rel_error']:>10.2e}")


def profile_step(check: Check) -> None:
    """Where one FP8 prefill pass's and one decode step's GPU time goes, by kernel kind
    (``scripts/gpu/inflight_profile.py``)."""
    args = check.args
    model = check.model()
    inflight = check.inflight(model, consume=True)
    check._model = None
    del model
    amax = calibrate_on(inflight, check.prompts(args.calibration_prompts, seed=3))
    check.details["profile"] = profile_engine(inflight, amax, check.generation, check.prompts(args.slots, seed=2),
                                              args.out)
    check.rows.extend(profile_rows(check.details["profile"], check.device.type == "cuda"))


class FirstLayerInputs:
    """Stands in for an ``Amax`` in ``collect_amax``: keeps layer 0's GEMM inputs instead of their magnitudes."""

    def __init__(self) -> None:
        self.inputs: dict[str, torch.Tensor] = {}

    def update(self, layer: int, **values: torch.Tensor) -> None:
        if layer == 0:
            self.inputs.update((name, values[name].clone()) for name in InflightLlama.GEMM_WEIGHTS)


def fp8_gemms_step(check: Check) -> None:
    """One GEMM's rounding: layer 0's four GEMMs in FP8 and with bf16-rounded operands against float32's."""
    args = check.args
    model = random_weights(check.config, 0, torch.float32, check.device, draw_on_device=check.device.type == "cuda")
    inflight = InflightLlama.from_model(model, consume=True)
    del model

    def tensors(prompts: list[np.ndarray]) -> list[torch.Tensor]:
        return [torch.as_tensor(np.asarray(p, dtype=np.int64), device=check.device) for p in prompts]

    amax = inflight.collect_amax(tensors(check.prompts(args.calibration_prompts, seed=3)))
    first = FirstLayerInputs()
    inflight.collect_amax(tensors(check.prompts(args.prompts)), amax=first)  # type: ignore[arg-type]
    out_dtype = torch.bfloat16 if check.device.type == "cuda" else torch.float32
    align = 16 if check.device.type == "cuda" else 1
    layer = inflight.layers[0]
    results = {}
    with torch.inference_mode():
        for name in InflightLlama.GEMM_WEIGHTS:
            x, weight = first.inputs[name], getattr(layer, InflightLlama.GEMM_WEIGHTS[name])
            want = torch.nn.functional.linear(x, weight)
            gemm = Fp8Linear(weight, getattr(amax, name)[0], out_dtype)
            got = gemm(quantize_fast(x.to(out_dtype), gemm.act_scale_value, x.shape[0] + -x.shape[0] % align))
            bf16 = torch.nn.functional.linear(x.bfloat16(), weight.bfloat16())
            results[name] = {"fp8_rel_error": rel_error(got[:x.shape[0]], want),
                             "bf16_rel_error": rel_error(bf16, want), "rows": x.shape[0]}
    check.details["fp8_gemms"] = results
    check.rows.append(f"fp8_gemms (layer 0, {results['qkv']['rows']} rows; output error against float32):")
    for name, r in results.items():
        check.rows.append(f"  {name:<8} FP8 {r['fp8_rel_error']:.2e}  bf16 operands {r['bf16_rel_error']:.2e}")


def fp8_errors(check: Check, inflight: InflightLlama, amax: Amax, kv_dtype: torch.dtype | None,
               chosen: list[np.ndarray], exact: torch.Tensor) -> dict[str, float]:
    """Relative errors against ``exact`` (float32 last-token logits): the engine's prefill of whole prompts, and
    its decode step of each prompt's last token over the rest of the prompt prefilled into its cache (the last
    token forced by a one-hot logit row, so greedy search picks it)."""
    longest = max(len(p) for p in chosen)
    options = EngineOptions(slots=len(chosen), max_prompt_length=longest, cuda_graphs=False, kv_dtype=kv_dtype,
                            kv_pages=len(chosen) * math.ceil(longest / PAGE_SIZE))
    engine = InflightEngine(inflight, check.generation, options, kv_amax=amax)
    slots = list(range(len(chosen)))
    with torch.inference_mode():
        for slot, p in zip(slots, chosen, strict=True):
            engine.cache.assign(slot, len(p))
        prefill = inflight.prefill([torch.as_tensor(np.asarray(p, dtype=np.int64), device=check.device)
                                    for p in chosen], slots, engine.cache)
        for slot in slots:
            engine.cache.release(slot)
        for slot, p in zip(slots, chosen, strict=True):
            engine.cache.assign(slot, len(p) - 1)
        # the engine's own admission and step, so the decode reads its cache as a run's does
        engine._prefill([(slot, p[:-1], 0) for slot, p in zip(slots, chosen, strict=True)])
        engine.logits.zero_()
        engine.logits[slots, [int(p[-1]) for p in chosen]] = 1e4
        engine._step()
        assert engine.beams.next_tokens.view(-1).tolist() == [int(p[-1]) for p in chosen]
        decode = engine.logits.clone()
    del engine
    return {"prefill_rel_error": rel_error(prefill, exact), "decode_rel_error": rel_error(decode, exact),
            "prefill_argmax_as_float32": int((prefill.argmax(-1) == exact.argmax(-1)).sum()),
            "decode_argmax_as_float32": int((decode.argmax(-1) == exact.argmax(-1)).sum())}


def fp8_times(check: Check, inflight: InflightLlama, amax: Amax, kv_dtype: torch.dtype | None,
              filled: list[np.ndarray], repeats: int = 5) -> dict[str, float | int]:
    """Median times of one prefill pass (the first prompts, packed up to the engine's ``prefill_tokens``) and of
    one decode step (the engine's CUDA graph on a GPU) with every slot holding a prompt, after warm-ups."""
    options = EngineOptions(slots=len(filled), max_prompt_length=max(len(p) for p in filled), kv_dtype=kv_dtype)
    engine = InflightEngine(inflight, check.generation, options, kv_amax=amax)
    prefill, tokens = prefill_pass(engine, filled)

    prefill_ms = median_ms(prefill, repeats, check.device)
    fill_slots(engine, filled)
    step_ms = median_ms(engine._step, repeats, check.device)  # one step as serve runs it (its graph on a GPU)
    return {"prefill_ms": prefill_ms, "prefill_tokens": tokens, "step_ms": step_ms,
            "mean_prompt": round(float(np.mean([len(p) for p in filled])), 1)}


def splits_step(check: Check) -> None:
    """The split rule's launch against the model's fixed one (the module docstring; ``scripts/gpu/decode_splits.py``
    runs the cases)."""
    args = check.args
    cfg = check.config
    cases = SplitCases(check.inflight(check.model()), check.generation, check.device, check.dtype,
                       q_heads=cfg.n_heads, layers=cfg.n_layers, sms=args.sms,
                       prompt_tokens=max(1, round(TYPICAL_PROMPT_TOKENS * args.length_scale)),
                       repeats=args.repeats)
    kv_16 = "bf16" if check.device.type == "cuda" else "float32"
    check.details["splits"] = cases.run([int(n) for n in args.split_slots.split(",")], kv_16, check.save)
    check.rows.extend(cases.rows(check.details["splits"]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="8b", help="a LLAMA_CONFIGS name (random weights)")
    parser.add_argument("--layers", type=int, default=0, help="fewer layers than the model's (0: all)")
    parser.add_argument("--slots", type=int, default=512)
    parser.add_argument("--samples", type=int, default=1536, help="throughput: samples (at least 2 x slots)")
    parser.add_argument("--prompts", type=int, default=8, help="prefill and agreement: prompts")
    parser.add_argument("--calibration_prompts", type=int, default=8, help="fp8: synthetic prompts amax is "
                        "calibrated on")
    parser.add_argument("--length_scale", type=float, default=1.0, help="synthetic prompts' lengths x this")
    parser.add_argument("--split_slots", default="1,4,16", help="splits: the slot counts timed")
    parser.add_argument("--repeats", type=int, default=20, help="splits: decode steps timed (the median is kept)")
    parser.add_argument("--sms", type=int, default=0, help="splits: the SM count the rule fills (0: the device's)")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--plain_elementwise", action="store_true", help="the work between the GEMMs as plain "
                        "torch operations, not the fused kernels (prompt passes' Triton passes, the decode step "
                        "compiled): the baseline they are measured against")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.steps.split(",")) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown steps {unknown}: choose among {','.join(STEPS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check = Check(args)
    chosen = [s for s in STEPS if s in args.steps.split(",")]
    steps = {"attention": attention_step, "prefill": prefill_step, "agreement": agreement_step,
             "throughput": throughput_step, "fp8": fp8_step, "fp8_gemms": fp8_gemms_step,
             "profile": profile_step, "splits": splits_step}
    run_steps([(name, lambda name=name: steps[name](check)) for name in chosen], set(), check.details, check.rows,
              check.save)
    print_summary("check_llama_inflight", check.details, check.rows,
                  f"{args.model} {check.config.n_layers} layers {check.dtype}"
                  f"{' plain elementwise' if args.plain_elementwise else ''}")


if __name__ == "__main__":
    main()
