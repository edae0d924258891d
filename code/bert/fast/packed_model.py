"""BERT-large over a packed ``[T]`` token stream: the encoder of ``code.bert.model.BertQA`` without padding.

Same weights and arithmetic as ``BertQA`` (post-LN, erf GELU, fused q/k/v), but every GEMM runs over the batch's
real tokens only and attention is varlen (each sequence attends to itself, located by ``cu_seqlens``). Biases of the
GEMMs that feed a fused kernel are added in that kernel (one pass) instead of in the GEMM.

Two sets of ops with one interface: ``kernels.TritonOps`` on CUDA (imported only there) and ``TorchOps`` here, plain
torch in float32, which is both the CPU fallback that tests compare against the eager model and the reference the
GPU check compares the kernels against. Precision: 16-bit activations with 16-bit GEMMs, or FP8 GEMMs
(``fp8_amax``: calibrated input magnitudes per GEMM) with 16-bit activations between them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from code.bert.fast.fp8 import Fp8Linear, quantize
from code.bert.fast.packing import layout_words, pack_into
from code.bert.model import BertQA

GEMM_INPUTS = ("qkv", "wo", "w1", "w2")  # calibration points: the input of each FP8 GEMM of a layer


def calibration_names(num_layers: int) -> list[str]:
    """Names of the activation scales an FP8 engine stores, e.g. ``3.w1`` (input of layer 3's first FFN GEMM)."""
    return [f"{i}.{g}" for i in range(num_layers) for g in GEMM_INPUTS]


class TorchOps:
    """Reference implementations of the fused kernels (float32 math, results cast to the activations' dtype)."""

    name = "torch"

    @staticmethod
    def embed_ln(
        ids: Tensor,
        segs: Tensor,
        pos: Tensor,
        word: Tensor,
        token_type: Tensor,
        position: Tensor,
        weight: Tensor,
        bias: Tensor,
        eps: float,
        q_scale: float | None,
    ) -> tuple[Tensor, Tensor | None]:
        x = word[ids.long()].float() + token_type[segs.long()].float() + position[pos.long()].float()
        y = F.layer_norm(x, x.shape[-1:], weight.float(), bias.float(), eps)
        return y.to(word.dtype), (quantize(y, q_scale) if q_scale else None)

    @staticmethod
    def add_ln(
        x: Tensor, x_bias: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float, q_scale: float | None
    ) -> tuple[Tensor, Tensor | None]:
        s = x.float() + x_bias.float() + residual.float()
        y = F.layer_norm(s, s.shape[-1:], weight.float(), bias.float(), eps)
        return y.to(residual.dtype), (quantize(y, q_scale) if q_scale else None)

    @staticmethod
    def bias_gelu(
        x: Tensor, bias: Tensor, q_scale: float | None, keep_out: bool
    ) -> tuple[Tensor | None, Tensor | None]:
        y = F.gelu(x.float() + bias.float())
        return (y.to(x.dtype) if keep_out else None), (quantize(y, q_scale) if q_scale else None)

    @staticmethod
    def quantize(x: Tensor, scale: float) -> Tensor:
        return quantize(x, scale)


def flash_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_len: int, scale: float) -> Tensor:
    """Flash attention over packed sequences (``torch.nn.attention.varlen.varlen_attn`` calls the same op; calling
    it directly skips that custom op's Python dispatch). q/k/v ``[T, heads, head_dim]``; rows past
    ``cu_seqlens[-1]`` belong to no sequence and are left unwritten."""
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, 0.0, False, False, scale=scale
    )[0]


def sdpa_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_len: int, scale: float) -> Tensor:
    """The same, one ``scaled_dot_product_attention`` per sequence (CPU fallback and reference); pad rows zero."""
    out = torch.zeros_like(q)
    cu = cu_seqlens.tolist()
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        if end > start:
            qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))
            out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, scale=scale)[0].transpose(0, 1)
    return out


