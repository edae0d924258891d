"""GPT-J for generation, written for inference and for reading in one sitting (in the spirit of gpt-fast's model.py).

The architecture of HF ``GPTJForCausalLM`` (EleutherAI's GPT-J 6B, the MLPerf model): token embedding, N blocks,
final LayerNorm, LM head with bias. A block normalises once and feeds that to attention *and* the MLP, whose outputs
are added to the residual in parallel. Attention has no biases, fuses q/k/v into one matmul, applies GPT-J's
interleaved rotary embedding to the first ``rotary_dim`` dims of q and k, and does softmax in float32 as HF does.

Batches are left-padded: every row's last prompt token sits in the same column, so one decode step writes one cache
column for all rows. ``pad[b]`` is row b's count of padding columns; its positions start at 0 on its first real token
and its padding columns are never attended. A row's logits are thus those of its prompt run alone.

Checkpoints in HF naming (folder with config.json and sharded safetensors or .bin, or one file) are mapped onto our
parameters tensor by tensor, with no full state dict in memory; loading is strict, since a partly loaded model still
produces fluent-looking text.
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

from code.gptj.architecture import GPTJ_CONFIGS, GptjConfig  # noqa: F401 - GPTJ_CONFIGS: for callers
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


def rope_table(n_positions: int, rotary_dim: int) -> Tensor:
    """``[n_positions, rotary_dim // 2, 2]`` (cos, sin) in float32, with HF's arithmetic so the angles match bit for
    bit; always computed on the CPU, since GPU sin/cos can differ in the last bit."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
    angles = torch.arange(n_positions, dtype=torch.int64).float()[:, None] * inv_freq
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rotary(x: Tensor, rope: Tensor) -> Tensor:
    """Rotate the first ``2 * rope.shape[-2]`` dims of ``x [B, T, H, D]`` in GPT-J's "rotate every two" layout:
    dims (2i, 2i+1) are one pair turned by angle i. ``rope [B, T, 1, R/2, 2]`` is already in x's dtype (as in HF)."""
    rot = rope.shape[-2] * 2
    x0, x1 = x[..., :rot].unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = rope.unbind(-1)
    rotated = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)
    return torch.cat((rotated, x[..., rot:]), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: GptjConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.wqkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.wo = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor, start: int) -> Tensor:
        bsz, seqlen, width = x.shape
        q, k, v = (t.view(bsz, seqlen, self.n_head, self.head_dim) for t in self.wqkv(x).split(width, dim=-1))
        q, k, v = apply_rotary(q, rope).transpose(1, 2), apply_rotary(k, rope).transpose(1, 2), v.transpose(1, 2)
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(start, k, v)
        # float32 scores and softmax whatever the model dtype, with HF's operation order (q·k, then / sqrt(d))
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        # finfo.min rather than -inf: a padding query with no visible key gets a uniform (finite) row, not NaN
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
        y = torch.matmul(scores.softmax(dim=-1).to(v.dtype), v)
        return self.wo(y.transpose(1, 2).reshape(bsz, seqlen, width))


class FeedForward(nn.Module):
    def __init__(self, config: GptjConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.n_embd, config.n_inner)
        self.w2 = nn.Linear(config.n_inner, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))  # HF's gelu_new is this tanh approximation


class Block(nn.Module):
    """Parallel attention and MLP (GPT-J, GPT-NeoX style): both read the same LayerNorm output."""

    def __init__(self, config: GptjConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)

    def forward(self, x: Tensor, rope: Tensor, mask: Tensor, start: int) -> Tensor:
        h = self.norm(x)
        return self.attention(h, rope, mask, start) + self.feed_forward(h) + x  # HF's summation order


