"""GPT-J in-flight engine on a GPU: the decode kernels against their reference, beam-4 tokens against the eager
reference model, engine throughput, and the reference-style HF baseline, in one call.

    python3 -m scripts.gpu.check_gptj_inflight --out DIR [--slots 96] [--samples 384] [--skip hf,...]

Steps (each timed; a failing step does not stop the others):
- ``attention``: Triton decode attention vs ``decode_attention_reference`` on a random cache (relative error), and
  its time at full size against the bytes it must read (achieved bandwidth).
- ``agreement``: GPT-J 6B with random bf16 weights; the engine's beam-4 tokens vs ``generation.generate`` on the
  eager model for the same prompts (16-bit ties may flip a few).
- ``throughput``: the engine over synthetic CNN/DailyMail-like prompts with ``--slots`` samples in flight; random
  weights never choose EOS, so every sample generates the full 128 tokens (the worst case).
- ``hf``: transformers' ``GPTJForCausalLM.generate`` (bf16, beam 4, batch 1, as the MLPerf reference calls it) on
  a few of the same prompts, for the ratio.
Writes ``DIR/gptj_inflight.json`` and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.gptj.dataset import GptjSamples
from code.gptj.generation import GenerationConfig, cache_shape, generate
from code.gptj.inflight.attention import decode_attention, decode_attention_reference
from code.gptj.inflight.engine import EngineOptions, InflightEngine
from code.gptj.inflight.kv_cache import CacheShape, KVCache
from code.gptj.inflight.layers import InflightModel
from code.gptj.model import GptjConfig, random_weights
from scripts.gpu.steps import run_steps


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def random_cache(slots: int, mean_prompt: int, device: torch.device, generator: torch.Generator
                 ) -> tuple[KVCache, torch.Tensor, torch.Tensor]:
    """A one-layer cache of GPT-J's head shape with random prompts, generated rows and ancestry."""
    lengths = torch.randint(mean_prompt // 2, 2 * mean_prompt, (slots,), generator=generator).clamp(max=1919)
    shape = CacheShape(layers=1, heads=16, head_dim=256, slots=slots, beams=4, max_new_tokens=128, page_size=64,
                       pages=int(sum(math.ceil(n / 64) for n in lengths.tolist())), max_prompt_length=1919)
    cache = KVCache(shape, torch.bfloat16, device)
    for tensor in (cache.prompt_k, cache.prompt_v, cache.gen_k, cache.gen_v):
        tensor.normal_(generator=None)
    slot_list = list(range(slots))
    for slot, n in zip(slot_list, lengths.tolist(), strict=True):
        cache.assign(slot, n)
    cache.set_tables(slot_list, lengths.tolist())
    counts = torch.randint(1, 129, (slots,), generator=generator).to(device)
    ancestry = torch.randint(0, 4, (slots, 4, 128), generator=generator, dtype=torch.int32).to(device)
    return cache, ancestry, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--slots", type=int, default=96)
    parser.add_argument("--samples", type=int, default=384)
    parser.add_argument("--agreement-prompts", type=int, default=8)
    parser.add_argument("--hf-prompts", type=int, default=2)
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    details: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "date": time.strftime("%Y-%m-%d"), "slots": args.slots}
    rows: list[str] = []
    generation = GenerationConfig()
    samples = GptjSamples.synthetic(max(args.samples, args.agreement_prompts), seed=0)
    prompts = [samples.prompt(i) for i in range(len(samples))]
    state: dict[str, Any] = {}

    def save() -> None:
        (args.out / "gptj_inflight.json").write_text(json.dumps(details, indent=2))

    def attention() -> None:
        gen = torch.Generator().manual_seed(0)
        cache, ancestry, counts = random_cache(6, 300, device, gen)
        q = torch.randn(6 * 4, 16, 256, device=device, dtype=torch.bfloat16)
        err = rel_error(decode_attention(q, cache, 0, ancestry, counts),
                        decode_attention_reference(q, cache, 0, ancestry, counts))
        cache, ancestry, counts = random_cache(args.slots, 950, device, gen)
        q = torch.randn(args.slots * 4, 16, 256, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            decode_attention(q, cache, 0, ancestry, counts)
        torch.cuda.synchronize()
        start = time.perf_counter()
        reps = 20
        for _ in range(reps):
            decode_attention(q, cache, 0, ancestry, counts)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) / reps * 1e3
        keys = int(cache.prompt_lengths.sum()) + 4 * int(counts.sum())
        gbytes = keys * 2 * 16 * 256 * 2 / 1e9
        details["attention"] = {"rel_error": err, "ms_per_layer": ms, "gb_read": gbytes, "gb_per_s": gbytes / ms * 1e3}
        rows.append(f"decode attention: rel error {err:.2e} vs reference; {ms:.3f} ms/layer at {args.slots} slots "
                    f"(~950-token prompts): {gbytes / ms * 1e3:.0f} GB/s")

    def load() -> None:
        started = time.perf_counter()
        state["model"] = random_weights(GptjConfig.from_name("6b"), 0, torch.bfloat16, device, draw_on_device=True)
        details["load_s"] = round(time.perf_counter() - started, 1)

    def agreement() -> None:
        model = state["model"]
        chosen = prompts[: args.agreement_prompts]
        model.setup_caches(*cache_shape([len(p) for p in chosen], generation))
        started = time.perf_counter()
        want = generate(model, chosen, generation)
        eager_s = time.perf_counter() - started
        model.setup_caches(1, 1)  # free the eager caches
        engine = InflightEngine(InflightModel.from_model(model), generation,
                                EngineOptions(slots=len(chosen), max_prompt_length=1919))
        # Logits of each prompt's last token: the engine's prefill (fused GEMMs, FlashAttention) vs the eager model
        with torch.inference_mode():
            slots = list(range(len(chosen)))
            for slot, p in zip(slots, chosen, strict=True):
                engine.cache.assign(slot, len(p))
            fast = engine.model.prefill([torch.as_tensor(p, dtype=torch.long, device=device) for p in chosen], slots,
                                        engine.cache)
            for slot in slots:
                engine.cache.release(slot)
            model.setup_caches(1, 2048)
            eager = torch.stack([model(torch.as_tensor(p, dtype=torch.long, device=device)[None], last_only=True)[0]
                                 for p in chosen]).float()
        logit_error = rel_error(fast, eager)
        details["prefill_logits_rel_error"] = logit_error
        rows.append(f"prefill logits vs eager model (bf16, 6B random): rel error {logit_error:.2e}")
        got = engine.generate(chosen)
        same = sum(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        prefix = [next((i for i, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
                  for g, w in zip(got, want, strict=True)]
        details["agreement"] = {"identical": same, "prompts": len(chosen), "first_difference": prefix,
                                "lengths": [len(g) for g in got], "eager_reference_s": eager_s}
        rows.append(f"beam-4 tokens vs eager reference (bf16, 6B random): {same}/{len(chosen)} identical; first "
                    f"differences at {prefix}")
        del engine

    def throughput() -> None:
        model = state.pop("model")
        inflight = InflightModel.from_model(model, consume=True)
        del model
        torch.cuda.empty_cache()
        started = time.perf_counter()
        engine = InflightEngine(inflight, generation, EngineOptions(slots=args.slots, max_prompt_length=1919))
        build_s = time.perf_counter() - started
        chosen = prompts[: args.samples]
        engine.generate(chosen[: args.slots])  # warm-up: FlashAttention and cuBLAS choices for prefill shapes
        engine.stats = type(engine.stats)(kv_pages=engine.stats.kv_pages)
        torch.cuda.synchronize()
        started = time.perf_counter()
        outputs = engine.generate(chosen)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        tokens = sum(len(o) for o in outputs)
        # Decode step alone: replay the captured step with every slot free (the kernels run at full shape).
        reps = 10
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            engine._step()
        torch.cuda.synchronize()
        idle_step_ms = (time.perf_counter() - t0) / reps * 1e3
        # Where a step's time goes: one eager step, every slot free (GEMMs, LM head, beam step; no attention work)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            with torch.inference_mode():
                engine._step_eager()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=14)
        (args.out / "step_profile.txt").write_text(table)
        print(table)
        # One prefill pass of 16 prompts
        with torch.inference_mode():
            batch = chosen[:16]
            slots = list(range(16))
            for slot, p in zip(slots, batch, strict=True):
                engine.cache.assign(slot, len(p))
            tensors = [torch.as_tensor(p, dtype=torch.long, device=device) for p in batch]
            engine.model.prefill(tensors, slots, engine.cache)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            engine.model.prefill(tensors, slots, engine.cache)
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t0
            for slot in slots:
                engine.cache.release(slot)
        prefill_tokens = sum(len(p) for p in batch)
        details["prefill"] = {"tokens": prefill_tokens, "seconds": prefill_s,
                              "tflops": 2 * 6.05e9 * prefill_tokens / prefill_s / 1e12}
        rows.append(f"prefill: {prefill_tokens} tokens in {prefill_s * 1e3:.1f} ms "
                    f"(~{details['prefill']['tflops']:.0f} TFLOP/s of weight GEMMs)")
        details["throughput"] = {"samples": len(chosen), "seconds": seconds, "samples_per_s": len(chosen) / seconds,
                                 "tokens_per_s": tokens / seconds, "engine_build_s": build_s,
                                 "mean_prompt": float(np.mean([len(p) for p in chosen])),
                                 "mean_output": tokens / len(chosen), "step_ms_no_attention_work": idle_step_ms,
                                 "stats": engine.stats.as_dict(),
                                 "gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
        rows.append(f"engine: {len(chosen) / seconds:.2f} samples/s, {tokens / seconds:.0f} tokens/s "
                    f"({len(chosen)} samples, mean prompt {details['throughput']['mean_prompt']:.0f}, mean output "
                    f"{tokens / len(chosen):.0f}; {args.slots} slots; {engine.stats.as_dict()})")
        rows.append(f"step with empty slots (GEMMs + LM head + beam step): {idle_step_ms:.2f} ms")
        del engine, inflight
        torch.cuda.empty_cache()

    def hf() -> None:
        import transformers

        config = transformers.GPTJConfig(vocab_size=50401, n_positions=2048, n_embd=4096, n_layer=28, n_head=16,
                                         rotary_dim=64, n_inner=16384, activation_function="gelu_new")
        with torch.device(device):
            model = transformers.GPTJForCausalLM(config).to(torch.bfloat16).eval()
        chosen = prompts[: args.hf_prompts]
        kwargs = dict(num_beams=4, min_new_tokens=30, max_new_tokens=128, early_stopping=True, pad_token_id=50256)
        with torch.inference_mode():
            model.generate(torch.as_tensor(chosen[0][:64], dtype=torch.long, device=device)[None], **kwargs)
            torch.cuda.synchronize()
            started = time.perf_counter()
            for p in chosen:
                model.generate(torch.as_tensor(p, dtype=torch.long, device=device)[None], **kwargs)
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        details["hf"] = {"prompts": len(chosen), "samples_per_s": len(chosen) / seconds}
        ratio = details.get("throughput", {}).get("samples_per_s", float("nan")) / (len(chosen) / seconds)
        rows.append(f"HF GPTJForCausalLM.generate bf16 beam 4 batch 1: {len(chosen) / seconds:.3f} samples/s; "
                    f"engine x{ratio:.1f}")

    steps = [("attention", attention), ("load", load), ("agreement", agreement), ("throughput", throughput),
             ("hf", hf)]
    run_steps(steps, set(filter(None, args.skip.split(","))), details, rows, save)
    print("\n=== GPT-J in-flight engine on", details["device"], "===")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
