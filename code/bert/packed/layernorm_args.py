"""The argument rules of the packed path's LayerNorm ops, shared by both sets of ops (``packed_model.TorchOps``
on the CPU, ``kernels.TritonOps`` on CUDA) so that both refuse the same calls with the same message."""

from __future__ import annotations

from torch import Tensor

from code.numerics.fp8 import E4M3


def check_ln_args(
    keep_out: bool, q_scale: float | None, residual: Tensor | None = None, residual_scale: float | None = None
) -> None:
    """A LayerNorm writes at least one output, and
    an e4m3 residual comes with the scale it was quantized with (a 16-bit one with none)."""
    if not keep_out and not q_scale:
        raise ValueError("keep_out=False needs q_scale: the LayerNorm would write nothing")
    if residual is not None and (residual.dtype == E4M3) != bool(residual_scale):
        raise ValueError(
            f"a {residual.dtype} residual with residual_scale={residual_scale}: an e4m3 residual needs the scale it "
            "was quantized with, a 16-bit one none"
        )
