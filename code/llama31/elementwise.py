"""The elementwise work between a Llama layer's GEMMs, as four functions: compiled for the decode step, hand-written
Triton passes for prompt passes.

Between its four GEMMs a Llama layer does two RMSNorms, rotate-half RoPE on q and k, the SwiGLU product, two
residual adds and, with FP8 GEMMs, four quantizations. As separate torch operations that is some twenty kernels a
layer, each reading and writing whole activations (about 140 ms of a 305 ms prefill pass of 15,386 tokens on an
H200, as much as the FP8 GEMMs); here each group between two GEMMs (or a GEMM and attention) is one function:

- ``norm_in``: RMSNorm, then the next GEMM's input (the first layer's qkv GEMM);
- ``residual_norm_in``: the residual stream + a GEMM's output, then ``norm_in`` (the new residual too): after the
  attention-output GEMM (then the gate/up GEMM's input) and after the down GEMM (the next layer's qkv input);
- ``rotary_qk``: q and k rotated, v contiguous, out of the qkv GEMM's output;
- ``mlp_in``: ``silu(gate) * up``, the down GEMM's input.

"The GEMM's input" is ``code.numerics.fp8.gemm_input``: the 16-bit tensor itself, or with FP8 GEMMs its e4m3
quantization with rows padded to a multiple of ``align``; a GEMM's output then has padded rows, which the next
function drops. The plain functions are the definition (``code/llama31/model.py``'s arithmetic, which is HF's) and
run on the CPU; ``Elementwise`` says which run compiled. Scales are 0-d tensors, not floats, so the layers'
different scales share one compiled kernel instead of recompiling per value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from code.llama31 import prefill_kernels
from code.llama31.model import apply_rotary
from code.numerics.fp8 import gemm_input


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm as ``code.llama31.model.RMSNorm`` (HF's): the variance in float32, cast back before the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def norm_in(x: Tensor, weight: Tensor, eps: float, scale: Tensor | None, align: int) -> Tensor:
    """``rms_norm(x)`` as the next GEMM takes it (``gemm_input``)."""
    return gemm_input(rms_norm(x, weight, eps), scale, align)


def residual_norm_in(out: Tensor, x: Tensor, weight: Tensor, eps: float, scale: Tensor | None,
                     align: int) -> tuple[Tensor, Tensor]:
    """``x + out`` (``out``'s padding rows dropped) and its ``norm_in``."""
    x = x + out[: x.shape[0]]
    return x, norm_in(x, weight, eps, scale, align)


def rotary_qk(fused: Tensor, rope: Tensor, tokens: int, heads: int, kv_heads: int, head_dim: int
              ) -> tuple[Tensor, Tensor, Tensor]:
    """q ``[tokens, heads, head_dim]``, k and v ``[tokens, kv_heads, head_dim]`` (q and k rotated, v contiguous)
    from the qkv GEMM's output ``[tokens (+pad), (heads + 2 kv_heads) head_dim]``; ``rope [tokens, 1, head_dim/2,
    2]`` (cos, sin) in the model's dtype, as ``InflightLlama._rope`` gives it."""
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    q, k, v = fused[:tokens].split((q_width, kv_width, kv_width), dim=-1)
    q = apply_rotary(q.view(tokens, heads, head_dim), rope)
    k = apply_rotary(k.view(tokens, kv_heads, head_dim), rope)
    return q, k, v.reshape(tokens, kv_heads, head_dim).contiguous()


def mlp_in(fused: Tensor, tokens: int, scale: Tensor | None, align: int) -> Tensor:
    """``silu(gate) * up`` as the down GEMM takes it, from the gate/up GEMM's output ``[tokens (+pad), 2 x
    intermediate]`` (the gate's columns first)."""
    gate, up = fused[:tokens].chunk(2, dim=-1)
    return gemm_input(F.silu(gate) * up, scale, align)


@dataclass(frozen=True)
class ElementwiseFunctions:
    norm_in: Callable
    residual_norm_in: Callable
    rotary_qk: Callable
    mlp_in: Callable


class Elementwise:
    """The four functions for one model: ``decode`` for the decode step, ``prefill`` for prompt passes (GPT-J's
    design: ``code/gptj/inflight/elementwise.py``).

    With ``compiled`` (CUDA) the decode step's functions are compiled for its one static shape (``slots`` rows),
    which Inductor turns into fused kernels with constant sizes; they are compiled on the engine's warm-up steps,
    before its CUDA graph is captured. Prompt passes change length every time, and Inductor's kernels for symbolic
    sizes are slower than hand-written ones there, so prompt passes run the plain functions' arithmetic as Triton
    passes on a GPU (``prefill_kernels``: one pass over memory each). Without ``compiled`` both run the plain
    functions: the baseline. One instance per model: every layer and step reuses its compilations."""

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        # Inductor keeps a fused kernel's intermediates in float32 unless told to round them where eager torch
        # does: rounded, the decode step gives the plain functions' results (bit for bit on the CPU), not ones a
        # bf16 unit apart in a quarter of the elements
        options = {"emulate_precision_casts": True}
        wrap: Callable[[Callable], Callable] = (
            (lambda fn: torch.compile(fn, dynamic=False, fullgraph=True, options=options)) if compiled
            else (lambda fn: fn))
        self.decode = ElementwiseFunctions(*(wrap(fn) for fn in (norm_in, residual_norm_in, rotary_qk, mlp_in)))
        self.prefill = (ElementwiseFunctions(norm_in_prefill, residual_norm_in_prefill, rotary_qk_prefill,
                                             mlp_in_prefill)
                        if compiled else ElementwiseFunctions(norm_in, residual_norm_in, rotary_qk, mlp_in))


def norm_in_prefill(x: Tensor, weight: Tensor, eps: float, scale: Tensor | None, align: int) -> Tensor:
    """``norm_in`` of a prompt pass: one Triton pass on a GPU (``prefill_kernels``), the plain function elsewhere."""
    if prefill_kernels.available_norm(x, weight):
        return prefill_kernels.norm_in(x, weight, eps, scale, align)
    return norm_in(x, weight, eps, scale, align)


def residual_norm_in_prefill(out: Tensor, x: Tensor, weight: Tensor, eps: float, scale: Tensor | None,
                             align: int) -> tuple[Tensor, Tensor]:
    """``residual_norm_in`` of a prompt pass: one Triton pass on a GPU, the plain function elsewhere."""
    if prefill_kernels.available_norm(x, weight) and prefill_kernels.available(out) and out.dtype == x.dtype:
        return prefill_kernels.residual_norm_in(out, x, weight, eps, scale, align)
    return residual_norm_in(out, x, weight, eps, scale, align)


def rotary_qk_prefill(fused: Tensor, rope: Tensor, tokens: int, heads: int, kv_heads: int, head_dim: int
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """``rotary_qk`` of a prompt pass: one Triton pass on a GPU, the plain function elsewhere."""
    if prefill_kernels.available(fused, head_dim):
        return prefill_kernels.rotary_qk(fused, rope, tokens, heads, kv_heads, head_dim)
    return rotary_qk(fused, rope, tokens, heads, kv_heads, head_dim)


def mlp_in_prefill(fused: Tensor, tokens: int, scale: Tensor | None, align: int) -> Tensor:
    """``mlp_in`` of a prompt pass: one Triton pass on a GPU, the plain function elsewhere."""
    if prefill_kernels.available(fused):
        return prefill_kernels.mlp_in(fused, tokens, scale, align)
    return mlp_in(fused, tokens, scale, align)
