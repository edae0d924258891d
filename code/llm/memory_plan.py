"""How much GPU memory an in-flight engine takes, and how many samples in flight (slots) fit a GPU: the part every
model shares. A model's own plan (GPT-J: ``code/gptj/memory_plan.py``, Llama 3.1: ``code/llama31/memory_plan.py``)
counts its weights and per-slot state and names its fixes; the rest is here.

The engine (``code/llm/inflight_engine.py``) allocates, in this order:

1. **Weights** (the model's ``InflightModel``).
2. **Per-slot state**: the step's float32 logits ``[slots x beams, vocab]`` and the beam-search state.
3. **Generated rows** of the KV cache: every beam of every slot owns ``max_new_tokens`` columns of keys and values
   in every layer, allocated for the worst case whatever a sample generates.
4. **The prompt pool**: pages of ``PAGE_SIZE`` tokens that a sample's beams share; the engine gives it what is left
   after a **reserve** (``reserve_bytes``: a prefill pass's activations, the CUDA graph's pool, compiled kernels'
   workspaces, fragmentation), capped at every slot holding the longest prompt (``prompt_pool_pages``).

The engine measures 1 and 2 (what its process can still allocate) and sizes 3 and 4 with the functions here; a
plan estimates 1 and 2 from the architecture (plus ``CUDA_CONTEXT_BYTES`` outside PyTorch's allocator) and applies
the same functions (``largest_fit``), so the plan and the engine cannot drift apart. Slots *fit* when the pool holds
a prompt of typical length for every slot: with fewer pages the engine still runs, but admission waits for pages and
slots stand idle. Nothing here imports torch: a config derives its slots from the GPU's memory without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from code.llm.cache_shape import CacheShape

GIB = 1 << 30
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")  # the inflight backends'; fp8: FP8 GEMMs, bf16 elsewhere
KV_CACHE_DTYPES = ("auto", "fp8")  # auto: the model's 16-bit dtype; fp8: e4m3
PAGE_SIZE = 64  # tokens per prompt page; the decode kernel reads one page per iteration
# The reserve beside the KV cache: a share of the GPU (fragmentation grows with the pool), at least 6 GiB (by the
# tensors' shapes a 16,384-token prefill pass of GPT-J holds ~2.5 GB of activations in bf16 and the step's CUDA graph
# pool under 1 GB at 256 slots; the rest is fragmentation and headroom)
MIN_RESERVE_BYTES = 6 * GIB
RESERVE_SHARE = 0.07
# What a CUDA process holds outside PyTorch's allocator (the context, cuBLAS handles, loaded kernels): an estimate;
# the engine measures it instead, through the driver's free memory
CUDA_CONTEXT_BYTES = 1 * GIB
BEAM_STATE_BYTES = 8 + 8 + 4  # per beam and generated column: BeamState's run and done tokens (int64), ancestry


def reserve_bytes(memory_bytes: int, share: float = RESERVE_SHARE) -> int:
    """Memory left beside the KV cache on a GPU of ``memory_bytes`` (see ``RESERVE_SHARE``)."""
    return int(max(MIN_RESERVE_BYTES, share * memory_bytes))


def prompt_pool_pages(room_bytes: int, memory_bytes: int, shape: CacheShape, element_bytes: int,
                      reserve_share: float = RESERVE_SHARE) -> int:
    """The prompt pool the engine allocates for ``shape`` (its ``pages`` aside): what is left of ``room_bytes``
    (what the process can still allocate before the KV cache) after the generated rows and the reserve, in pages,
    capped at every slot holding the longest prompt. 0 when nothing is left; the engine refuses fewer than
    ``shape.pages_per_slot``."""
    left = room_bytes - shape.generated_bytes(element_bytes) - reserve_bytes(memory_bytes, reserve_share)
    return max(0, min(shape.slots * shape.pages_per_slot, left // shape.page_bytes(element_bytes)))


def slot_state_bytes(vocab_size: int, slots: int, beams: int, max_new_tokens: int) -> int:
    """What the engine allocates per slot before its KV cache: the float32 logits and the beam-search state."""
    return slots * beams * (vocab_size * 4 + max_new_tokens * BEAM_STATE_BYTES)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes of each part for ``slots`` samples in flight; when refused (``slots == 0``) the parts are those of
    the least useful slot count, which do not fit, and ``refusal`` says what would."""

    memory_bytes: int
    precision: str
    kv_cache_dtype: str
    slots: int  # samples in flight (gpu_batch_size); 0: refused
    limited_by: str  # "memory", "cap" (the most slots asked for) or "refused"
    context_bytes: int
    weights_bytes: int
    slot_state_bytes: int
    generated_bytes: int
    prompt_pool_pages: int
    prompt_pool_bytes: int
    reserve_bytes: int
    needed_bytes: int  # the least GPU memory that holds the parts with typical prompts in every slot
    refusal: str | None = None

    @property
    def fits(self) -> bool:
        return self.refusal is None


