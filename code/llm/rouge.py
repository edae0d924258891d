"""LLM accuracy as MLPerf scores summaries: a LoadGen accuracy log's token ids, and ROUGE of decoded predictions.

``read_accuracy_log`` reads the first response of each qsl_idx (log order) as int32 or int64 token ids, with the
checks that catch a log written in the other width. ``compute_rouge`` is HF evaluate's ROUGE with
``use_aggregator=False`` as the MLCommons references call it: rouge_score's ``RougeScorer(rouge1, rouge2, rougeL,
rougeLsum, use_stemmer=True).score(reference, prediction)`` per sample on text put one sentence per line
(``sentence_split``), F-measures averaged, x100 and rounded to 4 places; gen_len counts the characters of the
post-processed predictions. A benchmark adds its tokenizer's decode, its reference scores and its targets
(``summary_accuracy.py``; GPT-J: ``code/gptj/accuracy.py``, Llama: ``code/llama31/accuracy.py``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from nltk.stem import porter
from rouge_score import rouge_scorer, tokenize, tokenizers

from code.llm.sentence_split import newline_sentences

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
DTYPES = {"int32": np.int32, "int64": np.int64}
MAX_TOKEN_ID = 2**31 - 1

_HEX = re.compile(r"[0-9a-fA-F]*")


# ---------------------------------------------------------------------------------------------- the accuracy log


def _token_ids(log_path: Path, index: int, entry: Any, dtype: str) -> tuple[int, np.ndarray]:
    where = f"{log_path}: entry {index}"
    if not isinstance(entry, dict) or "qsl_idx" not in entry or "data" not in entry:
        raise ValueError(f"{where} is not an object with 'qsl_idx' and 'data': {str(entry)[:80]}")
    qsl_idx, data = entry["qsl_idx"], entry["data"]
    if isinstance(qsl_idx, bool) or not isinstance(qsl_idx, int) or qsl_idx < 0:
        raise ValueError(f"{where} has qsl_idx {qsl_idx!r}, not a non-negative integer")
    where = f"{where} (qsl_idx {qsl_idx})"
    if not isinstance(data, str):
        raise ValueError(f"{where}: 'data' is {type(data).__name__}, not a hex string")
    bad = _HEX.match(data).end()
    if bad < len(data):
        raise ValueError(f"{where}: 'data' is not hexadecimal: {data[bad]!r} at character {bad}")
    if len(data) % 2:
        raise ValueError(f"{where}: 'data' has an odd number of hex digits ({len(data)}): truncated or garbled")
    raw = bytes.fromhex(data)
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    if len(raw) % itemsize:
        other = "int32" if dtype == "int64" else "int64"
        raise ValueError(f"{where}: {len(raw)} bytes is not a whole number of {dtype} token ids; written as {other}?")
    ids = np.frombuffer(raw, dtype=DTYPES[dtype]).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() > MAX_TOKEN_ID):
        raise ValueError(
            f"{where}: token id {int(ids.min() if ids.min() < 0 else ids.max())} is not a valid id; "
            f"was the log written as {'int32' if dtype == 'int64' else 'int64'}?"
        )
    return qsl_idx, ids


def read_accuracy_log(log_path: Path, dtype: str = "int32") -> tuple[dict[int, np.ndarray], int]:
    """(qsl_idx -> token ids, in log order, first entry of each qsl_idx; number of log entries).

    LoadGen may log a sample more than once; like the reference, only its first response counts.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    log_path = Path(log_path)
    try:
        entries = json.loads(log_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{log_path} is not valid JSON ({error}); a log truncated for submission cannot be scored: use the full log"
        ) from None
    if not isinstance(entries, list):
        raise ValueError(f"{log_path} holds a {type(entries).__name__}, not a list of LoadGen responses")
    if not entries:
        raise ValueError(f"{log_path} has no entries: the run logged no responses (was it an accuracy run?)")
    results: dict[int, np.ndarray] = {}
    for index, entry in enumerate(entries):
        qsl_idx, ids = _token_ids(log_path, index, entry, dtype)
        results.setdefault(qsl_idx, ids)
    if dtype == "int32":
        _reject_int64_read_as_int32(log_path, results)
    return results, len(entries)


def _reject_int64_read_as_int32(log_path: Path, results: dict[int, np.ndarray]) -> None:
    """int64 ids read as int32 interleave each id with a zero high word: refuse rather than score garbage."""
    odd = np.concatenate([ids[1::2] for ids in results.values()])
    if odd.size >= 16 and not odd.any():
        raise ValueError(
            f"{log_path}: every second int32 value is 0, as when int64 token ids are read as int32; "
            "score it with dtype='int64'"
        )


# ------------------------------------------------------------------------------------------------------- metrics


class _MemoizedStemmer:
    """nltk's PorterStemmer, which rouge_score's use_stemmer=True builds, with a cache: same stems, half the time."""

    def __init__(self) -> None:
        self.stem = functools.lru_cache(maxsize=None)(porter.PorterStemmer().stem)


class _StemmingTokenizer(tokenizers.Tokenizer):
    """rouge_score's DefaultTokenizer(use_stemmer=True): its own `tokenize.tokenize`, with the memoized stemmer."""

    def __init__(self) -> None:
        self._stemmer = _MemoizedStemmer()

    def tokenize(self, text: str) -> list[str]:
        return tokenize.tokenize(text, self._stemmer)


def compute_rouge(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float | int]:
    """The reference's metrics of decoded predictions against their reference highlights (paired by position).

    Both are stripped and put one sentence per line first. Returns rouge1, rouge2, rougeL, rougeLsum (mean per-sample
    F-measure x100, rounded to 4 places as `round(np.mean(v) * 100, 4)`), gen_len (characters of the post-processed
    predictions) and gen_num (their count).
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    if not predictions:
        raise ValueError("no predictions to score")
    preds = [newline_sentences(p) for p in predictions]
    refs = [newline_sentences(r) for r in references]
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True, tokenizer=_StemmingTokenizer())
    fmeasures: dict[str, list[float]] = {t: [] for t in ROUGE_TYPES}
    for ref, pred in zip(refs, preds, strict=True):
        scores = scorer.score(ref, pred)
        for rouge_type in ROUGE_TYPES:
            fmeasures[rouge_type].append(scores[rouge_type].fmeasure)
    result: dict[str, float | int] = {t: float(round(np.mean(v) * 100, 4)) for t, v in fmeasures.items()}
    result["gen_len"] = sum(len(p) for p in preds)
    result["gen_num"] = len(preds)
    return result
