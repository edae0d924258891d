"""The BERT QSL's samples: tokenized SQuAD features, or synthetic ones with SQuAD-like lengths.

Everything is held in RAM as int32 `[N, 384]` (the reference's QSL load/unload are no-ops too: 10,833 features
are ~50 MB). Batches are trimmed to their longest sequence, so the length distribution is what sets performance;
synthetic features therefore reproduce SQuAD's lengths, not just its shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from code.bert.squad import ARRAY_FILES, GOLD_FILE, MANIFEST_FILE, MAX_SEQ_LENGTH, tokenized_dir
from code.bert.vocab import CLS_TOKEN, SEP_TOKEN, VOCAB_SIZE, find_vocab, load_vocab
from code.common.faults import DataFileError, reading

# Synthetic length model (documented in documentation/bert.md). Question word pieces ~ Normal(14, 4) clipped to
# [4, 40]; context word pieces ~ LogNormal(median 130, sigma 0.5) clipped to [16, 1000]; a context longer than the
# window is split with stride 128 exactly like real preprocessing, which yields the tail of full 384-token windows.
SYNTH_QUESTION_MEAN, SYNTH_QUESTION_STD, SYNTH_QUESTION_RANGE = 14.0, 4.0, (4, 40)
SYNTH_CONTEXT_MEDIAN, SYNTH_CONTEXT_SIGMA, SYNTH_CONTEXT_RANGE = 130.0, 0.5, (16, 1000)
RELOAD_HINT = "preprocess it again: make preprocess_data BENCHMARKS=bert"
SYNTH_DOC_STRIDE = 128
SYNTH_MEAN_LENGTH_BAND = (150.0, 185.0)
"""Where the mean real length of synthetic features must fall (SQuAD v1.1 dev features average ~150-180)."""

# Fallback when no vocab file can be found: in bert-uncased, ids 1996.. are ordinary words, 101/102 are [CLS]/[SEP].
_FALLBACK_WORD_IDS = (1996, 29612)
_FALLBACK_CLS, _FALLBACK_SEP = 101, 102


def _ordinary_token_ids(vocab_path: Path | None) -> tuple[np.ndarray, int, int]:
    """Ids of the vocab's ordinary word pieces (not `[PAD]`, `[unusedN]`, `[CLS]`, ...), and [CLS]/[SEP]."""
    try:
        path = Path(vocab_path) if vocab_path is not None else find_vocab()
    except (FileNotFoundError, ValueError):
        return np.arange(*_FALLBACK_WORD_IDS, dtype=np.int32), _FALLBACK_CLS, _FALLBACK_SEP
    vocab = load_vocab(path)
    ids = np.array(
        sorted(i for token, i in vocab.items() if not (token.startswith("[") and token.endswith("]"))),
        dtype=np.int32,
    )
    return ids, vocab[CLS_TOKEN], vocab[SEP_TOKEN]


