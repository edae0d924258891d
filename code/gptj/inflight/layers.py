"""GPT-J's weights regrouped for the in-flight engine, and its two forwards: prefill and decode.

GPT-J's block is ``x + attention(ln(x)) + mlp(ln(x))``: attention and MLP read the same LayerNorm output and their
results are summed. So per layer:

- ``w_in = [wqkv; w1]``: one GEMM makes q, k, v and the MLP's hidden pre-activation from ``ln(x)``;
- ``w_out = [wo | w2]``: one GEMM of ``[attention output, gelu(hidden)]`` gives ``wo(attn) + w2(gelu) `` (+ b2),

two GEMMs a layer instead of four, each larger (better tile use, half the launches). Rotary embedding and the
tanh GELU are those of ``code/gptj/model.py`` (``apply_rotary``, ``gelu_new``).

FP8 (``use_fp8_gemms``): both GEMMs of every layer take e4m3 weights (one scale per tensor) and e4m3 inputs
quantized with a static scale from ``collect_amax`` over calibration prompts; the embedding, the LayerNorms,
attention and the LM head stay 16-bit. The LM head's rows are padded to a multiple of 64 so cuBLAS picks a
Hopper kernel for it (an odd vocabulary of 50,401 rows falls back to an older one); the padded logits are sliced off.

The elementwise work between the GEMMs (LayerNorm, rotary, GELU, concatenation, residual, quantization) lives in
``code/gptj/inflight/elementwise.py``, compiled into a few fused kernels on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from code.gptj.inflight.elementwise import Elementwise, ElementwiseFunctions
from code.gptj.memory_plan import (
    HEAD_ROW_ALIGN,  # LM-head rows are padded to this multiple (the module docstring)
    TYPICAL_PROMPT_TOKENS,
)
from code.gptj.memory_plan import cache_shape as gptj_cache_shape
from code.gptj.model import Gptj, GptjConfig, rope_table
from code.llm.amax import LayerAmax
from code.llm.inflight_model import InflightBase
from code.llm.kv_cache import CacheShape
from code.llm.paged_attention import DECODE_LAUNCH
from code.numerics.fp8 import Fp8Linear


@dataclass
class LayerWeights:
    norm_weight: Tensor
    norm_bias: Tensor
    w_in: Tensor  # [3 * n_embd + n_inner, n_embd]
    b_in: Tensor  # zeros for q, k, v; then w1's bias
    w_out: Tensor  # [n_embd, n_embd + n_inner]
    b_out: Tensor  # w2's bias
    # set by use_fp8_gemms (which then frees w_in / w_out): keyed by the GEMMs' Amax series, gemm_in and gemm_out
    fp8: dict[str, Fp8Linear] | None = None

    @property
    def in_scale(self) -> Tensor | None:
        """The first GEMM's input scale (FP8), or None: what ``Elementwise`` quantizes that input with."""
        return None if self.fp8 is None else self.fp8["gemm_in"].act_scale

    @property
    def out_scale(self) -> Tensor | None:
        return None if self.fp8 is None else self.fp8["gemm_out"].act_scale

    def linear_in(self, x: Tensor) -> Tensor:
        """``x``: what ``Elementwise`` made for this GEMM (16-bit, or e4m3 with padded rows)."""
        if self.fp8 is not None:
            return self.fp8["gemm_in"](x, self.b_in)
        return F.linear(x, self.w_in, self.b_in)

    def linear_out(self, x: Tensor) -> Tensor:
        if self.fp8 is not None:
            return self.fp8["gemm_out"](x, self.b_out)
        return F.linear(x, self.w_out, self.b_out)


@dataclass
class Amax(LayerAmax):
    """Largest magnitudes per layer over calibration prompts: the two GEMMs' inputs, keys and values."""

    gemm_in: list[float] = field(default_factory=list)
    gemm_out: list[float] = field(default_factory=list)
    k: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)


