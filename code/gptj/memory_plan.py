"""How much GPU memory the in-flight GPT-J engine takes, and how many samples in flight (slots) fit a GPU.

What every model's plan shares (the reserve, the prompt pool, the search for the most slots that fit) is
``code/llm/memory_plan.py``'s; GPT-J's weights, its measured points and its refusals are here.

The engine (``code/llm/inflight_engine.py``) allocates, in this order:

1. **Weights** (``InflightModel``): the embedding, LM head (rows padded to ``HEAD_ROW_ALIGN``), LayerNorms and
   biases in the 16-bit dtype; the two GEMMs of every layer (``[wqkv; w1]``, ``[wo | w2]``) in 16 bits, or in e4m3
   (one byte) with FP8 GEMMs. GPT-J 6B: 12.1 GB in bf16, 6.5 GB with FP8 GEMMs.
2. **Per-slot state**: the step's float32 logits ``[slots x beams, vocab]`` and the beam-search state.
3. **Generated rows** of the KV cache: every beam of every slot owns ``max_new_tokens`` columns of keys and values
   in every layer, allocated for the worst case (128 tokens) whatever a sample generates.
4. **The prompt pool**: pages of ``PAGE_SIZE`` tokens that a sample's beams share; the engine gives it what is left
   after a **reserve** (``reserve_bytes``: a prefill pass's activations, the CUDA graph's pool, compiled kernels'
   workspaces, fragmentation), capped at every slot holding the longest prompt (``prompt_pool_pages``).

The engine measures 1 and 2 (what its process can still allocate, ``code.mlperf.devices.allocatable_gpu_bytes``)
and sizes 3 and 4 with code/llm/memory_plan.py's functions; ``gptj_memory_plan`` estimates 1 and 2 from the architecture
(``weight_bytes``, ``slot_state_bytes``, plus ``CUDA_CONTEXT_BYTES`` outside PyTorch's allocator) and applies the
same functions, so the plan and the engine cannot drift apart. ``gpu_batch_size`` (the slots) changes 2 and 3 and
the pool's cap; the pool then takes whatever memory remains, so more slots leave fewer prompt pages for each.

Slots *fit* when the pool holds a prompt of typical length for every slot (``TYPICAL_PROMPT_TOKENS``): with fewer
pages the engine still runs, but admission waits for pages and slots stand idle (the first H100 runs: 77 of 96
slots busy on average). Nothing here imports torch: a config derives its slots from the GPU's memory without it.
"""

from __future__ import annotations

import dataclasses
import math

from code.common.gpu_models import FP8_CAPABILITY, capability_text
from code.gptj.architecture import GptjConfig
from code.gptj.prompt import MAX_INPUT_TOKENS, MAX_NEW_TOKENS
from code.llm import memory_plan as shared
from code.llm.cache_shape import CacheShape
from code.llm.memory_plan import (  # noqa: F401 - GPT-J's plan as its callers name it
    CUDA_CONTEXT_BYTES,
    GIB,
    KV_CACHE_DTYPES,
    MIN_RESERVE_BYTES,
    PAGE_SIZE,
    PRECISIONS,
    RESERVE_SHARE,
    MemoryPlan,
    prompt_pool_pages,
    reserve_bytes,
)

HEAD_ROW_ALIGN = 64  # LM-head rows on a GPU are padded to this multiple (code/gptj/inflight/layers.py says why)
# A prompt's mean length in the CNN/DailyMail set (~930 tokens: documentation/notes/gptj_gpu_notes.md; synthetic
# prompts are drawn to a mean of ~920, code/gptj/dataset.py); a prompt's last page is half empty on average
TYPICAL_PROMPT_TOKENS = 930
# Fewer samples in flight leave the decode GEMMs with too few rows to be worth a GPU (SingleStream runs 1 by its
# own config, not through this plan)
MIN_USEFUL_SLOTS = 8
# Twice the most ever measured (256 on an H200), where 320 and 384 slots already gave no more throughput (the
# decode step's time grows with its rows once its GEMMs are compute-bound); more slots only lengthen every step
# (Server latency) and reserve generated rows that buy nothing
MAX_SLOTS = 512

_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def model_dtype(precision: str) -> str:
    """The dtype between the GEMMs: an FP8 engine runs bf16 there; the others run their precision."""
    return "bf16" if precision == "fp8" else precision


def kv_element_bytes(precision: str, kv_cache_dtype: str) -> int:
    """Bytes of one stored key or value element: e4m3 for an FP8 cache, else the model's dtype."""
    return 1 if kv_cache_dtype == "fp8" else _ELEMENT_BYTES[model_dtype(precision)]


def cache_shape(config: GptjConfig, slots: int, beams: int, max_new_tokens: int, page_size: int,
                max_prompt_length: int) -> CacheShape:
    """The engine's KV cache shape before its pool is sized (``pages`` 1)."""
    return CacheShape(layers=config.n_layer, heads=config.n_head, head_dim=config.head_dim, slots=slots, beams=beams,
                      max_new_tokens=max_new_tokens, page_size=page_size, pages=1,
                      max_prompt_length=max_prompt_length)


