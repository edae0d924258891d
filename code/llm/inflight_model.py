"""What GPT-J's and Llama 3.1's in-flight models (``code/gptj/inflight/layers.py``, ``code/llama31/inflight_model.py``)
share: their dtype and device, and the switch of every layer's GEMMs to FP8.

A layer holds its GEMMs' 16-bit weights as attributes and, once ``use_fp8_gemms`` ran, their FP8 replacements in
``fp8`` (a dict keyed by the GEMM's ``Amax`` series); the model names the pairs in ``GEMM_WEIGHTS``. One switch
for both models keeps their FP8 GEMMs alike: the same quantized weights, the same freeing of the 16-bit ones, the
same fast-accumulation rule.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from code.llm.amax import LayerAmax
from code.numerics.fp8 import Fp8Linear

FP8_ROW_ALIGN = 16  # cuBLASLt's FP8 GEMMs take row counts in multiples of 16: their inputs' rows are padded to it


class InflightBase:
    """Base of an in-flight model: ``embedding`` sets its dtype and device; ``layers`` each hold ``fp8`` (None while
    the GEMMs are 16-bit) and the 16-bit weights ``GEMM_WEIGHTS`` names."""

    GEMM_WEIGHTS: ClassVar[dict[str, str]]  # each GEMM's Amax series -> its layer's 16-bit weight attribute
    embedding: Tensor
    layers: list[Any]

    @property
    def dtype(self) -> torch.dtype:
        return self.embedding.dtype

    @property
    def device(self) -> torch.device:
        return self.embedding.device

    @property
    def fp8_row_align(self) -> int:
        """What an FP8 GEMM's input rows are padded to a multiple of: cuBLASLt's rule on CUDA, none on the CPU
        (where ``Fp8Linear`` emulates the GEMM)."""
        return FP8_ROW_ALIGN if self.device.type == "cuda" else 1

    @property
    def uses_fp8_gemms(self) -> bool:
        return self.layers[0].fp8 is not None

    @torch.no_grad()
    def use_fp8_gemms(self, amax: LayerAmax, fast_accum: bool = False) -> None:
        """Switch every GEMM of every layer to FP8 with activation scales from ``amax``; frees the 16-bit weights.
        ``fast_accum``: see ``set_fp8_fast_accum``."""
        for i, layer in enumerate(self.layers):
            layer.fp8 = {name: Fp8Linear(getattr(layer, weight), getattr(amax, name)[i], self.dtype)
                         for name, weight in self.GEMM_WEIGHTS.items()}
            for weight in self.GEMM_WEIGHTS.values():
                setattr(layer, weight, torch.empty(0, dtype=self.dtype, device=self.device))
        self.set_fp8_fast_accum(fast_accum)

    def set_fp8_fast_accum(self, on: bool) -> None:
        """cuBLASLt's fast accumulation in every FP8 GEMM (on: the tensor cores' own accumulator throughout, which
        is faster and rounds more; off: partial sums promoted to float32). An engine's CUDA graph keeps the choice
        it was captured with, so set it before building the engine."""
        if not self.uses_fp8_gemms:
            raise ValueError("fast accumulation applies to FP8 GEMMs: call use_fp8_gemms first")
        for layer in self.layers:
            for gemm in layer.fp8.values():
                gemm.fast_accum = on
