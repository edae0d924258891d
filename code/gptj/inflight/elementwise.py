"""The elementwise work between a layer's GEMMs, as four functions that ``torch.compile`` fuses on the GPU.

Between its two GEMMs a GPT-J layer does LayerNorm, rotary embedding, GELU, a concatenation, the residual add and,
with FP8 GEMMs, two quantizations. Written as separate torch operations that is about twenty kernels a layer, each
reading and writing whole activations; here each group that sits between two GEMMs (or a GEMM and attention) is one
function, which Inductor compiles into one or two kernels for the decode step:

- ``norm_in``: LayerNorm, then the first GEMM's input;
- ``residual_norm_in``: the previous layer's output + its residual, then ``norm_in`` (the new residual too);
- ``rotary_qkv``: q, k, v out of the first GEMM's output, q and k rotated;
- ``mlp_in``: ``[attention output, gelu(hidden)]``, the second GEMM's input.

"The GEMM's input" (``code.numerics.fp8.gemm_input``, shared with Llama) is the 16-bit tensor itself, or with FP8
GEMMs its e4m3 quantization (``x / scale``, saturated, as ``code.numerics.fp8.quantize``) with rows padded to a
multiple of ``align`` (cuBLASLt's FP8 kernels take row counts in multiples of 16); a GEMM's output then has padded
rows, which the next function drops.

The plain functions are the definition and run on the CPU; ``Elementwise`` says which run compiled. Scales are 0-d
tensors, not floats, so the 28 layers' different scales share one compiled kernel instead of recompiling per
value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from code.gptj.inflight import prefill_kernels
from code.gptj.model import apply_rotary
from code.numerics.fp8 import gemm_input


def norm_in(x: Tensor, weight: Tensor, bias: Tensor, eps: float, scale: Tensor | None, align: int) -> Tensor:
    return gemm_input(F.layer_norm(x, (x.shape[-1],), weight, bias, eps), scale, align)


def residual_norm_in(out: Tensor, x: Tensor, weight: Tensor, bias: Tensor, eps: float, scale: Tensor | None,
                     align: int) -> tuple[Tensor, Tensor]:
    """``x + out`` (``out``'s padding rows dropped) and its ``norm_in``."""
    x = out[: x.shape[0]] + x
    return x, norm_in(x, weight, bias, eps, scale, align)


def rotary_qkv(fused: Tensor, rope: Tensor, tokens: int, heads: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k (rotated) and v ``[tokens, heads, head_dim]`` from the first GEMM's output ``[tokens (+pad), ...]``."""
    q, k, v = fused[:tokens, : 3 * heads * head_dim].view(tokens, 3, heads, head_dim).unbind(1)
    q = apply_rotary(q[:, None], rope)[:, 0]
    k = apply_rotary(k[:, None], rope)[:, 0]
    return q, k, v.contiguous()


def mlp_in(fused: Tensor, attended: Tensor, scale: Tensor | None, align: int) -> Tensor:
    """``[attention output, gelu(hidden)]`` as the second GEMM's input; ``attended [tokens, heads, head_dim]``."""
    tokens = attended.shape[0]
    width = attended.shape[1] * attended.shape[2]
    hidden = F.gelu(fused[:tokens, 3 * width :], approximate="tanh")
    return gemm_input(torch.cat((attended.reshape(tokens, width), hidden), dim=1), scale, align)


@dataclass(frozen=True)
class ElementwiseFunctions:
    norm_in: Callable
    residual_norm_in: Callable
    rotary_qkv: Callable
    mlp_in: Callable


class Elementwise:
    """The four functions for one model: ``decode`` for the decode step, ``prefill`` for prompt passes.

    With ``compiled`` (CUDA) the decode step's functions are compiled for its one static shape (``slots x
    beams`` rows), which Inductor turns into fused kernels with constant sizes; prompt passes change length every
    time, and Inductor's kernels for symbolic sizes are slower than the plain torch operations there, so prompt
    passes run the plain functions' arithmetic as hand-written Triton passes on a GPU (``prefill_kernels``: rotary
    and the second GEMM's input; LayerNorm is torch's, each quantization one pass). Without ``compiled`` both run
    the plain functions: the baseline. One instance per model: every layer and step reuses its compilations."""

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        wrap: Callable[[Callable], Callable] = (
            (lambda fn: torch.compile(fn, dynamic=False, fullgraph=True)) if compiled else (lambda fn: fn))
        self.decode = ElementwiseFunctions(*(wrap(fn) for fn in (norm_in, residual_norm_in, rotary_qkv, mlp_in)))
        self.prefill = (ElementwiseFunctions(norm_in, residual_norm_in, rotary_qkv_prefill, mlp_in_prefill)
                        if compiled else ElementwiseFunctions(norm_in, residual_norm_in, rotary_qkv, mlp_in))


def rotary_qkv_prefill(fused: Tensor, rope: Tensor, tokens: int, heads: int, head_dim: int
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """``rotary_qkv`` of a prompt pass: one Triton pass on a GPU (``prefill_kernels``), the plain function
    elsewhere."""
    if prefill_kernels.available(fused, heads, head_dim):
        return prefill_kernels.rotary_qkv(fused, rope, tokens, heads, head_dim)
    return rotary_qkv(fused, rope, tokens, heads, head_dim)


def mlp_in_prefill(fused: Tensor, attended: Tensor, scale: Tensor | None, align: int) -> Tensor:
    """``mlp_in`` of a prompt pass: one Triton pass on a GPU (``prefill_kernels``), the plain function elsewhere."""
    if prefill_kernels.available(fused, attended.shape[1], attended.shape[2]):
        return prefill_kernels.mlp_in(fused, attended, scale, align)
    return mlp_in(fused, attended, scale, align)
