"""The packed path's runner: an engine's weights as a ``PackedBert``, one context per worker thread, CUDA graphs.

The pytorch backend (``code/bert/backends/pytorch.py``) builds one ``PackedRunner`` on CUDA for fp16/bf16/fp8/int8
engines with ``fast_path`` on. Each batch is packed into one token stream in a pinned host buffer, copied to the GPU
in one transfer, run by the packed encoder (a CUDA graph when the batch fits a token bucket) and only its ``[T, 2]``
logits come back. Each worker thread gets its own context (CUDA stream, pinned buffers, graphs), so one thread packs
and unpacks while another's batch runs on the GPU.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from code.bert.packed.packing import TOKEN_ALIGN, PackedBatch, layout_words, pack_into, round_up, token_buckets, unpack
from code.bert.packed.spec import PackedKernels
from code.bert.squad import MAX_SEQ_LENGTH


class _Context:
    """What one worker thread owns: a stream, pinned buffers in and out, a device buffer, its graphs."""

    def __init__(self, runner: PackedRunner) -> None:
        device = runner.model.device
        self.lock = threading.Lock()
        self.stream = torch.cuda.Stream(device)
        self.host_in = torch.empty(runner.max_words, dtype=torch.int32, pin_memory=True)
        self.host_in_np = self.host_in.numpy()
        self.host_out = torch.empty((runner.max_tokens, 2), dtype=torch.float32, pin_memory=True)
        self.host_out_np = self.host_out.numpy()
        self.device_in = torch.empty(runner.max_words, dtype=torch.int32, device=device)
        self.done = torch.cuda.Event()
        self.graphs = None
        if runner.graph_buckets:
            from code.bert.packed.graphs import GraphSet

            self.graphs = GraphSet(runner.model, runner.graph_buckets, runner.max_batch, self.stream)


class PackedRunner:
    """The packed GPU path over an engine's weights; ``run`` is thread-safe (one context per thread)."""

    def __init__(
        self,
        model: torch.nn.Module,
        manifest: dict,
        kernels: PackedKernels,
        max_batch: int,
        contexts: int,
        cuda_graphs: bool,
        graph_max_tokens: int,
    ) -> None:
        """``kernels``: the engine's spec (its precision and which kernels run), passed whole to ``PackedBert``."""
        from code.bert.packed.packed_model import PackedBert

        # an 8-bit engine (fp8, int8) runs its GEMMs in the format its precision names, scaled from its calibration
        amax = (manifest.get("calibration") or {}).get("amax") if kernels.eight_bit else None
        dtype = torch.bfloat16 if kernels.precision == "bf16" else torch.float16
        device = next(model.parameters()).device
        self.model = PackedBert(model, dtype, device, amax=amax, kernels=kernels)
        if kernels.attention_kernel == "triton":
            from code.bert.packed.tuning import fastest, tune

            # Pick the attention kernel's tile shape on a realistic batch once, before any graph is captured.
            cfg = model.config
            self.model.attention_config = fastest(
                tune(cfg.num_heads, cfg.head_dim, dtype, device, fp8_input=kernels.fp8_attention)
            )
        self.max_batch = max(1, max_batch)
        self.max_tokens = round_up(self.max_batch * MAX_SEQ_LENGTH, TOKEN_ALIGN)
        self.max_words = layout_words(self.max_tokens, self.max_batch)
        limit = min(graph_max_tokens, self.max_tokens)
        self.graph_buckets = token_buckets(limit) if cuda_graphs and graph_max_tokens > 0 else []
        with torch.inference_mode():
            self._warm_up()
            self.contexts = [_Context(self) for _ in range(max(1, contexts))]
        torch.cuda.synchronize(device)
        self._local = threading.local()
        self._next = 0
        self._assign = threading.Lock()

    def _warm_up(self) -> None:
        """Compile the Triton kernels and create cuBLAS handles before any timed batch. The INT8 GEMM compiles one
        kernel per range of rows (``code.numerics.int8_gemm.TILES``: up to 256, up to 4,096, more), so the batches
        reach each range the runner can see: 128, 3,072 and 6,144 tokens."""
        rng = np.random.default_rng(0)
        for batch, seq in dict.fromkeys(((1, 128), (min(self.max_batch, 8), MAX_SEQ_LENGTH),
                                         (min(self.max_batch, 16), MAX_SEQ_LENGTH))):
            ids = rng.integers(1000, 2000, (batch, seq), dtype=np.int32)
            self._run_eager(ids, np.zeros_like(ids), np.ones_like(ids))

    def _run_eager(self, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
        from code.bert.packed.packed_model import run_packed

        logits, packed = run_packed(self.model, input_ids, segment_ids, input_mask)
        return unpack(logits, packed)

    def _context(self) -> _Context:
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            with self._assign:
                ctx = self.contexts[self._next % len(self.contexts)]
                self._next += 1
            self._local.ctx = ctx
        return ctx

    def run(self, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
        ctx = self._context()
        with ctx.lock, torch.inference_mode():
            return self._run(ctx, input_ids, segment_ids, input_mask)

    def _run(self, ctx: _Context, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
        batch = input_mask.shape[0]
        if batch > self.max_batch or input_mask.shape[1] > MAX_SEQ_LENGTH:
            raise ValueError(f"batch {input_mask.shape} exceeds the backend's {self.max_batch} x {MAX_SEQ_LENGTH}")
        tokens = int(np.count_nonzero(input_mask))
        bucket = ctx.graphs.bucket_for(tokens, batch) if ctx.graphs is not None else None
        if bucket is not None:
            packed = pack_into(ctx.host_in_np, input_ids, segment_ids, input_mask, bucket, ctx.graphs.slots[bucket])
        else:
            packed = pack_into(ctx.host_in_np, input_ids, segment_ids, input_mask)
        words = packed.words
        with torch.cuda.stream(ctx.stream):
            if bucket is not None:
                ctx.graphs.input_buffer(bucket).copy_(ctx.host_in[:words], non_blocking=True)
                logits = ctx.graphs.replay(bucket)
            else:
                logits = self._forward(ctx, packed, words)
            ctx.host_out[: packed.total].copy_(logits[: packed.total], non_blocking=True)
            ctx.done.record(ctx.stream)
        ctx.done.synchronize()  # releases the GIL while the GPU works
        return unpack(ctx.host_out_np, packed)

    def _forward(self, ctx: _Context, packed: PackedBatch, words: int) -> torch.Tensor:
        flat = ctx.device_in[:words]
        flat.copy_(ctx.host_in[:words], non_blocking=True)
        t = packed.padded_total
        return self.model.forward(
            flat[:t], flat[t : 2 * t], flat[2 * t : 3 * t], flat[3 * t : words], max_len=packed.max_len
        )
