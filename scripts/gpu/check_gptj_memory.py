"""The GPT-J memory plan against the engine on a GPU: what ``gptj_memory_plan`` predicts and what the engine
allocates and peaks at, optionally on a stand-in (``--as_gib``: the process is capped to that many GiB with
``torch.cuda.set_per_process_memory_fraction``, as on a GPU of that memory).

    python3 -m scripts.gpu.check_gptj_memory --out DIR [--as_gib 39.59] [--engine bf16/auto] [--slots N]
        [--prompts 64]

One engine per call (a fresh process, so one engine's compiled kernels and cached blocks do not size the next):
random GPT-J 6B weights (FP8: calibrated on the synthetic prompts), the plan's slots unless ``--slots``; the
prompts are 8 at the longest (1,919 tokens: the largest prefill pass) then CNN/DailyMail-like ones with forced
output lengths. Reports the weights, the memory outside PyTorch's allocator (the CUDA context), the prompt pool
against the plan's, and the peak the allocator reserved against the usable memory; writes
``DIR/gptj_memory_<engine>_<GiB>.json``. An out-of-memory error is the finding, reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from code.gptj.backends.inflight import calibrate
from code.gptj.backends.inflight_engine import EngineSpec, load_model
from code.gptj.dataset import GptjSamples
from code.gptj.memory_plan import GIB, MAX_SLOTS, gptj_memory_plan
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.mlperf.devices import usable_gpu_bytes
from code.numerics.fp8 import E4M3

LONGEST = 1919


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--as_gib", type=float, default=0.0, help="cap the process to this many GiB (0: the GPU's)")
    parser.add_argument("--engine", default="bf16/auto", help="PRECISION/KV_CACHE_DTYPE, e.g. bf16/auto, fp8/fp8")
    parser.add_argument("--slots", type=int, default=0, help="samples in flight (0: the plan's)")
    parser.add_argument("--prompts", type=int, default=64)
    args = parser.parse_args()
    precision, kv = args.engine.split("/")
    device = torch.device("cuda", torch.cuda.current_device())  # the fraction's setter wants an index
    total = torch.cuda.get_device_properties(device).total_memory
    if args.as_gib:
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.as_gib * GIB / total), device)
    usable = usable_gpu_bytes(device)
    plan = gptj_memory_plan(usable, precision, kv, max_slots=MAX_SLOTS)
    slots = args.slots or plan.slots
    result: dict = {"gpu": torch.cuda.get_device_name(device), "total_gib": round(total / GIB, 2),
                    "usable_gib": round(usable / GIB, 2), "engine": args.engine, "plan": plan.__dict__,
                    "slots": slots}
    started = time.perf_counter()
    try:
        if slots < 1:
            raise ValueError(f"the plan refuses: {plan.refusal}")
        model = load_model(EngineSpec(precision=precision, kv_cache_dtype=kv), device, torch.bfloat16)
        amax = calibrate(model, 0, LONGEST) if "fp8" in (precision, kv) else None
        if precision == "fp8":
            model.use_fp8_gemms(amax)
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(device)
        result["weights_gib"] = round(torch.cuda.memory_allocated(device) / GIB, 3)
        result["outside_allocator_gib"] = round((total - free - torch.cuda.memory_reserved(device)) / GIB, 3)
        torch.cuda.reset_peak_memory_stats(device)
        options = EngineOptions(slots=slots, max_prompt_length=LONGEST, kv_dtype=E4M3 if kv == "fp8" else None,
                                memory_bytes=usable)
        engine = InflightEngine(model, GenerationConfig(), options, kv_amax=amax)
        result["kv_pages"] = engine.stats.kv_pages
        result["after_build_gib"] = round(torch.cuda.memory_reserved(device) / GIB, 3)
        samples = GptjSamples.synthetic(args.prompts, seed=1).with_forced_lengths(seed=1)
        longest = GptjSamples.full_length(8, seed=2)
        prompts = [longest.prompt(i) for i in range(8)] + [samples.prompt(i) for i in range(args.prompts)]
        forced = [128] * 8 + [samples.forced_length(i) for i in range(args.prompts)]
        outputs = engine.generate(prompts, forced)
        result["generated"] = int(sum(len(o) for o in outputs))
        result["stats"] = engine.stats.as_dict()
        result["ok"] = True
    except Exception as error:  # an out-of-memory error is the finding
        result["ok"] = False
        result["error"] = f"{type(error).__name__}: {str(error)[:500]}"
    result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / GIB, 3)
    result["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 3)
    result["seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"gptj_memory_{precision}-{kv}_{args.as_gib or round(total / GIB, 1)}.json"
    (args.out / name).write_text(json.dumps(result, indent=1, default=str))
    shown = {k: v for k, v in result.items() if k not in ("plan", "stats")}
    print(json.dumps(shown), f"plan: {plan.slots} slots, {plan.prompt_pool_pages} pages, "
          f"weights {plan.weights_bytes / GIB:.2f} GiB; engine pages {result.get('kv_pages')}", sep="\n")


if __name__ == "__main__":
    main()
