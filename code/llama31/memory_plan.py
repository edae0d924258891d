"""How many samples in flight (slots) the in-flight Llama 3.1 engine fits on a GPU: ``code/llm/memory_plan.py``'s
rule (weights, per-slot state, generated rows, a prompt pool holding a typical prompt per slot, a reserve) with
Llama 3.1 8B's sizes. Nothing here imports torch: a config derives its slots from the GPU's memory without it.

Llama-3.1-8B in bf16:

- **Weights** (``code/llama31/inflight_model.py``): 8.03 billion parameters, 16.1 GB (the embedding and the
  untied LM head 1.05 GB each), and the float32 RoPE table of every position (67 MB).
- **KV cache**: 32 layers x 8 key/value heads x 128 dims x 2 (keys, values) x 2 bytes = 128 KiB a token (grouped-
  query attention: a quarter of what 32 heads would take). Greedy decoding is one beam, so a slot's generated rows
  are 128 tokens, 16 MiB.
- **Per-slot state**: the float32 logits of the 128,256-token vocabulary (0.5 MB) and the search state.

Prompts of the CNN/DailyMail set (``code/llama31/dataset.py``) are ~1,000 tokens on average (the plan's typical
prompt) and up to ~2,600 (the longest it guarantees one slot). A typical slot then takes ~145 MiB of cache: an H100
(80 GB) fits ~400 slots beside the weights and reserve, an H200 (141 GB) ~800, past ``MAX_SLOTS``.
"""

from __future__ import annotations

from code.llama31.architecture import LlamaConfig
from code.llm import memory_plan as shared
from code.llm.cache_shape import CacheShape
from code.llm.memory_plan import CUDA_CONTEXT_BYTES, PAGE_SIZE, MemoryPlan

PRECISIONS = ("fp32", "bf16", "fp16")  # the inflight backend's (FP8 GEMMs and an FP8 KV cache are to come)
KV_CACHE_DTYPES = ("auto",)  # the model's dtype
_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MAX_NEW_TOKENS = 128
NUM_BEAMS = 1  # greedy
TYPICAL_PROMPT_TOKENS = 1000
MAX_PROMPT_TOKENS = 2600
# Fewer samples in flight leave the decode GEMMs too few rows to be worth a GPU
MIN_USEFUL_SLOTS = 8
# Each slot is one row of the decode GEMMs (GPT-J's are 4): 512 rows keep the GEMMs near compute-bound while a step
# of typical prompts reads ~70 GB of cache, ~15 ms on an H200; more slots only lengthen every step (Server latency).
# An estimate, to be measured as GPT-J's 256 slots were.
MAX_SLOTS = 512


def weight_bytes(config: LlamaConfig, precision: str) -> int:
    """What ``InflightLlama`` holds: every parameter in the precision's dtype, and the float32 RoPE table."""
    _check_choice("precision", precision, PRECISIONS)
    c = config
    q_width, kv_width = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    layer = (q_width + 2 * kv_width) * c.dim + c.dim * q_width + 3 * c.dim * c.intermediate_size + 2 * c.dim
    parameters = 2 * c.vocab_size * c.dim + c.n_layers * layer + c.dim
    rope = c.n_positions * c.head_dim * 4  # [positions, head_dim / 2, 2] float32
    return parameters * _ELEMENT_BYTES[precision] + rope


def cache_shape(config: LlamaConfig, slots: int, max_new_tokens: int = MAX_NEW_TOKENS, page_size: int = PAGE_SIZE,
                max_prompt_length: int = MAX_PROMPT_TOKENS, beams: int = NUM_BEAMS) -> CacheShape:
    """The engine's KV cache shape before its pool is sized (``pages`` 1): the key/value heads only."""
    return CacheShape(layers=config.n_layers, heads=config.n_kv_heads, head_dim=config.head_dim, slots=slots,
                      beams=beams, max_new_tokens=max_new_tokens, page_size=page_size, pages=1,
                      max_prompt_length=max_prompt_length)


def llama_memory_plan(memory_bytes: int, precision: str = "bf16", kv_cache_dtype: str = "auto", *,
                      config: LlamaConfig | None = None, max_prompt_length: int = MAX_PROMPT_TOKENS,
                      max_new_tokens: int = MAX_NEW_TOKENS, typical_prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
                      page_size: int = PAGE_SIZE, context_bytes: int = CUDA_CONTEXT_BYTES,
                      min_slots: int = MIN_USEFUL_SLOTS, max_slots: int = MAX_SLOTS) -> MemoryPlan:
    """The most samples in flight (at most ``max_slots``) whose generated rows, state and typical prompts fit a GPU
    of ``memory_bytes`` (what the process may use) beside the engine's reserve; refused (``slots == 0``,
    ``refusal`` set) when fewer than ``min_slots`` fit. ``config``: Llama-3.1-8B unless given."""
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    config = config or LlamaConfig()
    plan = shared.largest_fit(
        memory_bytes, precision, kv_cache_dtype, weights_bytes=weight_bytes(config, precision),
        state_bytes=lambda slots: shared.slot_state_bytes(config.vocab_size, slots, NUM_BEAMS, max_new_tokens),
        shape=lambda slots: cache_shape(config, slots, max_new_tokens, page_size, max_prompt_length),
        element_bytes=_ELEMENT_BYTES[precision], typical_prompt_tokens=typical_prompt_tokens,
        context_bytes=context_bytes, min_slots=min_slots, max_slots=max_slots)
    if plan.fits:
        return plan
    return MemoryPlan(**{**plan.__dict__, "refusal": f"Llama 3.1 in {plan.refusal}"})


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