def largest_fit(memory_bytes: int, precision: str, kv_cache_dtype: str, *, weights_bytes: int,
                state_bytes: Callable[[int], int], shape: Callable[[int], CacheShape], element_bytes: int,
                typical_prompt_tokens: int, context_bytes: int, min_slots: int, max_slots: int) -> MemoryPlan:
    """The most slots (at most ``max_slots``) whose generated rows, state (``state_bytes(slots)``) and typical
    prompts fit a GPU of ``memory_bytes`` beside the engine's reserve and ``weights_bytes``; ``shape(slots)``: the
    engine's cache shape (its pool aside). Fewer than ``min_slots``: refused (``slots == 0``) with the parts of
    ``min_slots`` and a refusal naming the memory they need (a model's plan may word its own)."""
    if memory_bytes <= 0:
        raise ValueError(f"memory_bytes must be > 0, not {memory_bytes}: pass the GPU's usable bytes")
    if not 1 <= min_slots <= max_slots:
        raise ValueError(f"need 1 <= min_slots <= max_slots, not {min_slots} and {max_slots}")
    max_prompt_length = shape(min_slots).max_prompt_length
    if not 0 < typical_prompt_tokens <= max_prompt_length:
        raise ValueError(f"typical_prompt_tokens must be in (0, max_prompt_length={max_prompt_length}], not "
                         f"{typical_prompt_tokens}")

    def typical_pages(slots: int) -> int:
        """Pages for a typical prompt in every slot (at least one longest prompt, as the engine requires)."""
        page_size = shape(slots).page_size
        return max(shape(slots).pages_per_slot, math.ceil(slots * (typical_prompt_tokens / page_size + 0.5)))

    def parts(slots: int) -> dict[str, int]:
        state = state_bytes(slots)
        pages = prompt_pool_pages(memory_bytes - context_bytes - weights_bytes - state, memory_bytes, shape(slots),
                                  element_bytes)
        page_bytes = shape(slots).page_bytes(element_bytes)
        generated = shape(slots).generated_bytes(element_bytes)
        # the least memory whose reserve (at least MIN_RESERVE_BYTES, else its share) leaves typical prompts room
        base = context_bytes + weights_bytes + state + generated + typical_pages(slots) * page_bytes
        needed = max(base + MIN_RESERVE_BYTES, math.ceil(base / (1 - RESERVE_SHARE)))
        return dict(context_bytes=context_bytes, weights_bytes=weights_bytes, slot_state_bytes=state,
                    generated_bytes=generated, prompt_pool_pages=pages, prompt_pool_bytes=pages * page_bytes,
                    reserve_bytes=reserve_bytes(memory_bytes), needed_bytes=needed)

    def fits(slots: int) -> bool:
        return parts(slots)["prompt_pool_pages"] >= typical_pages(slots)

    # fits is monotone (more slots: less room, more rows, more pages wanted): the largest that fits by bisection
    low, high = 0, max_slots
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    common = dict(memory_bytes=memory_bytes, precision=precision, kv_cache_dtype=kv_cache_dtype)
    if low >= min_slots:
        return MemoryPlan(**common, slots=low, limited_by="cap" if low == max_slots else "memory", **parts(low))
    wanted = parts(min_slots)
    refusal = (f"{precision} needs about {wanted['needed_bytes'] / GIB:.0f} GiB for {min_slots} samples in flight, "
               f"and this GPU has {memory_bytes / GIB:.0f} GiB: use a GPU with at least "
               f"{math.ceil(wanted['needed_bytes'] / GIB)} GiB")
    return MemoryPlan(**common, slots=0, limited_by="refused", refusal=refusal, **wanted)
