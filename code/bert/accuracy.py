"""BERT accuracy: LoadGen accuracy log -> SQuAD answers -> EM/F1 -> accuracy.txt, as the MLCommons reference scores.

    python -m code.bert.accuracy --log_file LOG_DIR/mlperf_log_accuracy.json \
        --preprocessed_data_dir build/preprocessed_data --squad_json build/data/dev-v1.1.json \
        --accuracy_target 0.99 [--out_file LOG_DIR/accuracy.txt]

Post-processing follows the reference's `accuracy-squad.py` (n-best 20, answers of at most 30 tokens, spans must
start in a token's max-context window, text mapped back to the original words with the basic tokenizer's
alignment) and the metrics follow the official SQuAD v1.1 `evaluate-v1.1.py`: every question of the dev file
counts, one with no prediction scores 0.

accuracy.txt: its first line is `{"exact_match": X, "f1": Y}`, which the submission checker parses with
`^{["']exact_match["']\\:\\s*[\\d\\.]+,\\s*["']f1["']\\:\\s*([\\d\\.]+)}`; human-readable lines follow. The
`hash=` line the checker also wants is appended by MLCommons' `truncate_accuracy_log.py` at submission time.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from code.bert.squad import (
    MAX_SEQ_LENGTH,
    PAD_LOGIT,
    EvalFeature,
    PostprocessData,
    load_postprocess_data,
    tokenized_dir,
)
from code.bert.vocab import basic_tokenize

REFERENCE_F1 = 90.874
"""F1 of the fp32 reference BERT-Large on SQuAD v1.1 dev; MLPerf's targets are fractions of it."""
ACCURACY_TARGETS = {"bert-99": 0.99, "bert-99.9": 0.999}
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
NO_ANSWER_TEXT = "empty"
"""The reference's prediction for a question none of whose features produced a valid span."""
CHECKER_F1_PATTERN = r"^{[\"\']exact_match[\"\']\:\s*[\d\.]+,\s*[\"\']f1[\"\']\:\s*([\d\.]+)}"
"""The submission checker's ACC_PATTERN["F1"], kept here so tests prove accuracy.txt matches it."""


@dataclass
class BertAccuracyResult:
    exact_match: float
    f1: float
    target_f1: float
    passed: bool
    num_features_scored: int
    num_examples_with_features: int
    num_questions: int
    synthetic: bool = False

    def json_line(self) -> str:
        return json.dumps({"exact_match": self.exact_match, "f1": self.f1})


# ---------------------------------------------------------------------------------------------- the accuracy log


def decode_accuracy_log(log_file: Path, seq_length: int = MAX_SEQ_LENGTH) -> dict[int, np.ndarray]:
    """qsl_idx -> float64 `[seq_length, 2]` start/end logits, padded with PAD_LOGIT; the LAST entry of a qsl_idx wins.

    LoadGen logs a sample more than once when it issues it more than once (a TEST01 audit logs a sample of a
    performance run, which repeats the loaded samples). A feature is scored once, from its last response, because
    the reference keys its results by feature and each later entry overwrites the earlier one; every entry must
    still decode, as the reference decodes them all.
    """
    with open(log_file) as f:
        entries = json.load(f)
    results: dict[int, np.ndarray] = {}
    for entry in entries:
        qsl_idx = int(entry["qsl_idx"])
        raw = np.frombuffer(bytes.fromhex(entry["data"]), dtype=np.float32)
        if raw.size % 2:
            raise ValueError(f"{log_file}: qsl_idx {qsl_idx} has {raw.size} floats, not [L, 2] logits")
        logits = raw.reshape(-1, 2)
        if logits.shape[0] > seq_length:
            raise ValueError(f"{log_file}: qsl_idx {qsl_idx} has {logits.shape[0]} positions > {seq_length}")
        padded = np.full((seq_length, 2), PAD_LOGIT, dtype=np.float64)
        padded[: logits.shape[0]] = logits
        results[qsl_idx] = padded
    return results


# ------------------------------------------------------------------------------------------------ post-processing