class PackedLayer:
    """One encoder layer's weights, laid out for the packed forward (16-bit, or FP8 GEMMs)."""

    def __init__(
        self,
        state: dict[str, Tensor],
        prefix: str,
        dtype: torch.dtype,
        device: torch.device,
        amax: dict[str, float] | None,
        index: int,
        fast_accum: bool,
    ) -> None:
        def get(name: str) -> Tensor:
            return state[prefix + name].to(device=device, dtype=dtype).contiguous()

        self.bqkv, self.bo, self.b1, self.b2 = (
            get(f"{n}.bias") for n in ("attention.wqkv", "attention.wo", "feed_forward.w1", "feed_forward.w2")
        )
        self.ln1 = (get("attention_norm.weight"), get("attention_norm.bias"))
        self.ln2 = (get("ffn_norm.weight"), get("ffn_norm.bias"))
        weights = {"qkv": "attention.wqkv", "wo": "attention.wo", "w1": "feed_forward.w1", "w2": "feed_forward.w2"}
        self.fp8 = amax is not None
        if amax is None:
            self.wqkv, self.wo, self.w1, self.w2 = (get(f"{w}.weight") for w in weights.values())
        else:
            self.qkv_fp8, self.wo_fp8, self.w1_fp8, self.w2_fp8 = (
                Fp8Linear(
                    get(f"{w}.weight"), self.bqkv if g == "qkv" else None, amax[f"{index}.{g}"], dtype, fast_accum
                )
                for g, w in weights.items()
            )


class PackedBert:
    """The packed encoder + QA head. ``forward`` takes device tensors of one packed batch; see ``run_packed``."""

    def __init__(
        self,
        model: BertQA,
        dtype: torch.dtype,
        device: str | torch.device,
        fp8_amax: dict[str, float] | None = None,
        ops: Any = None,
        attention: str | None = None,
        fast_accum: bool = False,
    ) -> None:
        self.config = config = model.config
        self.device = torch.device(device)
        self.dtype = dtype
        self.fp8 = fp8_amax is not None
        if self.fp8:
            missing = sorted(set(calibration_names(config.num_layers)) - set(fp8_amax))
            if missing:
                raise ValueError(f"FP8 needs an activation scale for every GEMM input; missing {missing[:4]}...")
        if ops is None:
            if self.device.type == "cuda":
                from code.bert.fast.kernels import TritonOps

                ops = TritonOps
            else:
                ops = TorchOps
        self.ops = ops
        use_flash = (attention or ("flash" if self.device.type == "cuda" else "sdpa")) == "flash"
        self.attention = flash_varlen if use_flash else sdpa_varlen
        state = {k: v.detach() for k, v in model.state_dict().items()}

        def get(name: str) -> Tensor:
            return state[name].to(device=self.device, dtype=dtype).contiguous()

        self.word, self.token_type, self.position = (
            get(f"embeddings.{n}.weight") for n in ("word", "token_type", "position")
        )
        self.emb_ln = (get("embeddings.norm.weight"), get("embeddings.norm.bias"))
        self.layers = [
            PackedLayer(state, f"layers.{i}.", dtype, self.device, fp8_amax, i, fast_accum)
            for i in range(config.num_layers)
        ]
        self.qa_w, self.qa_b = get("qa_outputs.weight"), get("qa_outputs.bias")
        self.scale = 1.0 / math.sqrt(config.head_dim)

    def _act_scale(self, layer: int, gemm: str) -> float | None:
        if not self.fp8 or layer >= len(self.layers):
            return None
        return getattr(self.layers[layer], f"{gemm}_fp8").act_scale_value

    def forward(
        self,
        tokens: Tensor,
        segments: Tensor,
        positions: Tensor,
        cu_seqlens: Tensor,
        max_len: int,
        observer: dict[str, Tensor] | None = None,
        valid_rows: int | None = None,
    ) -> Tensor:
        """Float32 ``[T, 2]`` start/end logits of every packed row (rows past ``cu_seqlens[-1]`` are padding).

        ``observer`` (16-bit engines only): collects each GEMM input's max magnitude over the first ``valid_rows``
        rows, the calibration an FP8 engine stores.
        """
        if observer is not None and self.fp8:
            raise ValueError("calibrate a 16-bit packed model; an FP8 one already uses scales")
        cfg, ops, eps = self.config, self.ops, self.config.layer_norm_eps
        rows, hidden, heads = tokens.shape[0], cfg.hidden_size, cfg.num_heads
        valid = rows if valid_rows is None else valid_rows

        def observe(name: str, t: Tensor) -> None:
            if observer is not None:
                amax = t[:valid].abs().amax().float()
                observer[name] = torch.maximum(observer[name], amax) if name in observer else amax

        x, xq = ops.embed_ln(
            tokens,
            segments,
            positions,
            self.word,
            self.token_type,
            self.position,
            *self.emb_ln,
            eps,
            self._act_scale(0, "qkv"),
        )
        for i, layer in enumerate(self.layers):
            observe(f"{i}.qkv", x)
            qkv = layer.qkv_fp8(xq) if layer.fp8 else F.linear(x, layer.wqkv, layer.bqkv)
            q, k, v = qkv.view(rows, 3, heads, cfg.head_dim).unbind(1)
            a = self.attention(q, k, v, cu_seqlens, max_len, self.scale).view(rows, hidden)
            observe(f"{i}.wo", a)
            o = layer.wo_fp8(ops.quantize(a, layer.wo_fp8.act_scale_value), False) if layer.fp8 else a @ layer.wo.t()
            x, xq = ops.add_ln(o, layer.bo, x, *layer.ln1, eps, self._act_scale(i, "w1"))
            observe(f"{i}.w1", x)
            h = layer.w1_fp8(xq, False) if layer.fp8 else x @ layer.w1.t()
            g, gq = ops.bias_gelu(h, layer.b1, self._act_scale(i, "w2"), keep_out=not layer.fp8)
            if g is not None:
                observe(f"{i}.w2", g)
            o = layer.w2_fp8(gq, False) if layer.fp8 else g @ layer.w2.t()
            x, xq = ops.add_ln(o, layer.b2, x, *layer.ln2, eps, self._act_scale(i + 1, "qkv"))
        return F.linear(x, self.qa_w, self.qa_b).float()

    __call__ = forward


