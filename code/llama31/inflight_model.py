"""Llama 3.1 for the in-flight engine (``code/llm/inflight_engine.py``): its weights regrouped for inference, and
the two forwards the engine runs, prefill over packed prompts and decode of one token per slot, over the paged KV
cache (``code/llm/kv_cache.py``).

The computation is ``code/llama31/model.py``'s (HF ``LlamaForCausalLM``'s) with the batch laid out differently:

- **Packed prompts**: a prefill pass holds the token rows of several prompts back to back (``[tokens, dim]``, no
  padding); attention is causal within each prompt (``code.llm.paged_attention.prefill_attention``: FlashAttention-2
  varlen on CUDA, which takes fewer key/value heads than query heads natively; a float32 loop elsewhere). Positions
  count from 0 at each prompt's first token; generated token t of a prompt of n tokens sits at position n + t.
- **The cache** holds the ``n_kv_heads`` key/value heads (8 for the 8B: 128 kB a token in bf16); decode attention
  (``decode_attention``) lets query head h read key/value head ``h // (n_heads / n_kv_heads)``.
- **Fused GEMMs**: q, k and v come from one GEMM (``wqkv``, as the eager model holds it); the SwiGLU's gate and up
  projections from one (``w13 = [w1; w3]``), so a layer runs four GEMMs: qkv, attention output, gate/up, down.

RMSNorm, rotate-half RoPE with Llama 3's scaled frequencies (``rope_table``: float32 on the CPU, cast to the model's
dtype per position as HF does) and the untied LM head are the eager model's. The engine runs it in bf16 on a GPU
(float32 in CPU tests). Each GEMM goes through ``LayerWeights``' methods, so FP8 GEMMs can replace them layer by
layer. The elementwise work between the GEMMs (RMSNorm, residual adds, RoPE, SwiGLU, FP8 quantization) is
``code/llama31/elementwise.py``'s four functions: fused on CUDA (the decode step compiled, prompt passes Triton).

FP8 (``use_fp8_gemms``, as GPT-J's): the four GEMMs of every layer take e4m3 weights (one scale per tensor) and
e4m3 inputs quantized with a static scale from ``collect_amax`` over calibration prompts (``Amax``); the embedding,
the RMSNorms, RoPE, attention and the LM head stay 16-bit. On CUDA an FP8 GEMM's input rows are padded to a
multiple of 16 (cuBLASLt's FP8 kernels take row counts in multiples of 16) and its output's padded rows dropped;
on the CPU ``Fp8Linear`` emulates the GEMM in float32 from the quantized operands. An FP8 KV cache is the engine's
``EngineOptions.kv_dtype`` with the same calibration as its ``kv_amax`` (its ``k`` and ``v`` series).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from code.llama31.architecture import LlamaConfig
from code.llama31.elementwise import Elementwise, ElementwiseFunctions, rms_norm
from code.llama31.memory_plan import TYPICAL_PROMPT_TOKENS
from code.llama31.model import Llama, rope_table
from code.llm.amax import LayerAmax
from code.llm.cache_shape import CacheShape
from code.llm.inflight_model import FP8_ROW_ALIGN, InflightBase
from code.numerics.fp8 import E4M3, Fp8Linear, quantize_fast

# The decode kernel's launch at Llama 3.1 8B's shape (1 beam, 4 query heads a key/value head of 128): 4 key/value
# heads a program (16 query rows) in 2 splits read an FP8 cache 1.50x as fast as one head a program, a bf16 one
# within 5% of the best (measured: decode-heads-2026-11-28). The engine raises SPLITS for few slots
# (``code.llm.paged_attention.decode_launch_for``); this is the launch at many.
# A model of fewer key/value heads (the tests' tiny one) takes as many a program as divide its count. An FP8 cache
# takes the CUDA kernel instead (``code.llm.paged_attention.kernel_launch``): 1.36-1.46x this launch's speed at
# this shape (measured: cuda-decode-2026-11-29).
DECODE_LAUNCH = {"KEYS": 32, "num_warps": 4, "num_stages": 3, "SPLITS": 2, "HEADS": 4}


def decode_launch(n_kv_heads: int) -> dict[str, int]:
    """``DECODE_LAUNCH`` with HEADS the largest divisor of ``n_kv_heads`` it allows (the kernel's rule)."""
    return {**DECODE_LAUNCH, "HEADS": math.gcd(DECODE_LAUNCH["HEADS"], n_kv_heads)}


@dataclass
class Amax(LayerAmax):
    """Largest magnitudes per layer over calibration prompts: the four GEMMs' inputs, keys (after RoPE, as the
    cache stores them) and values."""

    qkv: list[float] = field(default_factory=list)
    out: list[float] = field(default_factory=list)
    gate_up: list[float] = field(default_factory=list)
    down: list[float] = field(default_factory=list)
    k: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)