class Gptj(CachedModel):
    """The equivalent of HF ``GPTJForCausalLM`` (inference only: no dropout, no loss)."""

    def __init__(self, config: GptjConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.output = nn.Linear(config.n_embd, config.vocab_size)
        self._rope: Tensor | None = None  # plain attribute, not a buffer: model.to(bfloat16) must not round it
        self.kv_heads = config.n_head

    def rope_for(self, end: int, device: torch.device) -> Tensor:
        """The whole table (``n_positions``, 2,048 for GPT-J 6B: small) on ``device``, made once per device."""
        if self._rope is None or self._rope.device != device:
            self._rope = rope_table(self.config.n_positions, self.config.rotary_dim).to(device)
        return self._rope


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: HF names -> ours
# ---------------------------------------------------------------------------------------------------------------

# HF name -> (our name, part): part i of 3 is a row block of the fused wqkv (q, k, v); None is the whole tensor.
_TOP_LEVEL: dict[str, tuple[str, int | None]] = {
    "transformer.wte.weight": ("tok_embeddings.weight", None),
    "transformer.ln_f.weight": ("norm.weight", None),
    "transformer.ln_f.bias": ("norm.bias", None),
    "lm_head.weight": ("output.weight", None),
    "lm_head.bias": ("output.bias", None),
}
_IN_LAYER: dict[str, tuple[str, int | None]] = {
    "ln_1.weight": ("norm.weight", None),
    "ln_1.bias": ("norm.bias", None),
    "attn.q_proj.weight": ("attention.wqkv.weight", 0),
    "attn.k_proj.weight": ("attention.wqkv.weight", 1),
    "attn.v_proj.weight": ("attention.wqkv.weight", 2),
    "attn.out_proj.weight": ("attention.wo.weight", None),
    "mlp.fc_in.weight": ("feed_forward.w1.weight", None),
    "mlp.fc_in.bias": ("feed_forward.w1.bias", None),
    "mlp.fc_out.weight": ("feed_forward.w2.weight", None),
    "mlp.fc_out.bias": ("feed_forward.w2.bias", None),
}
# Buffers, not weights, that older transformers saved with GPT-J checkpoints (the causal mask, its fill value, the
# rotary table); we rebuild all of them.
_IGNORED = re.compile(r"transformer\.h\.\d+\.attn\.(bias|masked_bias|embed_positions)")


def hf_names(config: GptjConfig) -> HfNames:
    """Every HF tensor name of the architecture -> (our parameter, part of wqkv or None)."""
    return layered_names(_TOP_LEVEL, "transformer.h.", _IN_LAYER, config.n_layer)


def _part_of(param: Tensor, part: int | None) -> Tensor:
    """The rows of ``param`` that one HF tensor fills: q, k or v of wqkv (equal widths), or all of it."""
    return param if part is None else param.chunk(3)[part]


def hf_config(config: GptjConfig, **extra: Any) -> Any:  # transformers.GPTJConfig, imported only when asked for
    """Hugging Face's ``GPTJConfig`` of one of our architectures (``extra``: HF-only settings such as
    ``attn_implementation`` or token ids): the parity tests and the bench's baseline build HF models from it."""
    import transformers

    return transformers.GPTJConfig(
        vocab_size=config.vocab_size, n_positions=config.n_positions, n_embd=config.n_embd, n_layer=config.n_layer,
        n_head=config.n_head, rotary_dim=config.rotary_dim, n_inner=config.n_inner,
        layer_norm_epsilon=config.layer_norm_epsilon, activation_function="gelu_new", **extra)


def hf_state(model: Gptj) -> dict[str, Tensor]:
    """Our tensors under HF ``GPTJForCausalLM``'s names (views; wqkv split in three), the inverse of
    ``load_state``: the bench's HF baseline runs the very weights our random-weight runs draw."""
    params = dict(model.named_parameters())
    return {hf: _part_of(params[ours], part) for hf, (ours, part) in hf_names(model.config).items() if ours in params}


def load_state(model: Gptj, tensors: Mapping[str, Tensor] | Iterator[tuple[str, Tensor]], source: str) -> Gptj:
    """Copy HF-named (or our-named) tensors into ``model``, every parameter filled
    (``code.llm.checkpoint.load_named``: one error lists all that is missing, unexpected or wrongly shaped)."""
    return load_named(model, hf_names(model.config), _part_of, tensors, _IGNORED,
                      f"checkpoint {source} does not match GPT-J config {model.config}:")


def empty_model(config: GptjConfig, dtype: torch.dtype = torch.float32, device: Device = "cpu") -> Gptj:
    """A model with uninitialised storage in ``dtype`` on ``device`` (no init paid)."""
    return empty_module(lambda: Gptj(config), dtype, device)


def load_checkpoint(
    path_or_state_dict: str | Path | Mapping[str, Tensor],
    config: GptjConfig | None = None,
    dtype: torch.dtype = torch.float32,
    device: Device = "cpu",
) -> Gptj:
    """A ``Gptj`` in eval mode holding exactly the checkpoint's weights, in ``dtype`` on ``device``.

    Takes an HF folder (``config.json`` + ``model.safetensors[.index.json]`` or ``pytorch_model.bin[.index.json]``),
    a single weights file, or a state dict. ``config`` defaults to the folder's ``config.json``; a file or state dict
    needs it given.
    """
    if isinstance(path_or_state_dict, Mapping):
        if config is None:
            raise ValueError("loading a state dict needs a config")
        return load_state(empty_model(config, dtype, device), path_or_state_dict, "state dict")
    path = Path(path_or_state_dict)
    if config is None:
        config = GptjConfig.from_hf(read_config(path))
    tensors = checkpoint_tensors(path)  # before the model: a wrong path fails before any allocation
    return load_state(empty_model(config, dtype, device), tensors, str(path))


def random_weights(
    config: GptjConfig,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: Device = "cpu",
    draw_on_device: bool = False,
) -> Gptj:
    """A model whose weights depend only on (config, seed): HF's init (N(0, 0.02) matrices and embeddings, zero
    biases, LayerNorm ones/zeros), drawn in float32 on the CPU from a private generator, one tensor at a time, then
    cast and copied to ``device``: the same weights on every machine, the global RNG untouched.

    ``draw_on_device`` draws on ``device`` instead (a CUDA generator): GPT-J 6B's 6 billion draws take seconds
    there instead of minutes on a few CPU cores, but the values then depend on the device's generator. For speed
    measurements, where the values do not matter."""
    return random_module(lambda: Gptj(config), seed, dtype, device, draw_on_device)
