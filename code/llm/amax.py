"""Per-layer largest magnitudes over calibration prompts (``amax``): what an FP8 model's static scales come from.

A model's calibration is a dataclass of ``LayerAmax`` whose fields are each a ``list[float]`` with one value per
layer (GPT-J: its two GEMMs' inputs, keys and values; Llama 3.1: its four GEMMs' inputs, keys and values). A
forward over calibration prompts calls ``update(layer, name=tensor, ...)`` per layer; several batches of prompts
keep the largest value seen. Its ``k`` and ``v`` series are what an FP8 KV cache's scales come from
(``code.llm.inflight_engine.KvMagnitudes``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor


@dataclass
class LayerAmax:
    """Base of a model's calibration: every field a per-layer ``list[float]`` (``field(default_factory=list)``)."""

    def update(self, layer: int, **values: Tensor) -> None:
        """Layer ``layer``'s magnitudes: each ``name=tensor`` raises series ``name`` at that layer to the tensor's
        largest magnitude (appending when the layer is new; layers come in order on the first batch)."""
        for name, tensor in values.items():
            series = getattr(self, name)
            value = float(tensor.detach().abs().max().float())
            if layer == len(series):
                series.append(value)
            else:
                series[layer] = max(series[layer], value)

    def as_dict(self) -> dict[str, list[float]]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
