"""The PyTorch backend: our ``BertQA`` from an engine, eager mode, one forward per batch.

Deliberately plain (no packing, fused kernels, FP8 or CUDA graphs yet): it is the correctness baseline that faster
GPU paths are compared against, and the backend of the embedded CPU default.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from code.bert.backends import BackendOptions
from code.bert.engine import load_engine

# Attention kernels allowed on the GPU. cuDNN's is left out: it builds a new plan for every new sequence length,
# and BERT's lengths vary per batch. Measured on an H200 (2026-11-22, BERT-large fp16, batch 1): 45 ms per
# forward while lengths were new, 4.6 ms once seen, with cuDNN attention taking ~80% of the CPU time.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _cpu_threads() -> int:
    """CPUs this process may use: the affinity mask, which containers and taskset narrow below os.cpu_count()."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class PytorchBertBackend:
    def __init__(self, options: BackendOptions) -> None:
        if options.engine_dir is None or options.engine_spec is None:
            raise ValueError("the pytorch BERT backend needs BackendOptions.engine_dir and engine_spec")
        self.device = torch.device(options.device)
        if self.device.type == "cpu":
            # torch defaults to the machine's physical cores, more than a container may be allowed; oversubscribed
            # intra-op threads are slower than fewer threads.
            torch.set_num_threads(min(torch.get_num_threads(), _cpu_threads()))
        self.model = load_engine(options.engine_dir, options.engine_spec, self.device)

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def run_batch(self, sample_indices: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray,
                  input_mask: np.ndarray) -> np.ndarray:
        """int32 ``[B, S]`` inputs -> float32 ``[B, S, 2]`` start/end logits (``sample_indices`` unused here)."""
        with torch.inference_mode(), sdpa_kernel(ATTENTION_BACKENDS):
            logits = self.model(self._to_device(input_ids), self._to_device(segment_ids),
                                self._to_device(input_mask))
            return logits.float().cpu().numpy()  # .cpu() synchronises with the GPU
