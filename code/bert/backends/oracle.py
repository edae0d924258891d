"""Oracle BERT backend: logits that point at the gold answer, to check the pipeline end to end without a model.

With `oracle_shift == 0` the whole path (QSL -> batcher -> responses -> LoadGen accuracy log -> post-processing ->
EM/F1) must give ~100 F1 (exactly 100 on the test fixture; on SQuAD dev a little less, where the annotated answer
is a part of a word piece sequence that post-processing cannot reproduce). A non-zero shift moves both ends by that
many tokens, which must make the accuracy check FAIL: proof that the check can fail.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from code.bert.backends import BackendContext
    from code.bert.dataset import BertFeatures
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport

LOW_LOGIT = -10.0
HIGH_LOGIT = 10.0


@dataclass(frozen=True)
class OracleOptions:
    features: BertFeatures | None  # needs the gold positions
    oracle_shift: int = 0  # move the answer by this many tokens (a failing oracle)
    oracle_batch_ms: float = 0.0  # each batch takes at least this long (a load-independent pace)


class OracleBertBackend:
    """Puts HIGH at the gold start/end of each feature and LOW elsewhere.

    A feature whose window does not contain the answer (gold 0/0) gets its peak at position 0, `[CLS]`, which
    post-processing never accepts as an answer, so that window proposes only low-scoring spans.
    """

    @staticmethod
    def options_from(config: ResolvedConfig, context: BackendContext) -> OracleOptions:
        return OracleOptions(features=context.features, oracle_shift=config["oracle_shift"],
                             oracle_batch_ms=config["oracle_batch_ms"])

    @staticmethod
    def engine_dir(config: ResolvedConfig, context: BackendContext) -> Path | None:
        return None

    @staticmethod
    def generate_engine(config: ResolvedConfig, context: BackendContext) -> EngineReport:
        return {"engine": "none: the oracle backend runs no model"}

    def __init__(self, options: OracleOptions) -> None:
        features = options.features
        if features is None or features.gold_positions is None:
            raise ValueError(
                "the oracle backend needs features with gold positions (real preprocessed SQuAD: "
                "`make preprocess_data BENCHMARKS=bert`); synthetic features have none"
            )
        self.gold_positions = np.asarray(features.gold_positions, dtype=np.int64)
        self.lengths = np.asarray(features.lengths, dtype=np.int64)
        self.shift = options.oracle_shift
        self.batch_s = options.oracle_batch_ms / 1000

    def run_batch(
        self, sample_indices: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray
    ) -> np.ndarray:
        """Float32 `[B, S, 2]` start/end logits for the batch (S = the inputs' trimmed length), returned no sooner
        than `oracle_batch_ms` after the call (sleeping releases the GIL, as a device's wait would)."""
        started = time.perf_counter()
        batch, seq = input_ids.shape
        idx = np.asarray(sample_indices, dtype=np.int64)
        logits = np.full((batch, seq, 2), LOW_LOGIT, dtype=np.float32)
        gold = self.gold_positions[idx]
        has_answer = gold[:, 0] > 0
        last = np.minimum(self.lengths[idx], seq) - 1
        start = np.where(has_answer, np.clip(gold[:, 0] + self.shift, 0, last), 0)
        end = np.where(has_answer, np.clip(gold[:, 1] + self.shift, 0, last), 0)
        rows = np.arange(batch)
        logits[rows, start, 0] = HIGH_LOGIT
        logits[rows, end, 1] = HIGH_LOGIT
        remaining = self.batch_s - (time.perf_counter() - started)
        if remaining > 0:
            time.sleep(remaining)
        return logits
