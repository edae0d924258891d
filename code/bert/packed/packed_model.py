"""BERT-large over a packed ``[T]`` token stream: the encoder of ``code.bert.model.BertQA`` without padding.

Same weights and arithmetic as ``BertQA`` (post-LN, erf GELU, fused q/k/v), but every GEMM runs over the batch's
real tokens only and attention is varlen (each sequence attends to itself, located by ``cu_seqlens``). Biases of the
GEMMs that feed a fused kernel are added in that kernel (one pass) instead of in the GEMM.

Two sets of ops with one interface: ``kernels.TritonOps`` on CUDA (imported only there) and ``TorchOps`` here, plain
torch in float32, which is both the CPU fallback that tests compare against the eager model and the reference the
GPU check compares the kernels against. Precision: 16-bit activations with 16-bit GEMMs, or 8-bit GEMMs (``amax``:
calibrated input magnitudes per GEMM; ``eight_bit``: FP8 e4m3 or INT8, ``code.numerics.eight_bit``) with 16-bit
activations between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from code.bert.model import BertQA
from code.bert.packed.layernorm_args import check_ln_args
from code.bert.packed.packing import layout_words, pack_into
from code.bert.packed.spec import GEMM_INPUTS, PackedKernels
from code.numerics import eight_bit
from code.numerics.eight_bit import FP8, EightBitFormat, Linear8, eight_bit_format
from code.numerics.fp8 import E4M3, dequantize, quantize, scale_from_amax
from code.numerics.int8_linear import Int8Linear

# The calibration points: the input of each 8-bit GEMM of a layer (GEMM_INPUTS), and one more per layer: the
# attention's input, the QKV GEMM's output with its bias (its e4m3 scale with fp8_attention).
ATTENTION_INPUT = "attn"


def calibration_names(num_layers: int) -> list[str]:
    """Names of the activation magnitudes an 8-bit engine (fp8 or int8) stores, e.g. ``3.w1`` (input of layer 3's
    first FFN GEMM) and ``3.attn`` (input of layer 3's attention)."""
    return [f"{i}.{g}" for i in range(num_layers) for g in (*GEMM_INPUTS, ATTENTION_INPUT)]


class TorchOps:
    """Reference implementations of the fused kernels (float32 math, results cast to the activations' dtype).
    ``q_scale``: also return the 8-bit copy, of dtype ``q_dtype`` (e4m3 or int8), quantized with that scale."""

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
        keep_out: bool = True,
        q_dtype: torch.dtype = E4M3,
    ) -> tuple[Tensor | None, Tensor | None]:
        check_ln_args(keep_out, q_scale)
        x = word[ids.long()].float() + token_type[segs.long()].float() + position[pos.long()].float()
        y = F.layer_norm(x, x.shape[-1:], weight.float(), bias.float(), eps)
        return (y.to(word.dtype) if keep_out else None), (eight_bit.quantize(y, q_scale, q_dtype) if q_scale else None)

    @staticmethod
    def add_ln(
        x: Tensor,
        x_bias: Tensor,
        residual: Tensor,
        weight: Tensor,
        bias: Tensor,
        eps: float,
        q_scale: float | None,
        residual_scale: float | None = None,
        keep_out: bool = True,
        q_dtype: torch.dtype = E4M3,
    ) -> tuple[Tensor | None, Tensor | None]:
        """``x + x_bias + residual``, LayerNorm; ``residual_scale``: the residual is e4m3 with that scale."""
        check_ln_args(keep_out, q_scale, residual, residual_scale)
        r = dequantize(residual, residual_scale) if residual_scale else residual.float()
        s = x.float() + x_bias.float() + r
        y = F.layer_norm(s, s.shape[-1:], weight.float(), bias.float(), eps)
        return (y.to(x.dtype) if keep_out else None), (eight_bit.quantize(y, q_scale, q_dtype) if q_scale else None)

    @staticmethod
    def bias_gelu(
        x: Tensor, bias: Tensor, q_scale: float | None, keep_out: bool, q_dtype: torch.dtype = E4M3
    ) -> tuple[Tensor | None, Tensor | None]:
        y = F.gelu(x.float() + bias.float())
        return (y.to(x.dtype) if keep_out else None), (eight_bit.quantize(y, q_scale, q_dtype) if q_scale else None)

    @staticmethod
    def quantize(x: Tensor, scale: float, q_dtype: torch.dtype = E4M3) -> Tensor:
        return eight_bit.quantize(x, scale, q_dtype)


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
    """One encoder layer's weights, laid out for the packed forward: each GEMM 16-bit or 8-bit (``fp8_gemms``, in
    ``fmt``: e4m3 or int8)."""

    def __init__(
        self,
        state: dict[str, Tensor],
        prefix: str,
        dtype: torch.dtype,
        device: torch.device,
        amax: dict[str, float] | None,
        index: int,
        fast_accum: bool,
        fp8_gemms: frozenset[str],
        gelu_in_gemm: bool,
        fp8_attention: bool = False,
        fmt: EightBitFormat = FP8,
    ) -> None:
        def get(name: str) -> Tensor:
            return state[prefix + name].to(device=device, dtype=dtype).contiguous()

        self.bqkv, self.bo, self.b1, self.b2 = (
            get(f"{n}.bias") for n in ("attention.wqkv", "attention.wo", "feed_forward.w1", "feed_forward.w2")
        )
        self.ln1 = (get("attention_norm.weight"), get("attention_norm.bias"))
        self.ln2 = (get("ffn_norm.weight"), get("ffn_norm.bias"))
        weights = {"qkv": "attention.wqkv", "wo": "attention.wo", "w1": "feed_forward.w1", "w2": "feed_forward.w2"}
        self.fmt = fmt
        self.q8: dict[str, Linear8] = {}
        self.w16: dict[str, Tensor] = {}
        for gemm, name in weights.items():
            if amax is not None and gemm in fp8_gemms:
                self.q8[gemm] = fmt.linear(get(f"{name}.weight"), amax[f"{index}.{gemm}"], dtype, fast_accum)
            else:
                self.w16[gemm] = get(f"{name}.weight")
        self.gelu_gemm: Callable[[Tensor | None, Tensor | None], Tensor] | None = (
            self._gelu_gemm() if gelu_in_gemm else None
        )
        self.attn_scale: float | None = None
        self.qkv_e4m3: Callable[[Tensor], Tensor] | None = None
        if fp8_attention:
            self.attn_scale = scale_from_amax(amax[f"{index}.{ATTENTION_INPUT}"])
            self.qkv_e4m3 = self._qkv_e4m3_gemm(self.attn_scale)

    def _qkv_e4m3_gemm(self, out_scale: float) -> Callable[[Tensor], Tensor]:
        """The QKV GEMM of an FP8 attention: e4m3 in, bias in the epilogue, e4m3 out with the attention input's
        static scale (one cuBLASLt call on CUDA; off CUDA the same arithmetic in float32, rounded once, to e4m3)."""
        qkv = self.q8["qkv"]
        if qkv.weight_q.is_cuda:
            from code.bert.packed.cublaslt import LtGemm

            return LtGemm(qkv.weight_q, self.bqkv, weight_scale=qkv.weight_scale, act_scale=qkv.act_scale,
                          out_scale=out_scale, fast_accum=qkv.fast_accum)  # fmt: skip
        weight = dequantize(qkv.weight_q, qkv.weight_scale)
        return lambda xq: quantize(dequantize(xq, qkv.act_scale) @ weight.t() + self.bqkv.float(), out_scale)

    def _gelu_gemm(self) -> Callable[[Tensor | None, Tensor | None], Tensor] | None:
        """``w1`` with bias + GELU (tanh form) in its GEMM's epilogue, as ``(x, xq) -> w2's input``; None where the
        two GEMMs' precisions allow no such GEMM (16-bit ``w1`` feeding an 8-bit ``w2``: no 16-bit GEMM writes 8 bits).

        INT8 ``w1``: its own Triton kernel's epilogue (``Int8Linear``, on every device), writing ``w2``'s int8 input
        or its 16-bit input. FP8 ``w1``: one cuBLASLt call (``cublaslt.fp8_gelu_gemm``) that writes ``w2``'s FP8
        input, or its 16-bit input when ``w2`` runs in 16 bits. 16-bit ``w1`` and ``w2``: torch's
        ``_addmm_activation``, the same epilogue through cuBLASLt (as fast in a full forward as our own call,
        ``cublaslt.LtGemm``, on an H200). Off CUDA, the same arithmetic in float32 (what the tests compare against)."""
        w2_scale = self.input_scale("w2")
        w1 = self.q8.get("w1")
        if isinstance(w1, Int8Linear):
            return lambda x, xq: w1(xq, self.b1, gelu=True, out_scale=w2_scale)
        if w1 is not None:
            if w1.weight_q.is_cuda:
                from code.bert.packed.cublaslt import fp8_gelu_gemm

                fused = fp8_gelu_gemm(w1.weight_q, w1.weight_scale, w1.act_scale, self.b1, w2_scale, w1.fast_accum)
                return lambda x, xq: fused(xq)

            def emulated_fp8(x: Tensor | None, xq: Tensor | None) -> Tensor:
                g = F.gelu(w1(xq).float() + self.b1.float(), approximate="tanh")
                return quantize(g, w2_scale) if w2_scale else g.to(self.b1.dtype)

            return emulated_fp8
        if w2_scale is not None:
            return None
        w1_weight = self.w16["w1"]
        if w1_weight.is_cuda:
            return lambda x, xq: torch._addmm_activation(self.b1, x, w1_weight.t(), use_gelu=True)

        def emulated(x: Tensor | None, xq: Tensor | None) -> Tensor:
            g = F.gelu(F.linear(x.float(), w1_weight.float(), self.b1.float()), approximate="tanh")
            return g.to(w1_weight.dtype)

        return emulated

    def input_scale(self, gemm: str) -> float | None:
        """The static 8-bit scale of ``gemm``'s input, None where that GEMM runs in 16 bits."""
        linear = self.q8.get(gemm)
        return linear.act_scale_value if linear is not None else None

    def matmul(self, gemm: str, x: Tensor | None, xq: Tensor | None, bias: Tensor | None = None) -> Tensor:
        """``x @ W.T (+ bias in the GEMM's epilogue)``: 8-bit from ``xq`` (quantized with ``input_scale``) or 16-bit
        from ``x``."""
        if gemm in self.q8:
            if xq is None:
                raise ValueError(f"GEMM {gemm} runs in {self.fmt.name} but got no {self.fmt.name} input")
            return self.q8[gemm](xq, bias)
        if x is None:
            raise ValueError(f"GEMM {gemm} runs in 16 bits but got only an 8-bit input")
        return F.linear(x, self.w16[gemm], bias)


