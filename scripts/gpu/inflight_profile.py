"""The ``profile`` step the in-flight engines' GPU checks share (``check_llama_inflight``, ``check_gptj_inflight``):
the engine as ``make run`` runs it on a GPU (FP8 GEMMs with fast accumulation, FP8 KV cache) under torch's profiler,
one prefill pass (prompts packed up to its ``prefill_tokens``) and one eager decode step with every slot holding a
prompt; each one's kernels grouped by kind (GEMM, attention, the rest) with their share of the GPU time, the GEMMs'
rate in TFLOP/s, and the top kernels. The model's own part (its weights, its calibration, its prompts) stays in
each script; on the CPU the same step runs in float32 with FP8 GEMMs emulated and a 16-bit cache, and its events
are operators, not kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from code.llm.amax import LayerAmax
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.inflight_model import InflightBase
from code.numerics.fp8 import E4M3
from scripts.gpu.decode_splits import median_ms

# Kernel kinds of a profile, by a name's fragment (first match wins): the attention kernels (FlashAttention's
# prefill, whose name holds "cutlass", the paged decode kernels and the merge of their splits), cuBLASLt's and
# CUTLASS's GEMMs, the rest.
KERNEL_KINDS = (
    ("attention", ("flash", "_decode", "_merge", "attn")),
    ("gemm", ("gemm", "cutlass", "nvjet", "xmma", "sm90_")),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, parts in KERNEL_KINDS if any(part in lowered for part in parts)), "other")


def gemm_flops_per_token(model: InflightBase) -> int:
    """A token's GEMM FLOPs through ``model``'s layers: 2 x every layer's GEMM weights (``GEMM_WEIGHTS``, out x in),
    read before the FP8 switch frees them; the LM head is left out (a prefill pass runs it on last tokens only)."""
    return 2 * sum(getattr(layer, weight).numel() for layer in model.layers for weight in model.GEMM_WEIGHTS.values())


def profile_engine(
    model: InflightBase, amax: LayerAmax, generation: GenerationConfig, filled: list[np.ndarray], out: Path
) -> dict[str, Any]:
    """Switch ``model`` (16-bit, calibrated to ``amax``) to FP8 GEMMs (fast accumulation on a GPU), build its engine
    with one slot per prompt of ``filled`` (an FP8 KV cache on a GPU, no CUDA graph), and profile one prefill pass
    and one decode step (``engine._step``, every slot holding its prompt: beam search's beams all live after the
    warm-up steps). Tables go to ``out/profile_prefill.txt`` and ``profile_step.txt``; returns the figures of each
    (``profiled``'s), with the prefill's tokens and the step's slots (and beams, when more than one)."""
    device = model.device
    on_gpu = device.type == "cuda"
    per_token = gemm_flops_per_token(model)
    model.use_fp8_gemms(amax, fast_accum=on_gpu)
    options = EngineOptions(
        slots=len(filled),
        max_prompt_length=max(len(p) for p in filled),
        kv_dtype=E4M3 if on_gpu else None,
        cuda_graphs=False,
    )
    engine = InflightEngine(model, generation, options, kv_amax=amax)
    prefill, tokens = prefill_pass(engine, filled)
    beams = generation.num_beams
    results = {}
    with torch.inference_mode():
        median_ms(prefill, 1, device)  # warm-up: compiles and tunes outside the profile
        results["prefill"] = profiled(prefill, device, out / "profile_prefill.txt", tokens * per_token)
        fill_slots(engine, filled)
        median_ms(engine._step, 1, device)
        results["step"] = profiled(engine._step, device, out / "profile_step.txt", len(filled) * beams * per_token)
    results["prefill"]["tokens"] = tokens
    results["step"]["slots"] = len(filled)
    if beams > 1:
        results["step"]["beams"] = beams
    return results


def profile_rows(results: dict[str, Any], on_gpu: bool) -> list[str]:
    """The summary table's rows of ``profile_engine``'s results: each pass's GPU ms by kind and share, the GEMMs'
    TFLOP/s, its top kernels."""
    step = results["step"]
    beams = f" x {step['beams']} beams" if "beams" in step else ""
    rows = [
        f"profile (FP8 GEMMs{' with fast accumulation, FP8 KV cache' if on_gpu else ''}; prefill "
        f"{results['prefill']['tokens']} tokens, step {step['slots']} slots{beams}; ms of GPU time and share):"
    ]
    for name, r in results.items():
        kinds = "  ".join(f"{kind} {ms:.2f} ({100 * ms / r['total_ms']:.0f}%)" for kind, ms in r["kinds"].items())
        rows.append(f"  {name:<8} total {r['total_ms']:.2f}  {kinds}  GEMMs {r['gemm_tflops']:.0f} TFLOP/s")
        for kernel, ms in r["top"][:6]:
            rows.append(f"    {ms:8.3f}  {kernel[:90]}")
    return rows


def profiled(run: Callable[[], object], device: torch.device, table: Path, gemm_flops: int) -> dict[str, Any]:
    """One call of ``run`` under the profiler: GPU ms per kernel kind, the top kernels, the GEMMs' TFLOP/s; the
    profiler's table goes to ``table``. On the CPU: operators' self CPU ms."""
    on_gpu = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
        if on_gpu:
            torch.cuda.synchronize(device)
    events = (
        [e for e in prof.key_averages() if e.device_time_total > 0 and e.device_type.name == "CUDA"]
        if on_gpu
        else [e for e in prof.key_averages() if e.cpu_time_total > 0]
    )
    times = {e.key: (e.device_time_total if on_gpu else e.self_cpu_time_total) / 1e3 for e in events}
    kinds: dict[str, float] = {kind: 0.0 for kind, _ in KERNEL_KINDS} | {"other": 0.0}
    for name, ms in times.items():
        kinds[kernel_kind(name)] += ms
    total = sum(times.values()) or 1e-9
    text = prof.key_averages().table(
        sort_by="cuda_time_total" if on_gpu else "self_cpu_time_total", row_limit=30, max_name_column_width=90
    )
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(text)
    gemm_ms = kinds["gemm"]
    return {
        "total_ms": round(total, 3),
        "kinds": {k: round(v, 3) for k, v in kinds.items()},
        "gemm_tflops": round(gemm_flops / (gemm_ms * 1e-3) / 1e12, 1) if gemm_ms else 0.0,
        "top": sorted(((k, round(v, 3)) for k, v in times.items()), key=lambda kv: -kv[1])[:12],
    }


def fill_slots(engine: InflightEngine, filled: list[np.ndarray]) -> None:
    """Slot i of ``engine`` holds prompt i of ``filled`` (its pages assigned, its block table set; the values are
    what the pool holds: a step's time depends on lengths, not values) and starts a sample (beam search's state
    reset), so the next ``engine._step`` decodes every slot; a KV pool too small for them all is refused."""
    pages = sum(engine.cache.pages_for(len(p)) for p in filled)
    if pages > engine.cache.free_pages:
        raise ValueError(
            f"{len(filled)} slots' prompts take {pages} pages and the KV pool holds "
            f"{engine.cache.free_pages} on this GPU: lower --slots"
        )
    every = list(range(len(filled)))
    with torch.inference_mode():
        for slot, p in zip(every, filled, strict=True):
            engine.cache.assign(slot, len(p))
        engine.cache.set_tables(every, [len(p) for p in filled])
        engine.beams.reset(torch.tensor(every, device=engine.model.device))


def prefill_pass(engine: InflightEngine, filled: list[np.ndarray]) -> tuple[Callable[[], None], int]:
    """One prefill pass as the engine packs it: the first prompts of ``filled`` up to its ``prefill_tokens``, into
    slots 0.. of its cache (released again after each call); returns the pass and its token count."""
    device = engine.model.device
    packed, tokens = [], 0
    for p in filled:
        if packed and tokens + len(p) > engine.options.prefill_tokens:
            break
        packed.append(torch.as_tensor(np.asarray(p, dtype=np.int64), device=device))
        tokens += len(p)
    slots = list(range(len(packed)))

    def prefill() -> None:
        for slot, p in zip(slots, packed, strict=True):
            engine.cache.assign(slot, len(p))
        engine.model.prefill(packed, slots, engine.cache)
        for slot in slots:
            engine.cache.release(slot)

    return prefill, tokens
