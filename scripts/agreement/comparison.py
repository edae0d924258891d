"""The comparison of a candidate engine's logits with float32's on the same features: logit errors, span and
answer agreement after the accuracy scorer's post-processing, and SQuAD F1 against the gold answers (the gate's
figure). Plain arrays in, an ``Agreement`` out: no engine, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from code.bert.accuracy import NO_ANSWER_TEXT, predict_answers, squad_evaluate
from code.bert.squad import PostprocessData


@dataclass
class Agreement:
    """How a candidate's logits compare with the reference's on the same features."""

    features: int
    max_abs_error: float
    mean_abs_error: float
    span_agreement: float
    spans_differ: int
    questions: int
    answer_agreement: float
    answers_differ: int
    reference_logit_std: float  # scale of the logits, to read the errors against
    differing_features: list[int] = field(default_factory=list)  # the first few, for a closer look
    # The gate: SQuAD F1 against the questions' gold answers, the candidate's over float32's (TARGET_BARS: MLPerf's
    # 0.99 / 0.999 with a margin for the proxy). Means something only for a trained QA model (minilm-l6-qa): a
    # random head's F1 is near 0.
    reference_f1: float | None = None
    candidate_f1: float | None = None

    @property
    def f1_ratio(self) -> float | None:
        if self.reference_f1 is None or self.candidate_f1 is None or self.reference_f1 <= 0:
            return None
        return self.candidate_f1 / self.reference_f1


def logit_errors(reference: np.ndarray, candidate: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Per-feature max |error| over real tokens, the overall max, and the mean over every real token's logits."""
    positions = np.arange(reference.shape[1])[None, :] < lengths[:, None]  # [N, S] real tokens
    error = np.abs(reference.astype(np.float64) - candidate.astype(np.float64))  # [N, S, 2]
    per_feature = np.where(positions, error.max(axis=2), 0.0).max(axis=1)
    total = float(np.where(positions, error.sum(axis=2), 0.0).sum())
    count = 2 * int(positions.sum())
    return per_feature, float(per_feature.max(initial=0.0)), total / max(count, 1)


def position_view(data: PostprocessData) -> PostprocessData:
    """The same features, each its own example, with every token renamed ``p<position>``.

    ``predict_answers`` then returns a feature's best span as text like ``"p17 p18 p19"``: its start and end
    positions, chosen by exactly the scorer's rules (the valid positions and max-context flags are kept).
    """
    features, doc_tokens = [], []
    for index, feature in enumerate(data.features):
        markers = [f"p{k}" for k in range(len(feature.tokens))]
        features.append(
            replace(
                feature,
                example_index=index,
                tokens=markers,
                token_to_orig_map={k: k for k in feature.token_to_orig_map},
            )
        )
        doc_tokens.append(markers)
    return PostprocessData([f"feature-{i}" for i in range(len(features))], doc_tokens, features)


def best_spans(view: PostprocessData, logits: np.ndarray) -> list[tuple[int, int] | None]:
    """Per feature, the best (start, end) after post-processing, or None when no span is valid."""
    texts = predict_answers(view, {i: logits[i] for i in range(len(view.features))})
    spans: list[tuple[int, int] | None] = []
    for qas_id in view.qas_ids:
        text = texts[qas_id]
        if text == NO_ANSWER_TEXT:
            spans.append(None)
            continue
        words = text.split()
        spans.append((int(words[0][1:]), int(words[-1][1:])))
    return spans


def compare(
    reference: np.ndarray,
    candidate: np.ndarray,
    lengths: np.ndarray,
    data: PostprocessData,
    view: PostprocessData | None = None,
    gold: list[dict] | None = None,
) -> Agreement:
    """Logit errors, per-feature span agreement and per-question answer agreement of two [N, 384, 2] logit sets;
    with ``gold`` (a SQuAD file's "data" list) also both sides' F1 against the gold answers."""
    view = view or position_view(data)
    _, max_error, mean_error = logit_errors(reference, candidate, lengths)
    reference_spans, candidate_spans = best_spans(view, reference), best_spans(view, candidate)
    differ = [i for i, (a, b) in enumerate(zip(reference_spans, candidate_spans, strict=True)) if a != b]
    reference_answers = predict_answers(data, {i: reference[i] for i in range(len(data.features))})
    candidate_answers = predict_answers(data, {i: candidate[i] for i in range(len(data.features))})
    answers_differ = sum(1 for q in data.qas_ids if reference_answers[q] != candidate_answers[q])
    n, questions = len(data.features), len(data.qas_ids)
    positions = np.arange(reference.shape[1])[None, :] < lengths[:, None]
    return Agreement(
        features=n,
        max_abs_error=max_error,
        mean_abs_error=mean_error,
        span_agreement=1.0 - len(differ) / max(n, 1),
        spans_differ=len(differ),
        questions=questions,
        answer_agreement=1.0 - answers_differ / max(questions, 1),
        answers_differ=answers_differ,
        reference_logit_std=float(reference[positions].std()) if positions.any() else 0.0,
        differing_features=differ[:20],
        reference_f1=squad_evaluate(gold, reference_answers)["f1"] if gold else None,
        candidate_f1=squad_evaluate(gold, candidate_answers)["f1"] if gold else None,
    )
