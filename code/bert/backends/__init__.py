"""BERT backends: what turns a batch of features into start/end logits, looked up by name.

Benchmarks depend on the ``BertBackend`` protocol and ``create_backend``, never on a concrete backend; each backend
module is imported only when asked for, so the oracle runs without torch weights and the pytorch backend's imports
cost nothing to runs that do not use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from code.common.registry import LazyRegistry

if TYPE_CHECKING:
    from code.bert.backends.pytorch_engine import EngineSpec
    from code.bert.dataset import BertFeatures


@dataclass(frozen=True)
class BackendOptions:
    device: str = "cpu"                    # "cpu" | "cuda" | "cuda:N"
    cpu_threads: int = 0                   # on a CPU device: torch's intra-op threads (0: leave torch's default)
    engine_dir: Path | None = None         # pytorch: the engine built by generate_engines
    engine_spec: EngineSpec | None = None  # pytorch: what the run expects the engine to be (stale check)
    features: BertFeatures | None = None   # oracle: needs the gold positions
    oracle_shift: int = 0                  # oracle: move the answer by this many tokens (a failing oracle)
    oracle_batch_ms: float = 0.0           # oracle: each batch takes at least this long (a load-independent pace)
    # pytorch on CUDA: the packed fast path (code/bert/fast, documentation/bert_gpu.md)
    fast_path: bool | None = None          # None/True: packed path for fp16/bf16/fp8 engines; False: eager padded
    max_batch_size: int = 64               # largest batch run_batch will get (sizes pinned buffers, graph slots)
    num_workers: int = 1                   # threads calling run_batch at once: one stream + buffers + graphs each
    cuda_graphs: bool = True               # capture the forward per token bucket up to graph_max_tokens
    graph_max_tokens: int = 16384          # larger batches run eagerly (launch costs are noise there)
    fp8_fast_accum: bool = False           # FP8 GEMMs: cuBLASLt fast accumulation (faster, less exact)
    fp8_gemms: str = "qkv+wo+w1+w2"         # fp8 engines: the GEMMs of each layer that run in FP8
    attention_kernel: str = "triton"       # "triton" (code/bert/fast/attention.py) | "flash" (torch FA2 varlen)
    gelu_in_gemm: bool = False             # bias + tanh GELU in w1's GEMM epilogue (off: erf-GELU kernel)


class BertBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray,
                  input_mask: np.ndarray) -> np.ndarray:
        """Inputs int32 ``[B, S]`` (S = the batch's longest sequence); returns float32 ``[B, S, 2]`` logits."""
        ...


# name -> "module:class", imported only when create_backend asks for it
BACKENDS: LazyRegistry[str] = LazyRegistry("BERT backend", {
    "pytorch": "code.bert.backends.pytorch:PytorchBertBackend",
    "oracle": "code.bert.backends.oracle:OracleBertBackend",
})


def create_backend(name: str, options: BackendOptions) -> BertBackend:
    """The backend registered as ``name``, constructed with ``options``; ValueError listing names if unknown."""
    return BACKENDS.load(name)(options)