def get_final_text(pred_text: str, orig_text: str) -> str:
    """Project the normalized predicted text back onto the original words (e.g. "steve smith" in "Steve Smith's").

    Aligns characters of `orig_text` with those of its basic tokenization, ignoring spaces; when that alignment
    fails (lengths differ after normalization) the whole original span is returned, as the reference does.
    """

    def strip_spaces(text: str) -> tuple[str, dict[int, int]]:
        chars, mapping = [], {}
        for i, c in enumerate(text):
            if c == " ":
                continue
            mapping[len(chars)] = i
            chars.append(c)
        return "".join(chars), mapping

    tok_text = " ".join(basic_tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_ns_to_s = strip_spaces(orig_text)
    tok_ns, tok_ns_to_s = strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
    orig_start = orig_ns_to_s.get(tok_s_to_ns.get(start, -1))
    if orig_start is None:
        return orig_text
    orig_end = orig_ns_to_s.get(tok_s_to_ns.get(end, -1))
    if orig_end is None:
        return orig_text
    return orig_text[orig_start : orig_end + 1]


def _span_text(feature: EvalFeature, doc_tokens: list[str], start: int, end: int) -> str:
    tok_text = " ".join(feature.tokens[start : end + 1]).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    orig_text = " ".join(doc_tokens[feature.token_to_orig_map[start] : feature.token_to_orig_map[end] + 1])
    return get_final_text(tok_text, orig_text)


def best_span(
    feature: EvalFeature,
    logits: np.ndarray,
    n_best_size: int | None = N_BEST_SIZE,
    max_answer_length: int = MAX_ANSWER_LENGTH,
    max_context: bool = True,
) -> tuple[float, int, int] | None:
    """The feature's best answer span: (score, start, end), or None when no span is valid.

    The scorer's rules, as the reference applies them: start among the ``n_best_size`` highest start logits and end
    among the highest end logits (``None``: every position, in position order), both on context tokens, the start
    in its max-context window (``max_context``), start <= end, at most ``max_answer_length`` tokens; the score is
    the sum of the two logits. Ties go to the first candidate in (start, end) order, as the reference's stable sort
    and strict comparison do. One function, so the accuracy scorer and the tools that compare spans choose alike.
    """
    start_logits, end_logits = logits[:, 0], logits[:, 1]
    num_tokens = len(feature.tokens)

    def candidates(values: np.ndarray) -> np.ndarray:
        order = np.arange(len(values)) if n_best_size is None else np.argsort(-values, kind="stable")[:n_best_size]
        return np.array([p for p in order.tolist() if p < num_tokens and p in feature.token_to_orig_map],
                        dtype=np.int64)

    starts = candidates(start_logits)
    if max_context:
        starts = starts[[bool(feature.token_is_max_context.get(int(p), False)) for p in starts]]
    ends = candidates(end_logits)
    width = ends[None, :] - starts[:, None] + 1
    valid = (width >= 1) & (width <= max_answer_length)
    if not valid.any():
        return None
    rows, cols = np.nonzero(valid)  # row-major: the reference's loop order
    scores = start_logits[starts[rows]] + end_logits[ends[cols]]
    # The loop keeps its first candidate until one scores strictly higher: a NaN first stays, a later NaN never wins.
    best = 0 if np.isnan(scores[0]) else int(np.argmax(np.where(np.isnan(scores), -np.inf, scores)))
    return float(scores[best]), int(starts[rows[best]]), int(ends[cols[best]])


def predict_answers(
    data: PostprocessData,
    logits_by_feature: dict[int, np.ndarray],
    n_best_size: int = N_BEST_SIZE,
    max_answer_length: int = MAX_ANSWER_LENGTH,
) -> dict[str, str]:
    """qas_id -> predicted answer text for every example (NO_ANSWER_TEXT when no feature gives a valid span).

    The best of the n-best list is the best-scoring valid span over the example's features (``best_span`` each;
    n-best deduplicates by text, which never drops its first entry), so only that span is turned into text.
    """
    features_of: dict[int, list[int]] = {}
    for feature_index, feature in enumerate(data.features):
        features_of.setdefault(feature.example_index, []).append(feature_index)

    predictions: dict[str, str] = {}
    for example_index, qas_id in enumerate(data.qas_ids):
        best: tuple[float, int, int, int] | None = None  # score, feature, start, end
        for feature_index in features_of.get(example_index, []):
            logits = logits_by_feature.get(feature_index)
            if logits is None:
                continue
            found = best_span(data.features[feature_index], logits, n_best_size, max_answer_length)
            # Strictly greater: the first feature's span wins ties, as the reference's stable sort keeps it first.
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], feature_index, found[1], found[2])
        if best is None:
            predictions[qas_id] = NO_ANSWER_TEXT
        else:
            _, feature_index, start, end = best
            predictions[qas_id] = _span_text(
                data.features[feature_index], data.example_doc_tokens[example_index], start, end
            )
    return predictions


# -------------------------------------------------------------------------------------------- SQuAD v1.1 metrics


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, drop articles (a/an/the), collapse whitespace: the official normalization."""
    text = text.lower()
    text = "".join(c for c in text if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token-overlap F1 of the normalized strings."""
    pred_tokens = normalize_answer(prediction).split()
    truth_tokens = normalize_answer(ground_truth).split()
    num_same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def metric_max_over_ground_truths(
    metric: Callable[[str, str], float], prediction: str, ground_truths: list[str]
) -> float:
    return max(metric(prediction, truth) for truth in ground_truths)