def packed_tensors(
    buffer: np.ndarray, padded_total: int, slots: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Device tensors (tokens, segments, positions, cu_seqlens) of a packed host layout (one copy)."""
    words = layout_words(padded_total, slots)
    flat = torch.from_numpy(buffer[:words]).to(device)
    t = padded_total
    return flat[:t], flat[t : 2 * t], flat[2 * t : 3 * t], flat[3 * t : words]


def run_packed(
    model: PackedBert,
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    input_mask: np.ndarray,
    observer: dict[str, Tensor] | None = None,
) -> tuple[np.ndarray, Any]:
    """Pack one ``[B, S]`` batch, run it and return (float32 ``[T, 2]`` logits on the host, the packing): the plain
    way, without the backend's pinned buffers, streams or graphs (tests, calibration, checks)."""
    from code.bert.fast.packing import PackedBatch

    batch = input_mask.shape[0]
    buffer = np.empty(3 * int(np.count_nonzero(input_mask)) + 3 * 16 + batch + 1, dtype=np.int32)
    packed: PackedBatch = pack_into(buffer, input_ids, segment_ids, input_mask)
    tensors = packed_tensors(buffer, packed.padded_total, packed.slots, model.device)
    logits = model.forward(*tensors, max_len=packed.max_len, observer=observer, valid_rows=packed.total)
    return logits.cpu().numpy(), packed


def batches(count: int, batch_size: int) -> Iterator[np.ndarray]:
    for start in range(0, count, batch_size):
        yield np.arange(start, min(start + batch_size, count))


@torch.inference_mode()
def collect_amax(
    model: BertQA,
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    input_mask: np.ndarray,
    device: str | torch.device,
    dtype: torch.dtype,
    batch_size: int = 32,
) -> dict[str, float]:
    """Max magnitude of every FP8 GEMM's input over the given features, run through the 16-bit packed model."""
    packed_model = PackedBert(model, dtype, device)
    observer: dict[str, Tensor] = {}
    for idx in batches(len(input_ids), batch_size):
        seq = int(input_mask[idx].sum(axis=1).max())
        run_packed(packed_model, input_ids[idx, :seq], segment_ids[idx, :seq], input_mask[idx, :seq], observer)
    return {name: float(observer[name]) for name in calibration_names(model.config.num_layers)}
