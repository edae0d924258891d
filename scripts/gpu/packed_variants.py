"""The GPU checks' variants of BERT's packed model, written as keyword arguments, as the packed model takes them.

``check_bert_packed.py`` and ``check_cross_compile.py`` list their variants as short keyword sets (``amax``,
``eight_bit="int8"``, ``fast_accum=True``, ``attention="flash"`` and the packed path's other switches by name);
``packed_bert`` turns one into the engine's spec (``code.bert.packed.spec.PackedKernels``, which checks it) and the
packed model over it.
"""

from __future__ import annotations

from typing import Any

import torch

from code.bert.model import BertQA
from code.bert.packed.packed_model import PackedBert
from code.bert.packed.spec import PackedKernels


def packed_bert(model: BertQA, dtype: torch.dtype = torch.float16, device: str = "cuda",
                amax: dict[str, float] | None = None, eight_bit: str = "fp8", fast_accum: bool = False,
                attention: str = "triton", **switches: Any) -> PackedBert:
    """The packed model of one variant: an 8-bit engine in ``eight_bit`` where ``amax`` is given, else a 16-bit one
    in ``dtype``; ``switches``: the spec's other fields (``fp8_gemms``, ``gelu_in_gemm``, ``fp8_residual``, ...)."""
    precision = eight_bit if amax is not None else ("bf16" if dtype == torch.bfloat16 else "fp16")
    kernels = PackedKernels(precision=precision, fp8_fast_accum=fast_accum, attention_kernel=attention, **switches)
    return PackedBert(model, dtype, device, amax=amax, kernels=kernels)
