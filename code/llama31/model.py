"""Llama 3.1 for generation, in the spirit of gpt-fast's model.py: one module per concept, read in one sitting.

The architecture of HF ``LlamaForCausalLM`` (Llama-3.1-8B-Instruct, the MLPerf model): token embedding, N blocks,
final RMSNorm, LM head without bias (not tied to the embedding). A block is pre-norm and sequential: RMSNorm ->
grouped-query attention -> residual, RMSNorm -> SwiGLU feed-forward -> residual. Attention has no biases and fuses
q/k/v into one matmul; ``n_heads / n_kv_heads`` query heads share each key/value head, so the KV cache holds only
the key/value heads. RoPE turns dims (i, i + head_dim/2) as a pair ("rotate half", not GPT-J's interleaved pairs)
at frequencies slowed by Llama 3's scaling for long wavelengths; attention is PyTorch's SDPA, as HF's default.

Batches are left-padded as for GPT-J (``code/gptj/model.py``): ``pad[b]`` counts row b's padding columns, its
positions start at 0 on its first real token, its padding is never attended, so a row's logits are those of its
prompt alone. Generation (``code/llm/generation.py``) drives this model as it drives GPT-J's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from code.llama31.architecture import LLAMA_CONFIGS, LlamaConfig, RopeScaling  # noqa: F401 - for callers
from code.llm.checkpoint import (
    HfNames,
    checkpoint_tensors,
    empty_module,
    layered_names,
    load_named,
    random_module,
    read_config,
)
from code.llm.contiguous_cache import CachedModel, KVCache

Device = torch.device | str


def inverse_frequencies(config: LlamaConfig) -> Tensor:
    """``[head_dim // 2]`` float32 RoPE frequencies with Llama 3's scaling, in HF's arithmetic (so angles match bit
    for bit): wavelengths longer than ``original / low_freq_factor`` are slowed by ``factor``, those shorter than
    ``original / high_freq_factor`` kept, those between blended linearly in ``original / wavelength``."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    original = scaling.original_max_position_embeddings
    low_freq_wavelen = original / scaling.low_freq_factor
    high_freq_wavelen = original / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (original / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    between = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(between, smoothed, scaled)


def rope_table(config: LlamaConfig, n_positions: int) -> Tensor:
    """``[n_positions, head_dim // 2, 2]`` (cos, sin) in float32 for positions ``0..n_positions-1``; always on the
    CPU, since GPU sin/cos can differ in the last bit. Sized to the positions in use, not the 131,072 the model
    takes (a 67 MB table)."""
    angles = torch.arange(n_positions, dtype=torch.int64).float()[:, None] * inverse_frequencies(config)[None, :]
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rotary(x: Tensor, rope: Tensor) -> Tensor:
    """Rotate ``x [B, T, H, D]`` in Llama's "rotate half" layout: dims i and i + D/2 are one pair turned by angle
    i. ``rope [B, T, 1, D/2, 2]`` is already in x's dtype (as HF casts cos and sin)."""
    cos, sin = (torch.cat((t, t), dim=-1) for t in rope.unbind(-1))
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin  # HF's q * cos + rotate_half(q) * sin


class RMSNorm(nn.Module):
    """x / rms(x) * weight, the variance in float32 and the result cast back before the weight, as HF does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    """Grouped-query attention: each key/value head serves ``n_heads // n_kv_heads`` query heads."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        q_width, kv_width = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
        self.split = (q_width, kv_width, kv_width)
        self.wqkv = nn.Linear(config.dim, q_width + 2 * kv_width, bias=False)
        self.wo = nn.Linear(q_width, config.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor, start: int) -> Tensor:
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split(self.split, dim=-1)
        q = apply_rotary(q.view(bsz, seqlen, self.n_heads, self.head_dim), rope).transpose(1, 2)
        k = apply_rotary(k.view(bsz, seqlen, self.n_kv_heads, self.head_dim), rope).transpose(1, 2)
        v = v.view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(start, k, v)
        # SDPA with a boolean mask runs a fused kernel on a GPU: no [B, heads, T, T] score tensor (a 128-prompt
        # prefill of 2,048 tokens would need 64 GiB for it). A fused kernel gives NaN to a query with no visible key,
        # and a padding column's NaN would reach real rows through its key and value (0 x NaN), so a padding query
        # sees its own column; real queries see what they saw before.
        group = self.n_heads // self.n_kv_heads  # HF's repeat_kv: SDPA's mask-taking kernel has no GQA of its own
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        own = torch.arange(seqlen, device=x.device)[:, None] + start == torch.arange(mask.shape[-1], device=x.device)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | own, scale=self.head_dim**-0.5)
        return self.wo(y.transpose(1, 2).reshape(bsz, seqlen, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x) (HF's down(act(gate) * up))."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm, sequential: attention then feed-forward, each added to the residual."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor, start: int) -> Tensor:
        h = x + self.attention(self.attention_norm(x), rope, mask, start)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(CachedModel):
    """The equivalent of HF ``LlamaForCausalLM`` (inference only: no dropout, no loss)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        self._rope: Tensor | None = None  # plain attribute, not a buffer: model.to(bfloat16) must not round it
        self.kv_heads = config.n_kv_heads  # grouped-query attention: the caches hold the key/value heads only

    def rope_for(self, end: int, device: torch.device) -> Tensor:
        """The (cos, sin) table on ``device`` covering positions below ``end``, grown by doubling."""
        if self._rope is None or self._rope.shape[0] < end or self._rope.device != device:
            size = max(end, 2 * self._rope.shape[0] if self._rope is not None else 2048)
            self._rope = rope_table(self.config, min(size, max(end, self.config.max_position_embeddings))).to(device)
        return self._rope


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: HF names -> ours
# ---------------------------------------------------------------------------------------------------------------

_TOP_LEVEL = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
              "lm_head.weight": "output.weight"}
# HF name in a layer -> (ours, part): part i of 3 is a row block of the fused wqkv (q, k, v); None the whole tensor.
_IN_LAYER: dict[str, tuple[str, int | None]] = {
    "input_layernorm.weight": ("attention_norm.weight", None),
    "self_attn.q_proj.weight": ("attention.wqkv.weight", 0),
    "self_attn.k_proj.weight": ("attention.wqkv.weight", 1),
    "self_attn.v_proj.weight": ("attention.wqkv.weight", 2),
    "self_attn.o_proj.weight": ("attention.wo.weight", None),
    "post_attention_layernorm.weight": ("ffn_norm.weight", None),
    "mlp.gate_proj.weight": ("feed_forward.w1.weight", None),
    "mlp.up_proj.weight": ("feed_forward.w3.weight", None),
    "mlp.down_proj.weight": ("feed_forward.w2.weight", None),
}
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")  # a buffer older versions saved


def hf_names(config: LlamaConfig) -> HfNames:
    """Every HF tensor name of the architecture -> (our parameter, part of wqkv or None)."""
    return layered_names({hf: (ours, None) for hf, ours in _TOP_LEVEL.items()}, "model.layers.", _IN_LAYER,
                         config.n_layers)


def _part_of(param: Tensor, part: int | None, model: Llama) -> Tensor:
    """The rows of ``param`` that one HF tensor fills: q, k or v of wqkv (of unequal widths under GQA)."""
    if part is None:
        return param
    return param.split(model.layers[0].attention.split)[part]


def hf_state(model: Llama) -> dict[str, Tensor]:
    """Our tensors under HF ``LlamaForCausalLM``'s names (views; wqkv split in three), the inverse of
    ``load_state``: the parity tests load HF models with the very weights our random-weight runs draw."""
    params = dict(model.named_parameters())
    return {hf: _part_of(params[ours], part, model) for hf, (ours, part) in hf_names(model.config).items()}


def hf_config(config: LlamaConfig, **extra: Any) -> Any:  # transformers.LlamaConfig, imported only when asked for
    """Hugging Face's ``LlamaConfig`` of one of our architectures (``extra``: HF-only settings)."""
    import transformers

    scaling = config.rope_scaling
    return transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.dim, num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads, num_key_value_heads=config.n_kv_heads, head_dim=config.head_dim,
        intermediate_size=config.intermediate_size, rms_norm_eps=config.norm_eps, rope_theta=config.rope_theta,
        rope_scaling=None if scaling is None else {
            "rope_type": "llama3", "factor": scaling.factor, "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_position_embeddings},
        max_position_embeddings=config.max_position_embeddings, bos_token_id=config.bos_token_id,
        eos_token_id=list(config.eos_token_ids), tie_word_embeddings=False, **extra)


def load_state(model: Llama, tensors: Mapping[str, Tensor] | Iterator[tuple[str, Tensor]], source: str) -> Llama:
    """Copy HF-named (or our-named) tensors into ``model``, every parameter filled
    (``code.llm.checkpoint.load_named``: one error lists all that is missing, unexpected or wrongly shaped)."""
    return load_named(model, hf_names(model.config), lambda param, part: _part_of(param, part, model), tensors,
                      _IGNORED, f"checkpoint {source} does not match Llama config {model.config}:")


def empty_model(config: LlamaConfig, dtype: torch.dtype = torch.float32, device: Device = "cpu") -> Llama:
    """A model with uninitialised storage in ``dtype`` on ``device`` (no init paid)."""
    return empty_module(lambda: Llama(config), dtype, device)


def load_checkpoint(path: str | Path, config: LlamaConfig | None = None, dtype: torch.dtype = torch.bfloat16,
                    device: Device = "cpu") -> Llama:
    """A ``Llama`` in eval mode holding exactly the checkpoint's weights (an HF folder: ``config.json`` and
    safetensors shards, as ``meta-llama/Llama-3.1-8B-Instruct`` ships; or one weights file with ``config``)."""
    path = Path(path)
    config = config or LlamaConfig.from_hf(read_config(path))
    tensors = checkpoint_tensors(path)  # before the model: a wrong path fails before any allocation
    return load_state(empty_model(config, dtype, device), tensors, str(path))


def random_weights(config: LlamaConfig, seed: int, dtype: torch.dtype = torch.float32, device: Device = "cpu",
                   draw_on_device: bool = False) -> Llama:
    """A model whose weights depend only on (config, seed): HF's init (``code.llm.checkpoint.init_weights``);
    ``draw_on_device`` draws on ``device`` (seconds instead of minutes for 8 billion draws, values then depend on
    the device's generator)."""
    return random_module(lambda: Llama(config), seed, dtype, device, draw_on_device)
