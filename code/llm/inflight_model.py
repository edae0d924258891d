"""What GPT-J's and Llama 3.1's in-flight models (``code/gptj/inflight/layers.py``, ``code/llama31/inflight_model.py``)
share: their dtype and device, the prompt pass over packed prompts (prefill and calibration), the decode step, and
the switch of every layer's GEMMs to FP8.

A model supplies its layers (``_layers``: every layer over a pass's rows, with the elementwise functions of prompt
passes or of the decode step, ``elementwise``), its decode kernel's launch (``decode_launch``), its RoPE table
lookup (``_rope``) and LM head (``_logits``). A layer holds its GEMMs' 16-bit weights as attributes and, once
``use_fp8_gemms`` ran, their FP8 replacements in ``fp8`` (a dict keyed by the GEMM's ``Amax`` series); the model
names the pairs in ``GEMM_WEIGHTS``. One implementation for both models keeps them alike: the same packing, the same
quantized weights and freeing of the 16-bit ones, the same fast-accumulation rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from code.llm.amax import LayerAmax
from code.llm.kv_cache import KVCache
from code.llm.paged_attention import decode_step, prefill_attention
from code.numerics.fp8 import Fp8Linear

FP8_ROW_ALIGN = 16  # cuBLASLt's FP8 GEMMs take row counts in multiples of 16: their inputs' rows are padded to it

Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]  # (layer, q, k, v) -> that layer's attention output


class InflightBase:
    """Base of an in-flight model: ``embedding`` sets its dtype and device; ``layers`` each hold ``fp8`` (None while
    the GEMMs are 16-bit) and the 16-bit weights ``GEMM_WEIGHTS`` names; ``amax_type`` is its calibration's
    ``LayerAmax``, whose series are the keywords ``_prompt_layers`` gives ``on_layer``."""

    GEMM_WEIGHTS: ClassVar[dict[str, str]]  # each GEMM's Amax series -> its layer's 16-bit weight attribute
    amax_type: ClassVar[type[LayerAmax]]
    embedding: Tensor
    layers: list[Any]
    elementwise: Any  # the model's Elementwise: its ``prefill`` and ``decode`` function sets
    decode_launch: Mapping[str, int]  # the Triton decode kernel's launch at many slots
    query_heads: int  # attention's query heads (a multiple of the cache's key/value heads)

    @property
    def dtype(self) -> torch.dtype:
        return self.embedding.dtype

    @property
    def device(self) -> torch.device:
        return self.embedding.device

    # -- what a model supplies ---------------------------------------------------------------------------------
    def _rope(self, positions: Tensor) -> Tensor:
        raise NotImplementedError

    def _logits(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _layers(self, x: Tensor, rope: Tensor, attend: Attend, ew: Any,  # noqa: ANN401 - the model's functions
                on_layer: Callable[..., None] | None = None) -> Tensor:
        """Every layer over the rows ``x``, with ``ew`` the elementwise functions between its GEMMs;
        ``on_layer(i, **series)`` sees layer i's GEMM inputs, keys and values under its ``amax_type``'s series
        names. Returns the last layer's residual stream."""
        raise NotImplementedError

    def _prompt_layers(self, x: Tensor, rope: Tensor, attend: Attend, on_layer: Callable[..., None] | None) -> Tensor:
        return self._layers(x, rope, attend, self.elementwise.prefill, on_layer)

    def decode(self, tokens: Tensor, cache: KVCache, ancestry: Tensor, gen_count: Tensor,
               launch: Mapping[str, int] | None = None) -> Tensor:
        """One token per beam row (``tokens [slots * beams]``), the ``gen_count[s]``-th generated token of slot s;
        float32 logits ``[slots * beams, vocab]``. No host synchronisation: it is captured in a CUDA graph.
        ``launch``: the decode kernel's (None: ``decode_launch``; the engine passes its slots' own)."""
        positions, attend = decode_step(cache, ancestry, gen_count, self.decode_launch if launch is None else launch)
        return self._logits(self._layers(F.embedding(tokens, self.embedding), self._rope(positions), attend,
                                         self.elementwise.decode))

    # -- the prompt pass ---------------------------------------------------------------------------------------
    def _prompt_forward(self, prompts: list[Tensor], write: Callable[[int, Tensor, Tensor], None] | None = None,
                        on_layer: Callable[..., None] | None = None) -> Tensor:
        """Packed causal forward of whole prompts (back to back, positions from 0 in each); ``write(i, k, v)``
        stores layer i's keys and values, ``on_layer`` as ``_prompt_layers``'. Float32 logits of each prompt's last
        token."""
        lengths = [len(p) for p in prompts]
        tokens = torch.cat(prompts)
        positions = torch.cat([torch.arange(n) for n in lengths]).to(self.device)
        cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                                  device=self.device)

        def attend(i: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            if write is not None:
                write(i, k, v)
            # contiguous, as FlashAttention takes it (a no-op where the model's v already is)
            return prefill_attention(q, k, v.contiguous(), lengths, cu_seqlens)

        x = self._prompt_layers(F.embedding(tokens, self.embedding), self._rope(positions), attend, on_layer)
        return self._logits(x[cu_seqlens[1:].long() - 1])

    @torch.inference_mode()
    def prefill(self, prompts: list[Tensor], slots: list[int], cache: KVCache) -> Tensor:
        """Run whole prompts (int64 on the device), write their keys/values to the slots' pages; float32 logits
        ``[prompts, vocab]`` of each prompt's last token."""
        rows = cache.prompt_write_index(slots, [len(p) for p in prompts])

        def write(i: int, k: Tensor, v: Tensor) -> None:
            cache.write_prompt(i, rows, k, v)

        return self._prompt_forward(prompts, write)

    @torch.inference_mode()
    def collect_amax(self, prompts: list[Tensor], amax: LayerAmax | None = None) -> Any:  # noqa: ANN401 - amax_type
        """Per-layer magnitudes of the GEMM inputs, keys and values over ``prompts`` (calibration); with ``amax``,
        raises its values (several batches of prompts)."""
        amax = amax or self.amax_type()
        self._prompt_forward(prompts, on_layer=amax.update)
        return amax

    # -- FP8 GEMMs ---------------------------------------------------------------------------------------------
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