def squad_evaluate(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
    """EM and F1 (x100) over every question of `dataset` (the file's "data" list); unanswered ones score 0."""
    exact = f1 = 0.0
    total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                exact += metric_max_over_ground_truths(exact_match_score, predictions[qa["id"]], truths)
                f1 += metric_max_over_ground_truths(f1_score, predictions[qa["id"]], truths)
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# ----------------------------------------------------------------------------------------------------- top level


def evaluate_accuracy_log(
    accuracy_log: Path,
    preprocessed_dir: Path,
    squad_json: Path,
    accuracy_target: float,
    out_file: Path,
    synthetic: bool = False,
    scored_questions_only: bool = False,
    data: PostprocessData | None = None,
) -> BertAccuracyResult:
    """Score a LoadGen accuracy log; write `out_file` (accuracy.txt) and predictions.json beside it.

    `accuracy_target` is the fraction of REFERENCE_F1 to reach (0.99 for bert-99, 0.999 for bert-99.9).
    `synthetic` only labels the report: logits of synthetic inputs cannot answer SQuAD questions.
    `scored_questions_only` (``--num_samples``): EM and F1 over the questions the log answers, not the whole file,
    so a quick check on the first N samples reads like the full figure instead of N/10,833 of it.
    `data`: the eval file already read (a run reads it before LoadGen, to refuse a damaged one up front).
    """
    if data is None:
        data = load_postprocess_data(tokenized_dir(preprocessed_dir))
    logits = decode_accuracy_log(Path(accuracy_log))
    unknown = [i for i in logits if not 0 <= i < len(data.features)]
    if unknown:
        raise ValueError(
            f"{accuracy_log} has qsl_idx {unknown[:5]} outside the {len(data.features)} preprocessed features: "
            "was it produced from another dataset?"
        )
    predictions = predict_answers(data, logits)
    with open(squad_json, encoding="utf-8") as f:
        dataset = json.load(f)["data"]
    if scored_questions_only:  # the questions with at least one feature in the log
        asked = {data.qas_ids[data.features[i].example_index] for i in logits}
        dataset = [{**article, "paragraphs": [{**paragraph, "qas": [qa for qa in paragraph["qas"] if qa["id"] in asked]}
                                              for paragraph in article["paragraphs"]]}
                   for article in dataset]
    scores = squad_evaluate(dataset, predictions)
    target_f1 = accuracy_target * REFERENCE_F1
    examples_scored = len({data.features[i].example_index for i in logits})
    result = BertAccuracyResult(
        exact_match=scores["exact_match"],
        f1=scores["f1"],
        target_f1=target_f1,
        passed=scores["f1"] >= target_f1,
        num_features_scored=len(logits),
        num_examples_with_features=examples_scored,
        num_questions=sum(len(p["qas"]) for a in dataset for p in a["paragraphs"]),
        synthetic=synthetic,
    )

    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    (out_file.parent / "predictions.json").write_text(json.dumps(predictions, indent=4, ensure_ascii=False) + "\n")
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        result.json_line(),
        f"{verdict}: F1 {result.f1:.3f} vs target {target_f1:.3f} ({accuracy_target} x {REFERENCE_F1})",
        f"features scored: {result.num_features_scored} of {len(data.features)}; questions with a scored feature: "
        f"{result.num_examples_with_features} of {result.num_questions}",
        f"inputs: {'SYNTHETIC (accuracy is meaningless)' if synthetic else 'SQuAD v1.1'}",
    ]
    out_file.write_text("\n".join(lines) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score a BERT LoadGen accuracy log (SQuAD v1.1 EM/F1).")
    parser.add_argument("--log_file", type=Path, required=True, help="mlperf_log_accuracy.json")
    parser.add_argument("--preprocessed_data_dir", type=Path, required=True)
    parser.add_argument("--squad_json", type=Path, required=True, help="dev-v1.1.json")
    parser.add_argument("--accuracy_target", type=float, default=ACCURACY_TARGETS["bert-99"],
                        help="fraction of the reference F1 90.874 (0.99 or 0.999)")
    parser.add_argument("--out_file", type=Path, default=None, help="default: accuracy.txt beside the log")
    parser.add_argument("--synthetic", action="store_true", help="label the report as from synthetic inputs")
    args = parser.parse_args(argv)
    out_file = args.out_file or args.log_file.parent / "accuracy.txt"
    result = evaluate_accuracy_log(
        args.log_file, args.preprocessed_data_dir, args.squad_json, args.accuracy_target, out_file, args.synthetic
    )
    print(out_file.read_text(), end="")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
