"""What an LLM benchmark hands the C++ core, whatever the model: a batch runner over its prompts, or a continuous
runner over an in-flight engine's backend, and the reference summaries behind its preprocessed prompts (GPT-J's
``code/gptj/benchmark.py``, Llama's ``code/llama31/benchmark.py``).
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


class ContinuousTokenRunner:
    """The C++ core's continuous runner: the backend's in-flight engine pulls samples from the core's session itself
    (``backend.serve``). ``forced_length_of``: a synthetic sample's forced output length (0: the model decides);
    ``stream_first_tokens``: the benchmark's LoadGen settings time first tokens (use_token_latencies), so the engine
    reports each as soon as it has it."""

    def __init__(self, samples: Any, backend: Any, forced_length_of: Callable[[int], int] | None = None,
                 stream_first_tokens: bool = False) -> None:
        self.samples = samples
        self.backend = backend
        self.forced_length_of = forced_length_of
        self.stream_first_tokens = stream_first_tokens

    def run_continuous(self, session: Any) -> None:
        self.backend.serve(session, self.samples.prompt, self.forced_length_of,
                           stream_first_tokens=self.stream_first_tokens)

    def stats(self) -> dict[str, Any]:
        """The engine's counters (generated tokens: only the engine knows how many it generated), for
        metadata.json."""
        return self.backend.stats() if hasattr(self.backend, "stats") else {}


def runner_for(samples: Any, backend: Any, forced_length_of: Callable[[int], int] | None = None,
               stream_first_tokens: bool = False) -> TokenRunner | ContinuousTokenRunner:
    """A backend with ``serve`` (an in-flight engine) runs continuously; any other batch by batch."""
    if hasattr(backend, "serve"):
        return ContinuousTokenRunner(samples, backend, forced_length_of, stream_first_tokens)
    return TokenRunner(samples, backend)


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


def samples_and_references(samples: Any, synthetic: bool, load_targets: Callable[[Path], list[str]], fetch_step: str,
                           num_samples: int | None) -> tuple[Any, list[str] | None]:
    """The prompts a run uses and their reference summaries (None for synthetic prompts, which have none). With
    ``num_samples`` (``--num_samples``) only the first ones, cut after ``reference_summaries`` has checked the whole
    set against its file, so a quick check still refuses a set of the wrong size."""
    references = None if synthetic else reference_summaries(samples, load_targets, fetch_step)
    if num_samples is not None:
        samples = samples.first(num_samples)
        references = None if references is None else references[:len(samples)]
    return samples, references