@dataclass
class LayerWeights:
    attention_norm: Tensor  # [dim]
    wqkv: Tensor  # [(n_heads + 2 * n_kv_heads) * head_dim, dim]
    wo: Tensor  # [dim, n_heads * head_dim]
    ffn_norm: Tensor  # [dim]
    w13: Tensor  # [2 * intermediate_size, dim]: the gate (w1) then the up projection (w3)
    w2: Tensor  # [dim, intermediate_size]
    # set by use_fp8_gemms (which then frees the 16-bit weights): one per GEMM, keyed as InflightLlama.GEMM_WEIGHTS
    fp8: dict[str, Fp8Linear] | None = None

    def scale(self, name: str) -> Tensor | None:
        """GEMM ``name``'s input scale (FP8), or None: what ``Elementwise`` quantizes that input with."""
        return None if self.fp8 is None else self.fp8[name].act_scale

    def _gemm(self, name: str, x: Tensor, weight: Tensor) -> Tensor:
        """``x``: 16-bit (quantized here for an FP8 GEMM, the output as many rows), or the e4m3 input ``Elementwise``
        made (rows padded: the output keeps them, and the next elementwise function drops them)."""
        if self.fp8 is None:
            return F.linear(x, weight)
        gemm = self.fp8[name]
        if x.dtype == E4M3:
            return gemm(x)
        tokens = x.shape[0]
        align = FP8_ROW_ALIGN if x.is_cuda else 1  # x is on the model's device: its fp8_row_align
        xq = quantize_fast(x, gemm.act_scale_value, tokens + -tokens % align)
        return gemm(xq)[:tokens]

    def qkv(self, x: Tensor) -> Tensor:
        return self._gemm("qkv", x, self.wqkv)

    def out(self, x: Tensor) -> Tensor:
        return self._gemm("out", x, self.wo)

    def gate_up(self, x: Tensor) -> Tensor:
        return self._gemm("gate_up", x, self.w13)

    def down(self, x: Tensor) -> Tensor:
        return self._gemm("down", x, self.w2)


