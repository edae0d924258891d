"""The PyTorch backend: our ``BertQA`` from an engine; on a GPU, the packed fast path (code/bert/fast).

On CUDA (fp16/bf16/fp8 engines) each batch is packed into one token stream in a pinned host buffer, copied to the GPU
in one transfer, run by the packed encoder (Triton kernels, varlen flash attention, FP8 GEMMs for fp8 engines; a CUDA
graph when the batch fits a token bucket) and only its ``[T, 2]`` logits come back. Several batcher workers call
``run_batch`` at once: each thread gets its own context (CUDA stream, pinned buffers, graphs), so one thread packs
and unpacks while another's batch runs on the GPU.

On the CPU, and for fp32 engines or with ``fast_path=False``, the eager padded model runs: the correctness
baseline and the embedded CPU default.

The backend owns its engine (``code/bert/backends/pytorch_engine.py``): where a config's engine lives, its build for
``make generate_engines`` (FP8 engines calibrated there) and the stale check when a run loads it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from code.bert.backends.pytorch_engine import EngineSpec, build_engine, engine_key, load_engine_manifest
from code.bert.fast.packed_model import ALL_FP8_GEMMS
from code.bert.fast.packing import TOKEN_ALIGN, PackedBatch, layout_words, pack_into, round_up, token_buckets, unpack
from code.bert.squad import MAX_SEQ_LENGTH
from code.common.benchmarks import BenchmarkError

if TYPE_CHECKING:
    from code.bert.backends import BackendContext
    from code.common.benchmarks import EngineReport
    from code.common.config import ResolvedConfig

# Attention kernels allowed on the GPU. cuDNN's is left out: it builds a new plan for every new sequence length,
# and BERT's lengths vary per batch, so a forward costs ten times more while lengths are new (performance.md).
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
FAST_PRECISIONS = ("fp16", "bf16", "fp8")


@dataclass(frozen=True)
class PackedKernels:
    """Which kernels the packed path runs (code/bert/fast, documentation/bert_gpu.md)."""

    fp8_fast_accum: bool = False  # FP8 GEMMs: cuBLASLt fast accumulation (faster, less exact)
    fp8_gemms: str = ALL_FP8_GEMMS  # fp8 engines: the GEMMs of each layer that run in FP8
    attention_kernel: str = "triton"  # "triton" (code/bert/fast/attention.py) | "flash" (torch FA2 varlen)
    gelu_in_gemm: bool = False  # bias + tanh GELU in w1's GEMM epilogue (off: erf-GELU kernel)


@dataclass(frozen=True)
class PytorchOptions:
    engine_dir: Path  # the engine built by generate_engines
    engine_spec: EngineSpec  # what the run expects the engine to be (stale check)
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    cpu_threads: int = 0  # on a CPU device: torch's intra-op threads (0: leave torch's default)
    fast_path: bool = True  # on CUDA: the packed path for fp16/bf16/fp8 engines; False: eager padded
    max_batch_size: int = 64  # largest batch run_batch gets (sizes pinned buffers, graph slots)
    num_workers: int = 1  # threads calling run_batch at once: one stream + buffers + graphs each
    cuda_graphs: bool = True  # capture the forward per token bucket up to graph_max_tokens
    graph_max_tokens: int = 16384  # larger batches run eagerly (launch costs are noise there)
    kernels: PackedKernels = field(default_factory=PackedKernels)
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable


class _Context:
    """What one worker thread owns: a stream, pinned buffers in and out, a device buffer, its graphs."""

    def __init__(self, fast: FastPath) -> None:
        device = fast.model.device
        self.lock = threading.Lock()
        self.stream = torch.cuda.Stream(device)
        self.host_in = torch.empty(fast.max_words, dtype=torch.int32, pin_memory=True)
        self.host_in_np = self.host_in.numpy()
        self.host_out = torch.empty((fast.max_tokens, 2), dtype=torch.float32, pin_memory=True)
        self.host_out_np = self.host_out.numpy()
        self.device_in = torch.empty(fast.max_words, dtype=torch.int32, device=device)
        self.done = torch.cuda.Event()
        self.graphs = None
        if fast.graph_buckets:
            from code.bert.fast.graphs import GraphSet

            self.graphs = GraphSet(fast.model, fast.graph_buckets, fast.max_batch, self.stream)


class FastPath:
    """The packed GPU path over an engine's weights; ``run`` is thread-safe (one context per thread)."""

    def __init__(
        self,
        model: torch.nn.Module,
        manifest: dict,
        precision: str,
        max_batch: int,
        contexts: int,
        cuda_graphs: bool,
        graph_max_tokens: int,
        kernels: PackedKernels | None = None,
    ) -> None:
        """``kernels``: which kernels run (defaults if None)."""
        from code.bert.fast.packed_model import PackedBert

        kernels = kernels or PackedKernels()
        amax = (manifest.get("calibration") or {}).get("amax") if precision == "fp8" else None
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        device = next(model.parameters()).device
        self.model = PackedBert(
            model,
            dtype,
            device,
            fp8_amax=amax,
            fast_accum=kernels.fp8_fast_accum,
            fp8_gemms=kernels.fp8_gemms,
            attention=kernels.attention_kernel,
            gelu_in_gemm=kernels.gelu_in_gemm,
        )
        if kernels.attention_kernel == "triton":
            from code.bert.fast.attention import tune

            # Pick the attention kernel's tile shape on a realistic batch once, before any graph is captured.
            cfg = model.config
            tune(cfg.num_heads, cfg.head_dim, dtype, device)
        self.max_batch = max(1, max_batch)
        self.max_tokens = round_up(self.max_batch * MAX_SEQ_LENGTH, TOKEN_ALIGN)
        self.max_words = layout_words(self.max_tokens, self.max_batch)
        limit = min(graph_max_tokens, self.max_tokens)
        self.graph_buckets = token_buckets(limit) if cuda_graphs and graph_max_tokens > 0 else []
        with torch.inference_mode():
            self._warm_up()
            self.contexts = [_Context(self) for _ in range(max(1, contexts))]
        torch.cuda.synchronize()
        self._local = threading.local()
        self._next = 0
        self._assign = threading.Lock()

    def _warm_up(self) -> None:
        """Compile the Triton kernels and create cuBLAS handles before any timed batch."""
        rng = np.random.default_rng(0)
        for batch, seq in ((1, 128), (min(self.max_batch, 8), MAX_SEQ_LENGTH)):
            ids = rng.integers(1000, 2000, (batch, seq), dtype=np.int32)
            self._run_eager(ids, np.zeros_like(ids), np.ones_like(ids))

    def _run_eager(self, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
        from code.bert.fast.packed_model import run_packed

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


class PytorchBertBackend:
    @staticmethod
    def engine_spec(config: ResolvedConfig, context: BackendContext) -> EngineSpec:
        """What this config's engine is; an unknown ``model_name`` stops here with the known names."""
        try:
            return EngineSpec(model_name=config["model_name"], precision=config["precision"],
                              checkpoint=context.checkpoint, seed=config["seed"])
        except ValueError as error:
            raise BenchmarkError(f"model_name = {config['model_name']!r}: {error}") from None

    @classmethod
    def engine_dir(cls, config: ResolvedConfig, context: BackendContext) -> Path:
        return context.engines_dir / engine_key(cls.engine_spec(config, context))

    @classmethod
    def generate_engine(cls, config: ResolvedConfig, context: BackendContext) -> EngineReport:
        spec = cls.engine_spec(config, context)
        path = build_engine(spec, context.engines_dir / engine_key(spec))
        return {"engine": str(path), "weights": spec.checkpoint, "precision": spec.precision}

    @classmethod
    def options_from(cls, config: ResolvedConfig, context: BackendContext) -> PytorchOptions:
        spec = cls.engine_spec(config, context)
        kernels = PackedKernels(fp8_fast_accum=config["fp8_fast_accum"], fp8_gemms=config["fp8_gemms"],
                                attention_kernel=config["attention_kernel"], gelu_in_gemm=config["gelu_in_gemm"])
        return PytorchOptions(engine_dir=context.engines_dir / engine_key(spec), engine_spec=spec,
                              device=context.device, cpu_threads=context.cpu_threads, fast_path=config["fast_path"],
                              max_batch_size=config["gpu_batch_size"], num_workers=config["num_workers"],
                              cuda_graphs=config["cuda_graphs"], graph_max_tokens=config["graph_max_tokens"],
                              kernels=kernels, run_args=config.run_args())

    def __init__(self, options: PytorchOptions) -> None:
        self.device = torch.device(options.device)
        spec = options.engine_spec
        if self.device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/common/devices.py
        model, manifest = load_engine_manifest(options.engine_dir, spec, self.device, run_args=options.run_args)
        self.fast: FastPath | None = None
        if self.device.type == "cuda" and options.fast_path and spec.precision in FAST_PRECISIONS:
            self.fast = FastPath(
                model,
                manifest,
                spec.precision,
                options.max_batch_size,
                options.num_workers,
                options.cuda_graphs,
                options.graph_max_tokens,
                options.kernels,
            )
            del model
            self.model = None
        else:
            if spec.precision == "fp8":
                # FP8 GEMMs exist only on the fast path; elsewhere an fp8 engine runs its fp16 weights (fp32 on a
                # CPU). Tests use that; the harness refuses such runs (code/bert/backends/__init__.py).
                model = model.float() if self.device.type == "cpu" else model
            self.model = model

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def run_batch(
        self, sample_indices: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray
    ) -> np.ndarray:
        """int32 ``[B, S]`` inputs -> float32 ``[B, S, 2]`` start/end logits (``sample_indices`` unused here).

        The fast path gives positions past a sample's length ``PAD_LOGIT`` (it computes nothing there); the eager
        path gives whatever the padded model computed there. Post-processing reads neither.
        """
        if self.fast is not None:
            return self.fast.run(input_ids, segment_ids, input_mask)
        with torch.inference_mode(), sdpa_kernel(ATTENTION_BACKENDS):
            logits = self.model(self._to_device(input_ids), self._to_device(segment_ids), self._to_device(input_mask))
            return logits.float().cpu().numpy()  # .cpu() synchronises with the GPU
