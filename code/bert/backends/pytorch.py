"""The PyTorch backend: our ``BertQA`` from an engine; on a GPU, the packed path (code/bert/packed).

On CUDA (fp16/bf16/fp8/int8 engines) batches run through ``code.bert.packed.runner.PackedRunner``: one token stream
per batch, Triton kernels, varlen attention, 8-bit GEMMs for fp8 and int8 engines, a CUDA graph when the batch fits a
token bucket.
Several batcher workers call ``run_batch`` at once; the runner keeps one context per thread.

On the CPU, and for fp32 engines or with ``fast_path=False``, the eager padded model runs: the correctness
baseline and the embedded CPU default.

The backend owns its engine (``code/bert/backends/pytorch_engine.py``): where a config's engine lives, its build for
``make generate_engines`` (fp8 and int8 engines calibrated there) and the stale check when a run loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from code.bert.backends.pytorch_engine import EngineSpec, engine_key, ensure_engine, load_engine_manifest
from code.bert.packed.runner import PackedRunner
from code.bert.packed.spec import PACKED_PRECISIONS, QUANTIZED, PackedKernels
from code.mlperf.benchmarks import model_name_lookup
from code.mlperf.devices import placed_on

if TYPE_CHECKING:
    from code.bert.backends import BackendContext
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport

# Attention kernels allowed on the GPU. cuDNN's is left out: it builds a new plan for every new sequence length,
# and BERT's lengths vary per batch, so a forward costs ten times more while lengths are new
# (documentation/notes/journal/2026-11-22.md, "Figures behind config comments").
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass(frozen=True)
class PytorchOptions:
    engine_dir: Path  # the engine built by generate_engines
    engine_spec: EngineSpec  # what the run expects the engine to be (stale check)
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    cpu_threads: int = 0  # on a CPU device: torch's intra-op threads (0: leave torch's default)
    fast_path: bool = True  # on CUDA: the packed path for fp16/bf16/fp8/int8 engines; False: eager padded
    max_batch_size: int = 64  # largest batch run_batch gets (sizes pinned buffers, graph slots)
    num_workers: int = 1  # threads calling run_batch at once: one stream + buffers + graphs each
    cuda_graphs: bool = True  # capture the forward per token bucket up to graph_max_tokens
    graph_max_tokens: int = 16384  # larger batches run eagerly (launch costs are noise there)
    kernels: PackedKernels | None = None  # the packed path's spec (fp16/bf16/fp8/int8 engines); None: the eager model
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable


class PytorchBertBackend:
    @staticmethod
    def engine_spec(config: ResolvedConfig, context: BackendContext) -> EngineSpec:
        """What this config's engine is; an unknown ``model_name`` stops here with the known names."""
        with model_name_lookup(config["model_name"]):
            return EngineSpec(model_name=config["model_name"], precision=config["precision"],
                              checkpoint=context.checkpoint, seed=config["seed"])

    @classmethod
    def engine_dir(cls, config: ResolvedConfig, context: BackendContext) -> Path:
        return context.engines_dir / engine_key(cls.engine_spec(config, context))

    @classmethod
    def generate_engine(cls, config: ResolvedConfig, context: BackendContext) -> EngineReport:
        spec = cls.engine_spec(config, context)
        path = context.engines_dir / engine_key(spec)
        built = ensure_engine(spec, path)
        return {"engine": str(path), "built": "yes" if built else "no: reused, its manifest matches this run",
                "weights": spec.checkpoint, "precision": spec.precision}

    @classmethod
    def options_from(cls, config: ResolvedConfig, context: BackendContext) -> PytorchOptions:
        spec = cls.engine_spec(config, context)
        # The packed path's spec, built once from the config it was validated as (code/bert/packed/spec.py).
        kernels = PackedKernels.from_values(config.values) if config["precision"] in PACKED_PRECISIONS else None
        return PytorchOptions(engine_dir=context.engines_dir / engine_key(spec), engine_spec=spec,
                              device=context.device, cpu_threads=context.cpu_threads, fast_path=config["fast_path"],
                              max_batch_size=config["gpu_batch_size"], num_workers=config["num_workers"],
                              cuda_graphs=config["cuda_graphs"], graph_max_tokens=config["graph_max_tokens"],
                              kernels=kernels, run_args=config.run_args())

    def __init__(self, options: PytorchOptions) -> None:
        self.device = placed_on(options.device, options.cpu_threads)
        spec = options.engine_spec
        model, manifest = load_engine_manifest(options.engine_dir, spec, self.device, run_args=options.run_args)
        self.packed: PackedRunner | None = None
        if self.device.type == "cuda" and options.fast_path and options.kernels is not None:
            self.packed = PackedRunner(
                model,
                manifest,
                options.kernels,
                options.max_batch_size,
                options.num_workers,
                options.cuda_graphs,
                options.graph_max_tokens,
            )
            del model
            self.model = None
        else:
            if spec.precision in QUANTIZED:
                # 8-bit GEMMs exist only on the packed path; elsewhere an fp8 or int8 engine runs its fp16 weights
                # (fp32 on a CPU). Tests use that; the harness refuses such runs (code/bert/backends/__init__.py).
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

        The packed path gives positions past a sample's length ``PAD_LOGIT`` (it computes nothing there); the eager
        path gives whatever the padded model computed there. Post-processing reads neither.
        """
        if self.packed is not None:
            return self.packed.run(input_ids, segment_ids, input_mask)
        with torch.inference_mode(), sdpa_kernel(ATTENTION_BACKENDS):
            logits = self.model(self._to_device(input_ids), self._to_device(segment_ids), self._to_device(input_mask))
            return logits.float().cpu().numpy()  # .cpu() synchronises with the GPU
