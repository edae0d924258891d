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

FP8 (the inflight backend's ``precision=fp8``, ``kv_cache_dtype=fp8``): FP8 GEMMs hold the four GEMMs' weights of
every layer in e4m3 (1 byte, 6.98 of the 8.03 billion parameters; the embedding, the LM head and the norms stay
bf16), 9.1 GB in all; an FP8 KV cache stores 1 byte an element, 64 KiB a token, which doubles the slots a memory
holds (an H100 then reaches the cap too).
"""

from __future__ import annotations

from code.llama31.architecture import LlamaConfig
from code.llm import memory_plan as shared
from code.llm.cache_shape import CacheShape
from code.llm.memory_plan import CUDA_CONTEXT_BYTES, KV_CACHE_DTYPES, PAGE_SIZE, PRECISIONS, MemoryPlan

_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
GEMMS_A_LAYER = 4  # qkv, out, gate_up, down: each an Fp8Linear with FP8 GEMMs
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


def model_dtype(precision: str) -> str:
    """The dtype between the GEMMs: an FP8 engine runs bf16 there; the others run their precision."""
    return "bf16" if precision == "fp8" else precision


def kv_element_bytes(precision: str, kv_cache_dtype: str) -> int:
    """Bytes of one stored key or value element: e4m3 for an FP8 cache, else the model's dtype."""
    return 1 if kv_cache_dtype == "fp8" else _ELEMENT_BYTES[model_dtype(precision)]


def weight_bytes(config: LlamaConfig, precision: str) -> int:
    """What ``InflightLlama`` holds: every parameter in the model's dtype but, with FP8 GEMMs, the four GEMMs'
    weights in e4m3 with a float32 weight and input scale each; and the float32 RoPE table."""
    _check_choice("precision", precision, PRECISIONS)
    c = config
    wide = _ELEMENT_BYTES[model_dtype(precision)]
    q_width, kv_width = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    gemm = (q_width + 2 * kv_width) * c.dim + c.dim * q_width + 3 * c.dim * c.intermediate_size
    fp8 = precision == "fp8"
    layer = gemm * (1 if fp8 else wide) + (GEMMS_A_LAYER * 2 * 4 if fp8 else 0) + 2 * c.dim * wide
    rope = c.n_positions * c.head_dim * 4  # [positions, head_dim / 2, 2] float32
    return (2 * c.vocab_size * c.dim + c.dim) * wide + c.n_layers * layer + rope


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
    ``refusal`` set) when fewer than ``min_slots`` fit. ``config``: Llama-3.1-8B unless given; ``precision`` fp8:
    FP8 GEMMs; ``kv_cache_dtype`` fp8: 1 byte a cached element."""
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    config = config or LlamaConfig()
    plan = shared.largest_fit(
        memory_bytes, precision, kv_cache_dtype, weights_bytes=weight_bytes(config, precision),
        state_bytes=lambda slots: shared.slot_state_bytes(config.vocab_size, slots, NUM_BEAMS, max_new_tokens),
        shape=lambda slots: cache_shape(config, slots, max_new_tokens, page_size, max_prompt_length),
        element_bytes=kv_element_bytes(precision, kv_cache_dtype), typical_prompt_tokens=typical_prompt_tokens,
        context_bytes=context_bytes, min_slots=min_slots, max_slots=max_slots)
    if plan.fits:
        return plan
    return MemoryPlan(**{**plan.__dict__, "refusal": f"Llama 3.1 in {plan.refusal}"})


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
