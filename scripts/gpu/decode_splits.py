"""The ``splits`` step of the LLM GPU checks (``check_llama_inflight.py``, ``check_gptj_inflight.py``): the decode
launch's split rule (``code.llm.paged_attention.decode_launch_for``, what an engine runs) against the model's fixed
launch (its ``decode_launch``, what every engine ran before the rule), for engines of few slots.

For each slot count and KV cache dtype (16-bit, FP8): one engine under each launch, every slot holding a typical
prompt's keys and values and ``SPLIT_GENERATED`` generated ones (random values, the same in both), then one decode
step timed as ``serve`` runs it (the engine's CUDA graph replayed on a GPU; the median of ``repeats`` after two
warm-ups); and layer 0's decode attention of both launches over the first engine's cache (their max abs and
relative difference, and the rule's relative error against ``decode_attention_reference``). ``sms`` stands in for
the GPU's SM count (0: the device's, where the engine's own rule runs unchanged).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineModel, EngineOptions, InflightEngine, sm_count
from code.llm.memory_plan import PAGE_SIZE
from code.llm.paged_attention import decode_attention, decode_attention_reference, decode_launch_for
from code.numerics.fp8 import E4M3
from scripts.gpu.steps import result_rows

SPLIT_GENERATED = 64  # generated tokens per slot when timed: half of the 128 both LLMs may write, mid-answer
KV_AMAX = 4.0  # the FP8 cache's key and value magnitude: random normal values stay well inside it


def median_ms(run: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median milliseconds of ``repeats`` calls of ``run`` after two warm-up calls, synchronized on a GPU."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        for _ in range(2):
            run()
        times = []
        for _ in range(repeats):
            sync()
            started = time.perf_counter()
            run()
            sync()
            times.append((time.perf_counter() - started) * 1e3)
    return round(float(np.median(times)), 3)


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm().clamp(min=1e-30))


@dataclass
class SplitCases:
    """One model's split cases: ``q_heads`` its query heads, ``layers`` its layer count (the FP8 cache's scales),
    ``prompt_tokens`` the prompt every slot holds (the model's typical one, scaled on the CPU)."""

    model: EngineModel
    generation: GenerationConfig
    device: torch.device
    dtype: torch.dtype
    q_heads: int
    layers: int
    sms: int  # 0: the device's
    prompt_tokens: int
    repeats: int

    @property
    def generated(self) -> int:
        return min(SPLIT_GENERATED, self.generation.max_new_tokens // 2)

    def run(self, slot_counts: list[int], kv_16: str, save: Callable[[], None]) -> dict[str, Any]:
        """Every case, 16-bit cache (named ``kv_16``) then FP8, each slot count; a failed case is kept as its error
        and the others still run. Returns what the JSON holds (``save`` is called after each case)."""
        sms = self.sms or sm_count(self.device)
        found: dict[str, Any] = {"sms": sms, "prompt": self.prompt_tokens, "generated": self.generated,
                                 "repeats": self.repeats, "cases": {}}
        for kv_name, kv_dtype in ((kv_16, None), ("fp8", E4M3)):
            for slots in slot_counts:
                name = f"{kv_name} {slots}"
                try:
                    found["cases"][name] = self.case(slots, kv_dtype, sms)
                except Exception as error:  # noqa: BLE001 - the other cases' figures still matter
                    found["cases"][name] = {"error": f"{type(error).__name__}: {error}"}
                save()
                gc.collect()  # the case's engines (KV pools, CUDA graphs) go before the next one's
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        return found

    def rows(self, found: dict[str, Any]) -> list[str]:
        """The table: slots, SPLITS old/new, step ms old/new, speed-up, and the attention's differences."""
        rows = [f"splits ({found['sms']} SMs; {found['prompt']}-token prompts, {found['generated']} generated; one "
                f"decode step, median of {found['repeats']}; attention: new against old launch, new against the "
                "reference):",
                f"  {'kv slots':<13} {'splits old/new':>14} {'ms old':>8} {'ms new':>8} {'speedup':>7} "
                f"{'max abs':>8} {'rel':>8} {'vs ref':>8}"]
        result_rows(rows, found["cases"], 13, lambda name, r: (
            f"  {name:<13} {r['splits_old']:>6}/{r['splits_new']:<7} {r['ms_old']:>8.3f} {r['ms_new']:>8.3f} "
            f"{r['speedup']:>6.2f}x {r['max_abs_error']:>8.1e} {r['rel_error']:>8.1e} "
            f"{r['new_vs_reference']:>8.1e}"))
        return rows

    def case(self, slots: int, kv_dtype: torch.dtype | None, sms: int) -> dict[str, Any]:
        """One slot count and cache dtype: an engine under the model's (Triton) launch and one under the rule's
        (``sms`` given: the rule over the model's launch at that count, else the engine's own from the device, which
        for an FP8 cache the CUDA kernel serves is the CUDA kernel's), each timed full; both launches' attention on
        the first engine's cache."""
        old = dict(self.model.decode_launch)
        new = None
        if self.sms:
            prompt = min(self.model.typical_prompt_tokens, self.prompt_tokens)
            new = decode_launch_for(slots, self.kv_heads() // old.get("HEADS", 1), self.sms, old,
                                    prompt_tokens=prompt, page_size=PAGE_SIZE)
        options = EngineOptions(slots=slots, max_prompt_length=self.prompt_tokens, kv_dtype=kv_dtype,
                                kv_pages=slots * math.ceil(self.prompt_tokens / PAGE_SIZE))
        amax = None if kv_dtype is None else SimpleNamespace(k=[KV_AMAX] * self.layers, v=[KV_AMAX] * self.layers)
        result: dict[str, Any] = {}
        for label, launch in (("old", old), ("new", new)):
            engine = InflightEngine(self.model, self.generation, options, kv_amax=amax, decode_launch=launch)
            self.fill(engine)
            result[f"splits_{label}"] = engine.decode_launch["SPLITS"]
            result[f"ms_{label}"] = median_ms(engine._step, self.repeats, self.device)
            if label == "old":
                new_launch = new if new is not None else engine._decode_launch()  # the rule the new engine runs
                result.update(self.agreement(engine, old, new_launch))
            del engine
        result["speedup"] = round(result["ms_old"] / result["ms_new"], 3)
        return result

    def kv_heads(self) -> int:
        """The model's cache's key/value heads (the rule counts programs of ``HEADS`` of them)."""
        return self.model.cache_shape(1, self.generation.num_beams, self.generation.max_new_tokens, PAGE_SIZE,
                                      self.prompt_tokens).heads

    def fill(self, engine: InflightEngine) -> None:
        """Every slot holding a ``prompt_tokens`` prompt and ``generated`` new tokens, random keys and values (a
        fixed seed: the same in every engine), as a run has them mid-answer."""
        cache = engine.cache
        every = list(range(engine.options.slots))
        generator = torch.Generator(self.device).manual_seed(0)
        with torch.inference_mode():
            for slot in every:
                cache.assign(slot, self.prompt_tokens)
            cache.set_tables(every, [self.prompt_tokens] * len(every))
            engine.beams.reset(torch.tensor(every, device=self.device))
            engine.beams.step_no.fill_(self.generated)
            for buffer in (cache.prompt_k, cache.prompt_v, cache.gen_k, cache.gen_v):
                for layer in buffer:  # a layer at a time: a float32 draw of the whole cache may not fit beside it
                    layer.copy_(torch.randn(layer.shape, generator=generator, device=self.device))

    def agreement(self, engine: InflightEngine, old: dict[str, int], new: dict[str, int]) -> dict[str, float]:
        """Layer 0's decode attention over ``engine``'s cache under both launches: their max abs and relative
        difference, and the new launch's relative error against the reference."""
        cache = engine.cache
        rows = engine.options.slots * self.generation.num_beams
        generator = torch.Generator(self.device).manual_seed(1)
        q = torch.randn((rows, self.q_heads, cache.shape.head_dim), generator=generator, device=self.device)
        q = q.to(self.dtype)
        ancestry, counts = engine.beams.ancestry, engine.beams.step_no
        with torch.inference_mode():
            got_old = decode_attention(q, cache, 0, ancestry, counts, old)
            got_new = decode_attention(q, cache, 0, ancestry, counts, new)
            want = decode_attention_reference(q, cache, 0, ancestry, counts)
        return {"max_abs_error": float((got_new.float() - got_old.float()).abs().max()),
                "rel_error": rel_error(got_new, got_old), "new_vs_reference": rel_error(got_new, want)}
