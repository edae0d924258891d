"""What an LLM benchmark hands the C++ core, whatever the model: a batch runner over its prompts, and the reference
summaries behind its preprocessed prompts (GPT-J's ``code/gptj/benchmark.py``, Llama's ``code/llama31/benchmark.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from code.common.benchmark_errors import InputsUnavailableError


class TokenRunner:
    """The C++ core's batch runner: gather the batch's prompts, generate, return int32 token ids per sample."""

    def __init__(self, samples: Any, backend: Any) -> None:
        self.samples = samples
        self.backend = backend

    def run_batch(self, sample_indices: np.ndarray) -> list[np.ndarray]:
        outputs = self.backend.run_batch(sample_indices, self.samples.gather(sample_indices))
        return [np.ascontiguousarray(tokens, dtype=np.int32) for tokens in outputs]


def reference_summaries(samples: Any, load_targets: Callable[[Path], list[str]], fetch_step: str) -> list[str]:
    """The reference summaries of the file ``samples`` were preprocessed from (``samples.eval_json``), one per
    prompt: a missing file or one of another size stops the run, naming ``fetch_step``."""
    if samples.eval_json is None or not Path(samples.eval_json).exists():
        raise InputsUnavailableError(f"the file behind the preprocessed prompts ({samples.eval_json}) is missing; "
                                     f"run {fetch_step}")
    references = load_targets(Path(samples.eval_json))
    if len(references) != len(samples):
        raise InputsUnavailableError(f"{samples.eval_json} has {len(references)} records but the preprocessed set "
                                     f"has {len(samples)} prompts; run {fetch_step} again")
    return references
