"""CUDA graphs of the packed forward, one per token bucket: small batches without per-kernel launch costs.

Eager, one forward is ~250 kernel launches from Python (~3 ms of CPU); a batch of one 166-token sample needs well
under that on the GPU, so SingleStream and small Server batches are launch-bound. A graph replays the whole forward
with one call. Each bucket's graph reads a packed layout (``packing.pack_into``) of its own size from one static
device buffer, and writes ``[bucket, 2]`` float32 logits to a static output.

Attention's grid is fixed at capture: every graph is captured for the longest sequence BERT has (384, or the bucket
if smaller) and for ``packing.graph_slots`` sequences; a batch with more sequences than its bucket has slots uses the
next bucket that has enough, or runs eagerly.

All graphs of one ``GraphSet`` share one memory pool and one stream: replays on it must not overlap (the backend gives
each worker thread its own set).
"""

from __future__ import annotations

import torch
from torch import Tensor

from code.bert.packed.packed_model import PackedBert
from code.bert.packed.packing import graph_slots, layout_words


class GraphSet:
    def __init__(
        self,
        model: PackedBert,
        buckets: list[int],
        max_batch: int,
        stream: torch.cuda.Stream,
        max_len: int = 384,
        min_avg_len: int = 64,
    ) -> None:
        self.model = model
        self.buckets = sorted(buckets)
        self.slots = {b: graph_slots(b, max_batch, min_avg_len) for b in self.buckets}
        self.max_len = max_len
        self.stream = stream
        words = max(layout_words(b, self.slots[b]) for b in self.buckets)
        self.inputs = torch.zeros(words, dtype=torch.int32, device=model.device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, Tensor] = {}
        pool = torch.cuda.graph_pool_handle()
        with torch.cuda.stream(stream):
            for bucket in reversed(self.buckets):  # largest first: later captures reuse its pool memory
                self._capture(bucket, pool)
        stream.synchronize()

    def _views(self, bucket: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        t, slots = bucket, self.slots[bucket]
        flat = self.inputs
        return flat[:t], flat[t : 2 * t], flat[2 * t : 3 * t], flat[3 * t : 3 * t + slots + 1]

    def _capture(self, bucket: int, pool: object) -> None:
        views = self._views(bucket)
        max_len = min(self.max_len, bucket)
        self.inputs.zero_()  # every sequence empty: a valid batch for the warm-up runs
        for _ in range(2):  # compile/tune outside the capture
            self.model.forward(*views, max_len=max_len)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=self.stream):
            self.outputs[bucket] = self.model.forward(*views, max_len=max_len)
        self.graphs[bucket] = graph

    def bucket_for(self, tokens: int, sequences: int) -> int | None:
        """The smallest bucket with room for ``tokens`` rows and ``sequences`` sequences, or None."""
        for bucket in self.buckets:
            if bucket >= tokens and self.slots[bucket] >= sequences:
                return bucket
        return None

    def input_buffer(self, bucket: int) -> Tensor:
        """Where a packed layout for ``bucket`` goes (``layout_words(bucket, slots)`` int32 words)."""
        return self.inputs[: layout_words(bucket, self.slots[bucket])]

    def replay(self, bucket: int) -> Tensor:
        """Run the bucket's graph on the current stream; returns its static ``[bucket, 2]`` float32 output."""
        self.graphs[bucket].replay()
        return self.outputs[bucket]
