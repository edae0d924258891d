"""Llama 3.1 in-flight engine on a GPU: grouped-query decode attention against its reference, prefill logits and
greedy tokens against the eager model, CUDA graph replay against eager steps, and engine throughput, in one call.

    python3 -m scripts.gpu.check_llama_inflight --out DIR [--steps attention,prefill,agreement,throughput]
        [--layers 32] [--slots 512] [--samples 1536] [--prompts 8]

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
Random weights (``--layers`` shortens the model for a quicker check). Writes ``DIR/llama_inflight.json`` and prints
a short table last. On a machine without a GPU ``--device cpu --model tiny`` runs the same steps in float32.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.llama31.architecture import LlamaConfig
from code.llama31.backends.pytorch import generation_config
from code.llama31.dataset import LlamaSamples
from code.llama31.inflight_model import InflightLlama, decode_launch
from code.llama31.model import random_weights
from code.llm.generation import cache_shape, generate, left_pad
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.kv_cache import KVCache
from code.llm.paged_attention import decode_attention, decode_attention_reference
from scripts.gpu.steps import print_summary, run_steps

STEPS = ("attention", "prefill", "agreement", "throughput")


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
                                        "config": {**self.config.to_dict(), "rope_scaling": None}}
        self.rows: list[str] = []
        self._model: torch.nn.Module | None = None
        self.generation = generation_config(self.config)

    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._model = random_weights(self.config, 0, self.dtype, self.device,
                                         draw_on_device=self.device.type == "cuda")
        return self._model

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
    inflight = InflightLlama.from_model(model)
    got = inflight.prompt_logits(prompts)
    model.setup_caches(*cache_shape([len(p) for p in prompts], check.generation))
    tokens, pad = left_pad([p.cpu() for p in prompts], check.config.eos_token_id)
    with torch.inference_mode():
        want = model(tokens.to(check.device), 0, pad.to(check.device), last_only=True).float()
        # The float32 reference: the same weights widened (exactly), so each 16-bit path's error is its own.
        dtype = model.output.weight.dtype
        model.float()
        model.setup_caches(*cache_shape([len(p) for p in prompts], check.generation))
        exact = model(tokens.to(check.device), 0, pad.to(check.device), last_only=True).float()
        model.to(dtype)
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


def agreement_step(check: Check) -> None:
    model = check.model()
    prompts = check.prompts(check.args.prompts)
    model.setup_caches(*cache_shape([len(p) for p in prompts], check.generation))
    want = generate(model, prompts, check.generation)
    longest = max(len(p) for p in prompts)
    outputs = {}
    for graphs in (True, False):
        engine = InflightEngine(InflightLlama.from_model(model), check.generation,
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
    engine = InflightEngine(InflightLlama.from_model(model), check.generation,
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="8b", help="a LLAMA_CONFIGS name (random weights)")
    parser.add_argument("--layers", type=int, default=0, help="fewer layers than the model's (0: all)")
    parser.add_argument("--slots", type=int, default=512)
    parser.add_argument("--samples", type=int, default=1536, help="throughput: samples (at least 2 x slots)")
    parser.add_argument("--prompts", type=int, default=8, help="prefill and agreement: prompts")
    parser.add_argument("--length_scale", type=float, default=1.0, help="synthetic prompts' lengths x this")
    parser.add_argument("--steps", default=",".join(STEPS))
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
             "throughput": throughput_step}
    run_steps([(name, lambda name=name: steps[name](check)) for name in chosen], set(), check.details, check.rows,
              check.save)
    print_summary("check_llama_inflight", check.details, check.rows,
                  f"{args.model} {check.config.n_layers} layers {check.dtype}")


if __name__ == "__main__":
    main()