@dataclass
class BertFeatures:
    """Model inputs of every QSL sample, with their real lengths (for length-sorted batching and trimming)."""

    input_ids: np.ndarray  # int32 [N, 384]
    segment_ids: np.ndarray  # int32 [N, 384]
    input_mask: np.ndarray  # int32 [N, 384]
    lengths: np.ndarray  # int32 [N], real tokens (mask sum)
    is_synthetic: bool
    gold_positions: np.ndarray | None = None  # int32 [N, 2] gold start/end in the window, 0/0 if absent (oracle)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @classmethod
    def load(cls, preprocessed_dir: Path) -> BertFeatures:
        """Load `squad_tokenized/` from `preprocessed_dir` (or that folder itself, under any name)."""
        directory = tokenized_dir(preprocessed_dir)
        missing = [name for name in (*ARRAY_FILES, MANIFEST_FILE) if not (directory / name).is_file()]
        if missing:
            raise DataFileError(f"BERT preprocessed data in {directory} is missing or incomplete "
                                f"({', '.join(missing)}); {RELOAD_HINT}")
        with reading(directory / MANIFEST_FILE, RELOAD_HINT):
            manifest = json.loads((directory / MANIFEST_FILE).read_text())
        input_ids, segment_ids, input_mask = (_load_array(directory / name) for name in ARRAY_FILES)
        expected = (int(manifest["num_features"]), MAX_SEQ_LENGTH)
        for name, array in zip(ARRAY_FILES, (input_ids, segment_ids, input_mask), strict=True):
            if array.shape != expected:
                raise DataFileError(f"{directory / name} has shape {array.shape}, manifest says {expected}; "
                                    f"{RELOAD_HINT}")
        for name, array, limit in zip(ARRAY_FILES, (input_ids, segment_ids, input_mask), (VOCAB_SIZE, 2, 2),
                                      strict=True):
            if array.size and (int(array.min()) < 0 or int(array.max()) >= limit):
                raise DataFileError(f"{directory / name} holds values outside [0, {limit}) (token ids: BERT's "
                                    f"vocabulary; segment ids and mask: 0 or 1); {RELOAD_HINT}")
        gold = None
        if (directory / GOLD_FILE).is_file():
            gold = _load_array(directory / GOLD_FILE)
        lengths = input_mask.sum(axis=1, dtype=np.int64).astype(np.int32)
        return cls(input_ids, segment_ids, input_mask, lengths, is_synthetic=False, gold_positions=gold)

    @classmethod
    def synthetic(cls, count: int, seed: int = 0, vocab_path: Path | None = None,
                  full_length: bool = False) -> BertFeatures:
        """`count` features shaped like SQuAD's: `[CLS] question [SEP] context-window [SEP]`, SQuAD-like lengths.

        Deterministic in `seed`. Examples are drawn (question length, context length) and split into windows
        with stride 128 as real preprocessing does, until `count` features exist. ``full_length``: every feature
        fills all 384 positions (the worst case for throughput).
        """
        rng = np.random.default_rng(seed)
        word_ids, cls_id, sep_id = _ordinary_token_ids(vocab_path)
        input_ids = np.zeros((count, MAX_SEQ_LENGTH), dtype=np.int32)
        segment_ids = np.zeros((count, MAX_SEQ_LENGTH), dtype=np.int32)
        input_mask = np.zeros((count, MAX_SEQ_LENGTH), dtype=np.int32)
        lengths = np.zeros(count, dtype=np.int32)
        row = 0
        while row < count:
            q = int(np.clip(round(rng.normal(SYNTH_QUESTION_MEAN, SYNTH_QUESTION_STD)), *SYNTH_QUESTION_RANGE))
            d = int(np.clip(round(rng.lognormal(np.log(SYNTH_CONTEXT_MEDIAN), SYNTH_CONTEXT_SIGMA)),
                            *SYNTH_CONTEXT_RANGE))
            question = rng.choice(word_ids, size=q)
            context = rng.choice(word_ids, size=d)
            max_doc = MAX_SEQ_LENGTH - q - 3
            if full_length:
                d = max_doc
                context = rng.choice(word_ids, size=d)
            start = 0
            while row < count:
                length = min(d - start, max_doc)
                n = q + length + 3
                input_ids[row, 0] = cls_id
                input_ids[row, 1 : q + 1] = question
                input_ids[row, q + 1] = sep_id
                input_ids[row, q + 2 : q + 2 + length] = context[start : start + length]
                input_ids[row, n - 1] = sep_id
                segment_ids[row, q + 2 : n] = 1
                input_mask[row, :n] = 1
                lengths[row] = n
                row += 1
                if start + length == d:
                    break
                start += min(length, SYNTH_DOC_STRIDE)
        return cls(input_ids, segment_ids, input_mask, lengths, is_synthetic=True)

    def describe_lengths(self) -> dict[str, float]:
        """Mean/p50/p90/max real length, for logs (what performance depends on)."""
        if len(self) == 0:
            return {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "max": 0}
        lengths = self.lengths.astype(np.float64)
        return {
            "count": len(self),
            "mean": round(float(lengths.mean()), 2),
            "p50": float(np.percentile(lengths, 50)),
            "p90": float(np.percentile(lengths, 90)),
            "max": int(self.lengths.max()),
        }

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Inputs of `indices`, trimmed to their longest sequence: int32 C-contiguous `[B, S]` each."""
        idx = np.asarray(indices, dtype=np.int64)
        seq = int(self.lengths[idx].max()) if idx.size else 0
        return (
            np.ascontiguousarray(self.input_ids[idx, :seq]),
            np.ascontiguousarray(self.segment_ids[idx, :seq]),
            np.ascontiguousarray(self.input_mask[idx, :seq]),
        )


def _load_array(path: Path) -> np.ndarray:
    """An int32 array from a preprocessed .npy file; a short or damaged file is a DataFileError naming it."""
    with reading(path, RELOAD_HINT, also=(ValueError,)):
        return np.ascontiguousarray(np.load(path), dtype=np.int32)
