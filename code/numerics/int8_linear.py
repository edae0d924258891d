"""The INT8 linear layer: weights quantized per output channel once, inputs with a static calibrated scale, and the
GEMM with its epilogue (``code.numerics.int8`` has the arithmetic, ``code.numerics.int8_gemm`` the CUDA kernel).

Its own module because it joins the two: the arithmetic imports no GPU code (CPU installs use it without triton),
and the kernel module imports the arithmetic.
"""

from __future__ import annotations

import torch
from torch import Tensor

from code.numerics.int8 import GEMM_METHODS, MAX_K, quantize_fast, quantize_weight, reference_gemm, scale_from_amax


class Int8Linear:
    """``y = epilogue(x @ W.T)`` with int8 operands, int32 accumulation and a 16-bit or int8 output.

    The epilogue dequantizes (``act_scale * w_scale[n]``, one float32 multiplier per column: ``dequant_scale``), adds
    the bias, applies tanh GELU on request and writes 16 bits or int8 with the consumer's static scale. On CUDA one
    Triton kernel (``int8_gemm.int8_gemm``; ``method="int_mm"``: cuBLAS's int8 GEMM, then the epilogue as a second
    kernel); elsewhere ``reference_gemm``, the same arithmetic, so CPU tests check the scales, not the hardware.
    """

    def __init__(self, weight: Tensor, act_amax: float, out_dtype: torch.dtype, method: str = "triton") -> None:
        if method not in GEMM_METHODS:
            raise ValueError(f"method={method!r}: expected one of {', '.join(GEMM_METHODS)}")
        self.weight_q, self.weight_scale = quantize_weight(weight)
        self.act_scale_value = scale_from_amax(act_amax)
        act_scale = torch.tensor(self.act_scale_value, dtype=torch.float32, device=weight.device)
        self.dequant_scale = (self.weight_scale * act_scale).contiguous()
        self.out_dtype = out_dtype
        self.method = method
        self.out_features, self.in_features = weight.shape
        if self.in_features > MAX_K:
            raise ValueError(f"K={self.in_features} overflows the int32 accumulator (at most {MAX_K})")

    def quantize_input(self, x: Tensor) -> Tensor:
        return quantize_fast(x, self.act_scale_value)

    def __call__(
        self, xq: Tensor, bias: Tensor | None = None, *, gelu: bool = False, out_scale: float | None = None
    ) -> Tensor:
        """``xq``: int8 ``[M, K]`` quantized with this layer's activation scale; ``bias`` (16-bit ``[N]``) and GELU
        are applied in the epilogue; ``out_scale``: the output is int8 quantized with it (the next GEMM's input
        scale), else ``out_dtype``."""
        if xq.is_cuda:
            from code.numerics.int8_gemm import int8_gemm

            return int8_gemm(xq, self.weight_q, self.dequant_scale, bias, gelu=gelu, out_scale=out_scale,
                             out_dtype=self.out_dtype, method=self.method)
        return reference_gemm(xq, self.weight_q, self.dequant_scale, bias, gelu=gelu, out_scale=out_scale,
                              out_dtype=self.out_dtype)


__all__ = ["Int8Linear"]