class InflightLlama(InflightBase):
    """The model as the engine runs it (``code.llm.inflight_engine.EngineModel``). ``from_model`` takes a ``Llama``
    (random or a checkpoint's, on the target device and dtype)."""

    memory_plan = "code/llama31/memory_plan.py: llama_memory_plan"
    typical_prompt_tokens = TYPICAL_PROMPT_TOKENS
    # a layer's GEMMs, in order (its methods and its Amax series) -> each one's LayerWeights weight
    GEMM_WEIGHTS = {"qkv": "wqkv", "out": "wo", "gate_up": "w13", "down": "w2"}
    amax_type = Amax

    def __init__(self, config: LlamaConfig, embedding: Tensor, layers: list[LayerWeights], norm_weight: Tensor,
                 head_weight: Tensor) -> None:
        self.config = config
        self.query_heads = config.n_heads
        self.embedding = embedding
        self.layers = layers
        self.norm_weight = norm_weight
        self.head_weight = head_weight
        # every position the model takes (131,072 x 64 x 2 floats for the 8B: 67 MB), so no position reads past it
        self.rope = rope_table(config, config.n_positions).to(embedding.device)
        self.q_width = config.n_heads * config.head_dim
        self.kv_width = config.n_kv_heads * config.head_dim
        self.decode_launch = decode_launch(config.n_kv_heads)
        # fused elementwise work between the GEMMs on a GPU (elementwise.py); a plain one is the same-run baseline
        self.elementwise = Elementwise(compiled=embedding.is_cuda)
        self.align = FP8_ROW_ALIGN if embedding.is_cuda else 1  # FP8 GEMM input rows (the module docstring)

    def cache_shape(self, slots: int, beams: int, max_new_tokens: int, page_size: int,
                    max_prompt_length: int) -> CacheShape:
        """The cache holds the key/value heads only (grouped-query attention)."""
        cfg = self.config
        return CacheShape(layers=cfg.n_layers, heads=cfg.n_kv_heads, head_dim=cfg.head_dim, slots=slots, beams=beams,
                          max_new_tokens=max_new_tokens, page_size=page_size, pages=1,
                          max_prompt_length=max_prompt_length)

    @classmethod
    @torch.no_grad()
    def from_model(cls, model: Llama, consume: bool = False) -> InflightLlama:
        """Regroup ``model``'s weights. With ``consume`` each layer's original tensors are freed as soon as its
        grouped copies exist, so a 16 GB model never needs twice its memory on the GPU."""
        layers = []
        for block in model.layers:
            attention, mlp = block.attention, block.feed_forward
            layers.append(LayerWeights(
                attention_norm=block.attention_norm.weight.detach(),
                wqkv=attention.wqkv.weight.detach(),
                wo=attention.wo.weight.detach(),
                ffn_norm=block.ffn_norm.weight.detach(),
                w13=torch.cat((mlp.w1.weight, mlp.w3.weight)),
                w2=mlp.w2.weight.detach(),
            ))
            if consume:
                for linear in (mlp.w1, mlp.w3):
                    linear.weight.data = torch.empty(0, dtype=linear.weight.dtype, device=linear.weight.device)
        return cls(model.config, model.tok_embeddings.weight.detach(), layers, model.norm.weight.detach(),
                   model.output.weight.detach())

    # -- the pieces --------------------------------------------------------------------------------------------
    def _norm(self, x: Tensor, weight: Tensor) -> Tensor:
        """RMSNorm as ``code.llama31.model.RMSNorm``: the variance in float32, cast back before the weight."""
        return rms_norm(x, weight, self.config.norm_eps)

    def _rope(self, positions: Tensor) -> Tensor:
        return self.rope[positions].to(self.dtype)[:, None]  # [tokens, 1, head_dim / 2, 2]

    def _logits(self, x: Tensor) -> Tensor:
        return F.linear(self._norm(x, self.norm_weight), self.head_weight).float()

    def _layers(self, x: Tensor, rope: Tensor, attend: Callable[[int, Tensor, Tensor, Tensor], Tensor],
                ew: ElementwiseFunctions, on_layer: Callable[..., None] | None = None) -> Tensor:
        """Every block over ``x [tokens, dim]``; ``attend(i, q, k, v)`` is layer i's attention (it also stores the
        keys and values); ``ew`` the elementwise work between the GEMMs (``Elementwise``'s prefill or decode);
        ``on_layer(i, qkv=, out=, gate_up=, down=, k=, v=)`` sees layer i's four GEMM inputs as the GEMMs take them
        (16-bit while calibrating: before ``use_fp8_gemms``), keys and values. Returns the last block's residual
        stream."""
        cfg = self.config
        tokens, eps, align = x.shape[0], cfg.norm_eps, self.align
        first = self.layers[0]
        qkv_in = ew.norm_in(x, first.attention_norm, eps, first.scale("qkv"), align)
        for i, layer in enumerate(self.layers):
            q, k, v = ew.rotary_qk(layer.qkv(qkv_in), rope, tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
            out_in = attend(i, q, k, v).reshape(tokens, self.q_width)
            x, gate_up_in = ew.residual_norm_in(layer.out(out_in), x, layer.ffn_norm, eps, layer.scale("gate_up"),
                                                align)
            down_in = ew.mlp_in(layer.gate_up(gate_up_in), tokens, layer.scale("down"), align)
            if on_layer is not None:
                on_layer(i, qkv=qkv_in, out=out_in, gate_up=gate_up_in, down=down_in, k=k, v=v)
            down = layer.down(down_in)
            if i + 1 < len(self.layers):
                after = self.layers[i + 1]
                x, qkv_in = ew.residual_norm_in(down, x, after.attention_norm, eps, after.scale("qkv"), align)
            else:
                x = x + down[:tokens]
        return x

    # -- the engine's forwards ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def prompt_logits(self, prompts: list[Tensor]) -> Tensor:
        """Float32 logits ``[prompts, vocab]`` of each prompt's last token, without a cache (checks, calibration)."""
        return self._prompt_forward(prompts)