class PackedBert:
    """The packed encoder + QA head. ``forward`` takes device tensors of one packed batch; see ``run_packed``.

    8-bit engines: ``amax`` (the calibrated magnitude of each ``calibration_names`` point), and the GEMMs' format
    their precision names (``fp8``, e4m3 with per-tensor weight scales and cuBLASLt, or ``int8``, per-channel weight
    scales and our Triton GEMM with the dequantization in its epilogue; ``code.numerics.eight_bit``). Every kernel
    that produces an 8-bit GEMM's input writes it in that format with the input's static scale.

    What runs is the engine's spec, ``kernels`` (``code.bert.packed.spec.PackedKernels``, checked when it was made):
    ``fp8_gemms`` (8-bit engines: the GEMMs of each layer that run in 8 bits), ``attention_kernel`` (triton: ours,
    which also adds the QKV bias and can write the 8-bit input of the output projection; flash: torch's FA2 varlen;
    off CUDA both are per-sequence SDPA, the float32 reference), ``gelu_in_gemm`` (bias + GELU in ``w1``'s GEMM
    epilogue, cuBLASLt's tanh form, instead of a separate erf-GELU kernel; see ``PackedLayer._gelu_gemm``). Off by
    default: the tanh form moves more best answer spans away from float32's than the 99.9% target's 0.1% allows,
    though fewer than the 99% target's 1% (figures: documentation/notes/journal/2026-11-22.md). ``fp8_residual`` (FP8
    engines with
    all four GEMMs in FP8): the residual stream between LayerNorms is kept only as the next GEMM's e4m3 input, so
    each add + LayerNorm reads an 8-bit residual and writes one 8-bit copy instead of a 16-bit one and an 8-bit one
    (the last layer still writes 16 bits for the QA head); rounds the residual to e4m3 48 times per forward.
    ``fp8_attention`` (FP8 engines with ``qkv`` in FP8): the QKV GEMM adds its bias and writes e4m3 with the
    calibrated scale of the attention's input (``{layer}.attn``), and attention reads 8-bit q, k, v and runs q.k on
    FP8 tensor cores (p.v in fp16: the kernel widens v); one more e4m3 rounding per layer. Both are FP8's only: they
    keep e4m3 tensors for FP8 kernels, which an INT8 engine has none of.
    """

    def __init__(
        self,
        model: BertQA,
        dtype: torch.dtype,
        device: str | torch.device,
        amax: dict[str, float] | None = None,
        ops: Any = None,
        kernels: PackedKernels | None = None,
    ) -> None:
        kernels = kernels or PackedKernels()
        self.kernels = kernels
        self.config = config = model.config
        self.device = torch.device(device)
        self.dtype = dtype
        self.quantized = kernels.eight_bit is not None
        self.fmt = eight_bit_format(kernels.eight_bit or "fp8")
        self.q_dtype = self.fmt.dtype
        # The calibration is the engine's data, not a switch: an 8-bit engine has one for every point, a 16-bit
        # engine none.
        if (amax is not None) != self.quantized:
            raise ValueError(f"a {kernels.precision} engine {'needs' if self.quantized else 'takes no'} activation "
                             "magnitudes (amax): pass its calibration with an fp8 or int8 spec only")
        if amax is not None:
            missing = sorted(set(calibration_names(config.num_layers)) - set(amax))
            if missing:
                raise ValueError(f"{kernels.precision} GEMMs need an activation scale for every calibration point; "
                                 f"missing {missing[:4]}...")
        self.fp8_residual = kernels.fp8_residual
        if ops is None:
            if self.device.type == "cuda":
                from code.bert.packed.kernels import TritonOps

                ops = TritonOps
            else:
                ops = TorchOps
        self.ops = ops
        # The spec's kernel on CUDA; elsewhere per-sequence SDPA, the float32 reference that stands in for either.
        self.attention = kernels.attention_kernel if self.device.type == "cuda" else "sdpa"
        self.triton_attention: Callable[..., Tensor] | None = None
        # The Triton kernel's tile shape: None is its default; the runner sets the one tuning chose on this GPU.
        self.attention_config: Any = None
        if self.attention == "triton":
            from code.bert.packed.attention import varlen_attention  # imports triton: CUDA only

            self.triton_attention = varlen_attention
        state = {k: v.detach() for k, v in model.state_dict().items()}

        def get(name: str) -> Tensor:
            return state[name].to(device=self.device, dtype=dtype).contiguous()

        self.word, self.token_type, self.position = (
            get(f"embeddings.{n}.weight") for n in ("word", "token_type", "position")
        )
        self.emb_ln = (get("embeddings.norm.weight"), get("embeddings.norm.bias"))
        self.layers = [
            PackedLayer(state, f"layers.{i}.", dtype, self.device, amax, i, kernels.fp8_fast_accum, kernels.gemms,
                        kernels.gelu_in_gemm, kernels.fp8_attention, self.fmt)
            for i in range(config.num_layers)
        ]
        # The QA head runs in float32: 16-bit logits of magnitude ~10 are off by up to 2**-8 in their last bit, enough
        # to reorder near-tied answer spans, and the head is ~4 kFLOP per token against the encoder's ~600 MFLOP.
        self.qa_w, self.qa_b = (
            state[f"qa_outputs.{n}"].to(device=self.device, dtype=torch.float32).contiguous()
            for n in ("weight", "bias")
        )
        self.scale = 1.0 / math.sqrt(config.head_dim)

    def _qkv_scale(self, layer: int) -> float | None:
        return self.layers[layer].input_scale("qkv") if layer < len(self.layers) else None

    def _attend(
        self,
        layer: PackedLayer,
        x: Tensor | None,
        xq: Tensor | None,
        cu_seqlens: Tensor,
        max_len: int,
        observe: Callable[[Tensor], None] | None = None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """QKV GEMM + attention -> (16-bit ``[T, hidden]`` or None, its 8-bit copy for the output projection or
        None). ``observe`` (calibration) is shown the attention's input, the QKV GEMM's output with its bias."""
        cfg = self.config
        rows, heads = (x if x is not None else xq).shape[0], cfg.num_heads
        wo_scale = layer.input_scale("wo")
        if layer.qkv_e4m3 is not None:
            return self._attend_fp8(layer, xq, cu_seqlens, max_len, wo_scale)
        if self.triton_attention is not None:
            qkv = layer.matmul("qkv", x, xq)  # the bias is added by the attention kernel as it loads q, k, v
            if observe is not None:
                observe(qkv + layer.bqkv)
            a = self.triton_attention(
                qkv, cu_seqlens, max_len, self.scale, heads, qkv_bias=layer.bqkv, out_q_scale=wo_scale,
                config=self.attention_config, out_q_dtype=self.q_dtype,
            )
            return (None, a) if wo_scale else (a, None)
        qkv = layer.matmul("qkv", x, xq, layer.bqkv)
        if observe is not None:
            observe(qkv)
        q, k, v = qkv.view(rows, 3, heads, cfg.head_dim).unbind(1)
        attend = flash_varlen if self.attention == "flash" else sdpa_varlen
        a = attend(q, k, v, cu_seqlens, max_len, self.scale).view(rows, cfg.hidden_size)
        return a, (self.ops.quantize(a, wo_scale, self.q_dtype) if wo_scale else None)

    def _attend_fp8(
        self, layer: PackedLayer, xq: Tensor | None, cu_seqlens: Tensor, max_len: int, wo_scale: float | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """``_attend`` of an FP8 attention: the QKV GEMM writes e4m3 q, k, v (bias included) with the attention
        input's scale; the Triton kernel runs q.k in FP8 and writes ``wo``'s input (e4m3 when ``wo`` runs in FP8).
        Off CUDA: per-sequence SDPA over the dequantized q, k, v, the kernel's arithmetic in float32."""
        if xq is None:
            raise ValueError("fp8_attention's QKV GEMM runs in FP8 but got no FP8 input")
        qkv8, s = layer.qkv_e4m3(xq), layer.attn_scale
        if self.triton_attention is not None:
            a = self.triton_attention(
                qkv8, cu_seqlens, max_len, self.scale, self.config.num_heads, out_q_scale=wo_scale,
                config=self.attention_config, qkv_scales=(s, s, s), fp8_qk_dot=True,
            )  # fmt: skip
            return (None, a) if wo_scale else (a.to(self.dtype), None)  # its 16-bit output is fp16
        rows, cfg = qkv8.shape[0], self.config
        q, k, v = dequantize(qkv8, s).view(rows, 3, cfg.num_heads, cfg.head_dim).unbind(1)
        a = sdpa_varlen(q, k, v, cu_seqlens, max_len, self.scale).view(rows, cfg.hidden_size).to(self.dtype)
        return a, (self.ops.quantize(a, wo_scale) if wo_scale else None)

    def _feed_forward(
        self, layer: PackedLayer, x: Tensor | None, xq: Tensor | None, observe: Any, index: int
    ) -> Tensor:
        """w1 + bias + GELU + w2 (without w2's bias, which the following add+LN adds)."""
        w2_scale = layer.input_scale("w2")
        if layer.gelu_gemm is not None:
            g = layer.gelu_gemm(x, xq)
            if w2_scale is not None:
                return layer.matmul("w2", None, g)
            observe(f"{index}.w2", g)
            return layer.matmul("w2", g, None)
        h = layer.matmul("w1", x, xq)
        g, gq = self.ops.bias_gelu(h, layer.b1, w2_scale, keep_out=w2_scale is None, q_dtype=self.q_dtype)
        if g is not None:
            observe(f"{index}.w2", g)
        return layer.matmul("w2", g, gq)

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

        ``observer`` (16-bit engines only): collects each calibration point's max magnitude (each GEMM's input, each
        attention's input) over the first ``valid_rows`` rows, the calibration an 8-bit engine stores.
        """
        if observer is not None and self.quantized:
            raise ValueError(f"calibrate a 16-bit packed model; an {self.fmt.name} one already uses scales")
        ops, eps = self.ops, self.config.layer_norm_eps
        valid = tokens.shape[0] if valid_rows is None else valid_rows

        def observe(name: str, t: Tensor) -> None:
            if observer is not None:
                amax = t[:valid].abs().amax().float()
                observer[name] = torch.maximum(observer[name], amax) if name in observer else amax

        fp8_residual = self.fp8_residual
        x, xq = ops.embed_ln(
            tokens, segments, positions, self.word, self.token_type, self.position, *self.emb_ln, eps,
            self._qkv_scale(0), keep_out=not fp8_residual, q_dtype=self.q_dtype,
        )  # fmt: skip
        for i, layer in enumerate(self.layers):
            if x is not None:
                observe(f"{i}.qkv", x)
            observe_attention = (lambda t, i=i: observe(f"{i}.{ATTENTION_INPUT}", t)) if observer is not None else None
            a, aq = self._attend(layer, x, xq, cu_seqlens, max_len, observe_attention)
            if a is not None:
                observe(f"{i}.wo", a)
            o = layer.matmul("wo", a, aq)
            x, xq = self._add_ln(o, layer.bo, x, xq, layer.input_scale("qkv"), layer.ln1, layer.input_scale("w1"))
            if x is not None:
                observe(f"{i}.w1", x)
            o = self._feed_forward(layer, x, xq, observe, i)
            x, xq = self._add_ln(o, layer.b2, x, xq, layer.input_scale("w1"), layer.ln2, self._qkv_scale(i + 1))
        return F.linear(x.float(), self.qa_w, self.qa_b)

    def _add_ln(
        self,
        o: Tensor,
        o_bias: Tensor,
        x: Tensor | None,
        xq: Tensor | None,
        xq_scale: float | None,
        norm: tuple[Tensor, Tensor],
        q_scale: float | None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Bias + residual + LayerNorm. The residual is ``x`` (16-bit), or with ``fp8_residual`` its e4m3 copy
        ``xq`` (stored with ``xq_scale``), and then only the e4m3 output is written, except after the last layer
        (no ``q_scale``: the QA head reads 16 bits)."""
        eps = self.config.layer_norm_eps
        if not self.fp8_residual:
            return self.ops.add_ln(o, o_bias, x, *norm, eps, q_scale, q_dtype=self.q_dtype)
        return self.ops.add_ln(o, o_bias, xq, *norm, eps, q_scale, residual_scale=xq_scale, keep_out=not q_scale)

    __call__ = forward


def packed_tensors(
    buffer: np.ndarray, padded_total: int, slots: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Device tensors (tokens, segments, positions, cu_seqlens) of a packed host layout (one copy)."""
    words = layout_words(padded_total, slots)
    flat = torch.from_numpy(buffer[:words]).to(device)
    t = padded_total
    return flat[:t], flat[t : 2 * t], flat[2 * t : 3 * t], flat[3 * t : words]


def upload_packed(
    input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray, device: torch.device | str
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], Any]:
    """Pack one ``[B, S]`` batch into a host buffer of its own and copy it to ``device``: (the forward's four
    inputs, the packing). The plain way, without the backend's pinned buffers (tests, calibration, checks)."""
    from code.bert.packed.packing import PackedBatch

    batch = input_mask.shape[0]
    buffer = np.empty(3 * int(np.count_nonzero(input_mask)) + 3 * 16 + batch + 1, dtype=np.int32)
    packed: PackedBatch = pack_into(buffer, input_ids, segment_ids, input_mask)
    return packed_tensors(buffer, packed.padded_total, packed.slots, torch.device(device)), packed


def run_packed(
    model: PackedBert,
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    input_mask: np.ndarray,
    observer: dict[str, Tensor] | None = None,
) -> tuple[np.ndarray, Any]:
    """Pack one ``[B, S]`` batch, run it and return (float32 ``[T, 2]`` logits on the host, the packing): the plain
    way, without the backend's pinned buffers, streams or graphs (tests, calibration, checks)."""
    tensors, packed = upload_packed(input_ids, segment_ids, input_mask, model.device)
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
    """Max magnitude of every calibration point (``calibration_names``: each 8-bit GEMM's input, each attention's
    input) over the given features, run through the 16-bit packed model: what fp8 and int8 engines both store."""
    packed_model = PackedBert(model, dtype, device)
    observer: dict[str, Tensor] = {}
    for idx in batches(len(input_ids), batch_size):
        seq = int(input_mask[idx].sum(axis=1).max())
        run_packed(packed_model, input_ids[idx, :seq], segment_ids[idx, :seq], input_mask[idx, :seq], observer)
    return {name: float(observer[name]) for name in calibration_names(model.config.num_layers)}
