"""The oracle backend: answers every prompt with its reference summary's tokens.

It checks the pipeline, not a model: an accuracy run through LoadGen, the accuracy log, decoding and ROUGE must
score 100 with it. ``oracle_drop`` cuts tokens off every answer, so the gen_len check can be seen to fail. With
synthetic prompts (no references) it answers with the first 69 tokens of the prompt (69 is what LoadGen assumes
per GPT-J sample), which keeps performance-path tests meaningful. ``oracle_batch_ms`` makes each batch take at
least that long: a throughput set by the batch size, not by the machine's load, so a full-length run has a query of
a sane size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from code.gptj.backends import WithoutEngine

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.gptj.backends import BackendContext

SYNTHETIC_ANSWER_TOKENS = 69


@dataclass(frozen=True)
class OracleOptions:
    references: list[list[int]] | None = None  # reference summary tokens per sample; None: synthetic prompts
    oracle_drop: int = 0  # drop this many tokens from the end of every answer (a failing oracle)
    oracle_batch_ms: float = 0.0  # each batch takes at least this long (a load-independent pace)


class OracleGptjBackend(WithoutEngine):
    @staticmethod
    def options_from(config: ResolvedConfig, context: BackendContext) -> OracleOptions:
        texts, tokenizer = context.references_text, context.tokenizer
        references = [tokenizer.encode(text) for text in texts] if texts is not None and tokenizer else None
        return OracleOptions(references=references, oracle_drop=config["oracle_drop"],
                             oracle_batch_ms=config["oracle_batch_ms"])

    def __init__(self, options: OracleOptions) -> None:
        self.references = options.references
        self.drop = options.oracle_drop
        self.batch_s = options.oracle_batch_ms / 1000
        if self.drop < 0:
            raise ValueError(f"oracle_drop must be >= 0 (tokens dropped), not {self.drop}")

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        """Each prompt's reference tokens, returned no sooner than ``oracle_batch_ms`` after the call (sleeping
        releases the GIL, as a device's wait would)."""
        started = time.perf_counter()
        answers = []
        for index, prompt in zip(sample_indices.tolist(), prompts, strict=True):
            if self.references is None:
                tokens = np.asarray(prompt[:SYNTHETIC_ANSWER_TOKENS], dtype=np.int32)
            else:
                tokens = np.asarray(self.references[index], dtype=np.int32)
            answers.append(tokens[: max(0, len(tokens) - self.drop)] if self.drop else tokens)
        remaining = self.batch_s - (time.perf_counter() - started)
        if remaining > 0:
            time.sleep(remaining)
        return answers