class InflightModel(InflightBase):
    """The model as the engine runs it (``code.llm.inflight_engine.EngineModel``). ``from_model`` takes a ``Gptj``
    (on the target device and dtype)."""

    memory_plan = "code/gptj/memory_plan.py: gptj_memory_plan"
    typical_prompt_tokens = TYPICAL_PROMPT_TOKENS
    # the Triton decode kernel's launch at many slots (GPT-J's shape is the kernel module's default; an FP8 cache
    # takes the CUDA kernel instead: ``code.llm.paged_attention.kernel_launch``); the engine raises its SPLITS for
    # few slots (``code.llm.paged_attention.decode_launch_for``)
    decode_launch: Mapping[str, int] = DECODE_LAUNCH
    GEMM_WEIGHTS = {"gemm_in": "w_in", "gemm_out": "w_out"}  # each GEMM's Amax series -> its LayerWeights' weight
    amax_type = Amax

    def __init__(self, config: GptjConfig, embedding: Tensor, layers: list[LayerWeights], norm_weight: Tensor,
                 norm_bias: Tensor, head_weight: Tensor, head_bias: Tensor) -> None:
        self.config = config
        self.query_heads = config.n_head
        self.embedding = embedding
        self.layers = layers
        self.norm_weight, self.norm_bias = norm_weight, norm_bias
        pad = -head_weight.shape[0] % HEAD_ROW_ALIGN if head_weight.is_cuda else 0
        self.head_weight = F.pad(head_weight, (0, 0, 0, pad)) if pad else head_weight
        self.head_bias = F.pad(head_bias, (0, pad)) if pad else head_bias
        self.vocab_size = head_weight.shape[0]
        self.rope = rope_table(config.n_positions, config.rotary_dim).to(embedding.device)
        self.elementwise = Elementwise(compiled=embedding.is_cuda)

    def cache_shape(self, slots: int, beams: int, max_new_tokens: int, page_size: int,
                    max_prompt_length: int) -> CacheShape:
        return gptj_cache_shape(self.config, slots, beams, max_new_tokens, page_size, max_prompt_length)

    @classmethod
    @torch.no_grad()
    def from_model(cls, model: Gptj, consume: bool = False) -> InflightModel:
        """Regroup ``model``'s weights. With ``consume`` each layer's original tensors are freed as soon as its
        grouped copies exist, so a 12 GB model never needs twice its memory on the GPU."""
        width = model.config.n_embd
        layers = []
        for block in model.layers:
            attention, mlp = block.attention, block.feed_forward
            zeros = torch.zeros(3 * width, dtype=mlp.w1.bias.dtype, device=mlp.w1.bias.device)
            layers.append(LayerWeights(
                norm_weight=block.norm.weight.detach(),
                norm_bias=block.norm.bias.detach(),
                w_in=torch.cat((attention.wqkv.weight, mlp.w1.weight)),
                b_in=torch.cat((zeros, mlp.w1.bias)),
                w_out=torch.cat((attention.wo.weight, mlp.w2.weight), dim=1),
                b_out=mlp.w2.bias.detach(),
            ))
            if consume:
                for linear in (attention.wqkv, attention.wo, mlp.w1, mlp.w2):
                    linear.weight.data = torch.empty(0, dtype=linear.weight.dtype, device=linear.weight.device)
        return cls(model.config, model.tok_embeddings.weight.detach(), layers, model.norm.weight.detach(),
                   model.norm.bias.detach(), model.output.weight.detach(), model.output.bias.detach())

    def _rope(self, positions: Tensor) -> Tensor:
        return self.rope[positions].to(self.dtype)[:, None, None]  # [tokens, 1, 1, rotary/2, 2]

    def _logits(self, x: Tensor) -> Tensor:
        x = F.layer_norm(x, (self.config.n_embd,), self.norm_weight, self.norm_bias, self.config.layer_norm_epsilon)
        return F.linear(x, self.head_weight, self.head_bias)[:, : self.vocab_size].float()

    def _layers(self, x: Tensor, rope: Tensor, attend: Callable[[int, Tensor, Tensor, Tensor], Tensor],
                ew: ElementwiseFunctions, on_layer: Callable[..., None] | None = None) -> Tensor:
        """Every layer over ``x [tokens, n_embd]``; ``attend(i, q, k, v)`` is layer i's attention (it also stores
        the keys and values); ``on_layer(i, gemm_in=, k=, v=, gemm_out=)`` sees each layer's GEMM inputs (its
        ``Amax`` series), keys and values. Returns the last layer's residual stream."""
        cfg = self.config
        tokens = x.shape[0]
        align = self.fp8_row_align  # the rows of an FP8 GEMM's input (see elementwise.py)
        first = self.layers[0]
        normed = ew.norm_in(x, first.norm_weight, first.norm_bias, cfg.layer_norm_epsilon, first.in_scale, align)
        for i, layer in enumerate(self.layers):
            fused = layer.linear_in(normed)
            q, k, v = ew.rotary_qkv(fused, rope, tokens, cfg.n_head, cfg.head_dim)
            attended = attend(i, q, k, v)
            mlp_in = ew.mlp_in(fused, attended, layer.out_scale, align)
            if on_layer is not None:
                on_layer(i, gemm_in=normed, k=k, v=v, gemm_out=mlp_in)
            out = layer.linear_out(mlp_in)
            if i + 1 < len(self.layers):
                after = self.layers[i + 1]
                x, normed = ew.residual_norm_in(out, x, after.norm_weight, after.norm_bias, cfg.layer_norm_epsilon,
                                                after.in_scale, align)
            else:
                x = out[:tokens] + x
        return x