def weight_bytes(config: GptjConfig, precision: str, head_row_align: int = HEAD_ROW_ALIGN) -> int:
    """What ``InflightModel`` holds (``head_row_align``: 64 on a GPU, 1 on a CPU, where the head is not padded)."""
    _check_choice("precision", precision, PRECISIONS)
    wide = _ELEMENT_BYTES[model_dtype(precision)]
    e, inner, vocab = config.n_embd, config.n_inner, config.vocab_size
    rows_in = 3 * e + inner  # [wqkv; w1]
    gemm_elements = rows_in * e + e * (e + inner)  # w_in and w_out = [wo | w2]
    fp8 = precision == "fp8"
    gemm = gemm_elements * (1 if fp8 else wide) + (4 * 4 if fp8 else 0)  # Fp8Linear: float32 weight and input scales
    small = (2 * e + rows_in + e) * wide  # LayerNorm weight and bias, b_in, b_out
    head_rows = vocab + -vocab % head_row_align
    rope = config.n_positions * config.rotary_dim * 4  # float32 (cos, sin) table
    return vocab * e * wide + config.n_layer * (gemm + small) + 2 * e * wide + head_rows * (e + 1) * wide + rope


def decode_step_bytes(precision: str, kv_cache_dtype: str, num_beams: int = 4, *, config: GptjConfig | None = None,
                      typical_prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
                      typical_new_tokens: int = MAX_NEW_TOKENS // 2) -> tuple[int, int]:
    """What one decode step reads: (the weights, once per step whatever the slots; the cache of one slot at a typical
    prompt, its beams sharing it, and half the new tokens each). Decoding is bound by these reads, so a GPU's step rate
    follows them: a config derived from the GPU estimates its rate at fewer slots with them."""
    config = config or GptjConfig()
    per_token = 2 * config.n_layer * config.n_embd * kv_element_bytes(precision, kv_cache_dtype)  # keys and values
    return weight_bytes(config, precision), per_token * (typical_prompt_tokens + num_beams * typical_new_tokens)


def slot_state_bytes(config: GptjConfig, slots: int, beams: int, max_new_tokens: int) -> int:
    """What the engine allocates per slot before its KV cache: the float32 logits and the beam-search state."""
    return shared.slot_state_bytes(config.vocab_size, slots, beams, max_new_tokens)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def _label(precision: str, kv_cache_dtype: str) -> str:
    if precision == "fp8":
        return "FP8 (FP8 GEMMs and KV cache)" if kv_cache_dtype == "fp8" else "FP8 GEMMs with a bf16 KV cache"
    return precision + (" with an FP8 KV cache" if kv_cache_dtype == "fp8" else "")


def gptj_memory_plan(memory_bytes: int, precision: str, kv_cache_dtype: str = "auto", num_beams: int = 4, *,
                     config: GptjConfig | None = None, max_prompt_length: int = MAX_INPUT_TOKENS,
                     max_new_tokens: int = MAX_NEW_TOKENS, typical_prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
                     page_size: int = PAGE_SIZE, context_bytes: int = CUDA_CONTEXT_BYTES,
                     min_slots: int = MIN_USEFUL_SLOTS, max_slots: int = MAX_SLOTS,
                     fp8_available: bool = True) -> MemoryPlan:
    """The most samples in flight (at most ``max_slots``) whose generated rows, state and typical prompts fit a
    GPU of ``memory_bytes`` beside the engine's reserve; refused (``slots == 0``, ``refusal`` set) when fewer than
    ``min_slots`` fit. ``memory_bytes``: what the process may use of the GPU (``usable_gpu_bytes``: its total, or
    less under a per-process memory fraction); ``config``: GPT-J 6B unless given; ``fp8_available``: whether the
    GPU runs FP8, which a refusal names as the fix only then."""
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    config = config or GptjConfig()
    plan = shared.largest_fit(
        memory_bytes, precision, kv_cache_dtype, weights_bytes=weight_bytes(config, precision),
        state_bytes=lambda slots: slot_state_bytes(config, slots, num_beams, max_new_tokens),
        shape=lambda slots: cache_shape(config, slots, num_beams, max_new_tokens, page_size, max_prompt_length),
        element_bytes=kv_element_bytes(precision, kv_cache_dtype), typical_prompt_tokens=typical_prompt_tokens,
        context_bytes=context_bytes, min_slots=min_slots, max_slots=max_slots)
    if plan.fits:
        return plan
    wanted = dataclasses.asdict(plan)
    label = _label(precision, kv_cache_dtype)
    fp8 = (precision, kv_cache_dtype) == ("fp8", "fp8")
    fix = f"use a GPU with at least {math.ceil(wanted['needed_bytes'] / GIB)} GiB"
    if not fp8 and gptj_memory_plan(memory_bytes, "fp8", "fp8", num_beams, config=config,
                                    max_prompt_length=max_prompt_length, max_new_tokens=max_new_tokens,
                                    typical_prompt_tokens=typical_prompt_tokens, page_size=page_size,
                                    context_bytes=context_bytes, min_slots=min_slots, max_slots=max_slots,
                                    fp8_available=fp8_available).fits:
        fp8_gpu = f"compute capability {capability_text(FP8_CAPABILITY)} or newer"
        fix = ("use the FP8 engine (--precision=fp8 --kv_cache_dtype=fp8) or a GPU with more memory" if fp8_available
               else f"{fix}, or a GPU of {fp8_gpu}, whose FP8 engine fits in this memory")
    refusal = (f"GPT-J in {label} needs about {wanted['needed_bytes'] / GIB:.0f} GiB for {min_slots} samples in "
               f"flight, and this GPU has {memory_bytes / GIB:.0f} GiB: {fix}")
    return dataclasses.replace(plan, refusal=refusal)

