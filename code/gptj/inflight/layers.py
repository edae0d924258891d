"""GPT-J's weights regrouped for the in-flight engine, and its two forwards: prefill and decode.

GPT-J's block is ``x + attention(ln(x)) + mlp(ln(x))``: attention and MLP read the same LayerNorm output and their
results are summed. So per layer:

- ``w_in = [wqkv; w1]``: one GEMM makes q, k, v and the MLP's hidden pre-activation from ``ln(x)``;
- ``w_out = [wo | w2]``: one GEMM of ``[attention output, gelu(hidden)]`` gives ``wo(attn) + w2(gelu) `` (+ b2),

two GEMMs a layer instead of four, each larger (better tile use, half the launches). Rotary embedding and the
tanh GELU are those of ``code/gptj/model.py`` (``apply_rotary``, ``gelu_new``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from code.gptj.inflight.attention import decode_attention, prefill_attention
from code.gptj.inflight.kv_cache import KVCache
from code.gptj.model import Gptj, GptjConfig, apply_rotary, rope_table


@dataclass
class LayerWeights:
    norm_weight: Tensor
    norm_bias: Tensor
    w_in: Tensor  # [3 * n_embd + n_inner, n_embd]
    b_in: Tensor  # zeros for q, k, v; then w1's bias
    w_out: Tensor  # [n_embd, n_embd + n_inner]
    b_out: Tensor  # w2's bias


class InflightModel:
    """The model as the engine runs it. ``from_model`` takes a ``Gptj`` (on the target device and dtype)."""

    def __init__(self, config: GptjConfig, embedding: Tensor, layers: list[LayerWeights], norm_weight: Tensor,
                 norm_bias: Tensor, head_weight: Tensor, head_bias: Tensor) -> None:
        self.config = config
        self.embedding = embedding
        self.layers = layers
        self.norm_weight, self.norm_bias = norm_weight, norm_bias
        self.head_weight, self.head_bias = head_weight, head_bias
        self.rope = rope_table(config.n_positions, config.rotary_dim).to(embedding.device)

    @property
    def dtype(self) -> torch.dtype:
        return self.embedding.dtype

    @property
    def device(self) -> torch.device:
        return self.embedding.device

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

    def _qkv(self, fused: Tensor, rope: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k (rotated) and v ``[tokens, heads, head_dim]`` from the first GEMM's output."""
        cfg = self.config
        tokens = fused.shape[0]
        q, k, v = fused[:, : 3 * cfg.n_embd].view(tokens, 3, cfg.n_head, cfg.head_dim).unbind(1)
        q = apply_rotary(q[:, None], rope)[:, 0]
        k = apply_rotary(k[:, None], rope)[:, 0]
        return q, k, v.contiguous()

    def _mlp_and_output(self, layer: LayerWeights, fused: Tensor, attended: Tensor, x: Tensor) -> Tensor:
        hidden = F.gelu(fused[:, 3 * self.config.n_embd :], approximate="tanh")
        both = torch.cat((attended.reshape(x.shape), hidden), dim=1)
        return F.linear(both, layer.w_out, layer.b_out) + x

    def _logits(self, x: Tensor) -> Tensor:
        x = F.layer_norm(x, (self.config.n_embd,), self.norm_weight, self.norm_bias, self.config.layer_norm_epsilon)
        return F.linear(x, self.head_weight, self.head_bias).float()

    def _norm(self, layer: LayerWeights, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.config.n_embd,), layer.norm_weight, layer.norm_bias,
                            self.config.layer_norm_epsilon)

    @torch.inference_mode()
    def prefill(self, prompts: list[Tensor], slots: list[int], cache: KVCache) -> Tensor:
        """Run whole prompts (int64 on the device), write their keys/values to the slots' pages; float32 logits
        ``[prompts, vocab]`` of each prompt's last token."""
        lengths = [len(p) for p in prompts]
        tokens = torch.cat(prompts)
        positions = torch.cat([torch.arange(n) for n in lengths]).to(self.device)
        cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                                  device=self.device)
        pages, offsets = cache.prompt_write_index(slots, lengths)
        rope = self._rope(positions)
        x = F.embedding(tokens, self.embedding)
        for i, layer in enumerate(self.layers):
            fused = F.linear(self._norm(layer, x), layer.w_in, layer.b_in)
            q, k, v = self._qkv(fused, rope)
            cache.prompt_k[i][pages, offsets] = k
            cache.prompt_v[i][pages, offsets] = v
            attended = prefill_attention(q, k, v, lengths, cu_seqlens)
            x = self._mlp_and_output(layer, fused, attended, x)
        return self._logits(x[cu_seqlens[1:].long() - 1])

    def decode(self, tokens: Tensor, cache: KVCache, ancestry: Tensor, gen_count: Tensor) -> Tensor:
        """One token per beam row (``tokens [slots * beams]``), the ``gen_count[s]``-th generated token of slot s;
        float32 logits ``[slots * beams, vocab]``. No host synchronisation: it is captured in a CUDA graph."""
        slots, beams, max_new = ancestry.shape
        column = (gen_count - 1).clamp(min=0)
        positions = (cache.prompt_lengths.long() + column)[:, None].expand(-1, beams).reshape(-1)
        rows = torch.arange(slots * beams, device=tokens.device)
        columns = column[:, None].expand(-1, beams).reshape(-1)
        rope = self._rope(positions)
        x = F.embedding(tokens, self.embedding)
        for i, layer in enumerate(self.layers):
            fused = F.linear(self._norm(layer, x), layer.w_in, layer.b_in)
            q, k, v = self._qkv(fused, rope)
            cache.gen_k[i].view(slots * beams, max_new, *k.shape[1:])[rows, columns] = k
            cache.gen_v[i].view(slots * beams, max_new, *v.shape[1:])[rows, columns] = v
            attended = decode_attention(q, cache, i, ancestry, gen_count)
            x = self._mlp_and_output(layer, fused, attended, x)
        return self._logits(x)
