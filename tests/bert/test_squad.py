"""SQuAD v1.1 preprocessing, features, post-processing, metrics and the oracle backend (no LoadGen, no model)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from code.bert.accuracy import (
    CHECKER_F1_PATTERN,
    NO_ANSWER_TEXT,
    PAD_LOGIT,
    REFERENCE_F1,
    decode_accuracy_log,
    evaluate_accuracy_log,
    exact_match_score,
    f1_score,
    get_final_text,
    metric_max_over_ground_truths,
    normalize_answer,
    squad_evaluate,
)
from code.bert.backends.oracle import OracleBertBackend, OracleOptions
from code.bert.dataset import SYNTH_MEAN_LENGTH_BAND, BertFeatures
from code.bert.preprocess_data import main as preprocess_main
from code.bert.preprocess_data import preprocess
from code.bert.squad import (
    DOC_STRIDE,
    MAX_QUERY_LENGTH,
    MAX_SEQ_LENGTH,
    TOKENIZED_SUBDIR,
    convert_examples_to_features,
    read_squad_examples,
)
from code.bert.vocab import VOCAB_SIZE, BertTokenizer, find_vocab
from code.common.faults import DataFileError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "squad_tiny.json"
FIXTURE_QUESTIONS = 20
FIXTURE_FEATURES = 53  # 11 questions x 4 windows on the long context + 9 single-window questions


@pytest.fixture(scope="module")
def vocab() -> Path:
    return find_vocab()


@pytest.fixture(scope="module")
def tokenizer(vocab) -> BertTokenizer:
    return BertTokenizer(vocab)


@pytest.fixture(scope="module")
def squad(tokenizer):
    examples, paragraphs = read_squad_examples(FIXTURE)
    return examples, convert_examples_to_features(examples, tokenizer)


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory, vocab) -> Path:
    root = tmp_path_factory.mktemp("preprocessed")
    preprocess(FIXTURE, root / TOKENIZED_SUBDIR, vocab)
    return root


def _doc_pieces(example, tokenizer) -> list[str]:
    return [piece for word in example.doc_tokens for piece in tokenizer.tokenize(word)]


# ------------------------------------------------------------------------------------------ vocab and tokenizer


def test_vocab_fallback_and_model_copy(tmp_path, vocab):
    assert sum(1 for _ in open(vocab, "rb")) == VOCAB_SIZE
    assert find_vocab(tmp_path) == vocab  # no model downloaded: the packaged copy
    model_copy = tmp_path / "bert" / "vocab.txt"
    model_copy.parent.mkdir()
    shutil.copy(vocab, model_copy)
    assert find_vocab(tmp_path) == model_copy  # the model's own vocab wins
    model_copy.write_text("[PAD]\n[UNK]\n")
    with pytest.raises(ValueError, match="30522"):
        find_vocab(tmp_path)


def test_tokenizer_words(tokenizer):
    assert tokenizer.tokenize("hemp") == ["hem", "##p"]
    assert tokenizer.tokenize("Zürich") == ["zurich"]  # lower-cased, accent stripped
    assert tokenizer.tokenize("(1684-1699).") == ["(", "168", "##4", "-", "1699", ")", "."]
    assert tokenizer.tokenize("world-class") == ["world", "-", "class"]
    assert tokenizer.tokenize("Merrowick") == ["mer", "##row", "##ick"]
    assert tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "the", "zurich"]) == [101, 102, 1996, 10204]


def test_tokenizer_matches_transformers(vocab, tokenizer):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertTokenizer(vocab=str(vocab))
    data = json.loads(FIXTURE.read_text())
    texts = ["naïve façade — “quoted” 東京 x\u00a0y \u200bzero", "Hello,world!!", "x" * 120]
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            texts += [paragraph["context"], *[qa["question"] for qa in paragraph["qas"]]]
    for text in texts:
        assert tokenizer.tokenize(text) == reference.tokenize(text), text


# -------------------------------------------------------------------------------------------------- features


def test_feature_counts(squad, preprocessed):
    examples, features = squad
    assert len(examples) == FIXTURE_QUESTIONS
    assert len(features) == FIXTURE_FEATURES
    manifest = json.loads((preprocessed / TOKENIZED_SUBDIR / "manifest.json").read_text())
    assert manifest["num_examples"] == FIXTURE_QUESTIONS
    assert manifest["num_features"] == FIXTURE_FEATURES
    assert (manifest["max_seq_length"], manifest["doc_stride"], manifest["max_query_length"]) == (384, 128, 64)
    assert len(manifest["source_sha256"]) == 64


def test_windows_follow_stride(squad, tokenizer):
    examples, features = squad
    long_example = 0
    windows = [f for f in features if f.example_index == long_example]
    assert len(windows) == 4
    pieces = _doc_pieces(examples[long_example], tokenizer)
    for k, window in enumerate(windows):
        assert window.doc_span_index == k
        doc_part = window.tokens[window.doc_offset : -1]
        start = k * DOC_STRIDE  # each window starts 128 word pieces after the previous one
        assert doc_part == pieces[start : start + len(doc_part)]
        if k < len(windows) - 1:
            assert len(window.tokens) == MAX_SEQ_LENGTH
    assert (len(windows) - 1) * DOC_STRIDE + len(windows[-1].tokens[windows[-1].doc_offset : -1]) == len(pieces)


def test_layout_segments_and_mask(squad, tokenizer):
    examples, features = squad
    for feature in features:
        n, off = len(feature.tokens), feature.doc_offset
        query = tokenizer.tokenize(examples[feature.example_index].question_text)[:MAX_QUERY_LENGTH]
        assert feature.tokens[:off] == ["[CLS]", *query, "[SEP]"]
        assert feature.tokens[-1] == "[SEP]" and "[SEP]" not in feature.tokens[off:-1]
        assert feature.segment_ids == [0] * off + [1] * (n - off) + [0] * (MAX_SEQ_LENGTH - n)
        assert feature.input_mask == [1] * n + [0] * (MAX_SEQ_LENGTH - n)
        assert feature.input_ids == tokenizer.convert_tokens_to_ids(feature.tokens) + [0] * (MAX_SEQ_LENGTH - n)


def test_token_to_orig_map(squad, tokenizer):
    examples, features = squad
    for feature in features:
        words = examples[feature.example_index].doc_tokens
        assert sorted(feature.token_to_orig_map) == list(range(feature.doc_offset, len(feature.tokens) - 1))
        for position, word_index in feature.token_to_orig_map.items():
            assert feature.tokens[position] in tokenizer.tokenize(words[word_index])
    cafe = next(f for f in features if examples[f.example_index].qas_id == "cl-01")
    position = cafe.tokens.index("zurich")
    assert examples[cafe.example_index].doc_tokens[cafe.token_to_orig_map[position]] == "Zürich"


def test_max_context_picks_one_window(squad, tokenizer):
    examples, features = squad
    for example_index, example in enumerate(examples):
        windows = [f for f in features if f.example_index == example_index]
        owners = np.zeros(len(_doc_pieces(example, tokenizer)), dtype=int)
        for window in windows:
            for position, is_max in window.token_is_max_context.items():
                owners[window.doc_span_index * DOC_STRIDE + position - window.doc_offset] += is_max
        assert (owners == 1).all(), example.qas_id


def test_query_truncated_to_max_query_length(squad, tokenizer):
    examples, features = squad
    long_question = next(f for f in features if examples[f.example_index].qas_id == "gl-01")
    assert len(tokenizer.tokenize(examples[long_question.example_index].question_text)) > MAX_QUERY_LENGTH
    assert long_question.doc_offset == MAX_QUERY_LENGTH + 2


def test_gold_positions(squad):
    examples, features = squad
    for feature in features:
        if feature.start_position == 0:
            continue
        text = " ".join(feature.tokens[feature.start_position : feature.end_position + 1]).replace(" ##", "")
        gold = examples[feature.example_index].answers[0]
        assert normalize_answer(text.replace(" ", "")) == normalize_answer(gold.replace(" ", "")).replace(
            "ü", "u"
        ), (text, gold)
    # an answer near the end of window 0 is in three windows, and max context is not in window 0
    near_boundary = [f for f in features if examples[f.example_index].qas_id == "mw-07"]
    assert [f.start_position > 0 for f in near_boundary] == [True, True, True, False]
    assert not near_boundary[0].token_is_max_context[near_boundary[0].start_position]


# ---------------------------------------------------------------------------------------------------- metrics


def test_normalize_and_metrics():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("an apple a day") == "apple day"
    assert exact_match_score("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert exact_match_score("Eiffel", "Eiffel tower") == 0.0
    assert f1_score("hazelnut tart with cream", "hazelnut tart") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert f1_score("lark", "falcon") == 0.0
    assert metric_max_over_ground_truths(f1_score, "four hundred", ["nearly 400", "four hundred"]) == 1.0
    dataset = [{"paragraphs": [{"qas": [{"id": "a", "answers": [{"text": "x y"}]},
                                        {"id": "b", "answers": [{"text": "z"}]}]}]}]
    assert squad_evaluate(dataset, {"a": "x"}) == {"exact_match": 0.0, "f1": pytest.approx(100 * (2 / 3) / 2)}


def test_get_final_text():
    assert get_final_text("steve smith", "Steve Smith's") == "Steve Smith"
    assert get_final_text("zurich", "Zürich,") == "Zürich"
    assert get_final_text("1684", "(1684-1699).") == "1684"
    assert get_final_text("no match", "Zürich") == "Zürich"


# ----------------------------------------------------------------------------------------- oracle end to end


def _run_oracle(features: BertFeatures, shift: int, batch_size: int = 8) -> list[np.ndarray]:
    backend = OracleBertBackend(OracleOptions(features=features, oracle_shift=shift))
    responses: list[np.ndarray] = []
    for start in range(0, len(features), batch_size):
        indices = np.arange(start, min(start + batch_size, len(features)), dtype=np.int64)
        input_ids, segment_ids, input_mask = features.gather(indices)
        logits = backend.run_batch(indices, input_ids, segment_ids, input_mask)
        assert logits.dtype == np.float32 and logits.shape == (len(indices), input_ids.shape[1], 2)
        responses.extend(logits)
    return responses


def _hex(logits: np.ndarray) -> str:
    return np.ascontiguousarray(logits, dtype=np.float32).tobytes().hex().upper()


def _write_loadgen_log(path: Path, responses: list[np.ndarray], duplicate: int | None = None) -> Path:
    """LoadGen's mlperf_log_accuracy.json: one entry per response, raw bytes as upper-case hex. ``duplicate``: that
    sample is logged twice, first with a wrong answer, as a repeated sample of a performance run can be."""
    entries = []
    if duplicate is not None:
        entries.append({"seq_id": 0, "qsl_idx": duplicate, "data": _hex(np.zeros((4, 2)))})
    for qsl_idx, logits in enumerate(responses):
        if qsl_idx % 2 == 0:  # half padded to [384, 2] as the benchmark sends them, half left trimmed
            padded = np.full((MAX_SEQ_LENGTH, 2), -10.0, dtype=np.float32)
            padded[: logits.shape[0]] = logits
            logits = padded
        entries.append({"seq_id": len(entries), "qsl_idx": qsl_idx, "data": _hex(logits)})
    path.write_text(json.dumps(entries))
    return path


def test_oracle_scores_100_and_passes(tmp_path, preprocessed):
    features = BertFeatures.load(preprocessed)
    assert features.gold_positions is not None and features.gold_positions.shape == (FIXTURE_FEATURES, 2)
    log = _write_loadgen_log(tmp_path / "mlperf_log_accuracy.json", _run_oracle(features, 0), duplicate=3)
    assert len(decode_accuracy_log(log)) == FIXTURE_FEATURES
    out = tmp_path / "accuracy.txt"
    result = evaluate_accuracy_log(log, preprocessed, FIXTURE, 0.999, out)
    assert (result.exact_match, result.f1) == (100.0, 100.0)
    assert result.passed and result.target_f1 == pytest.approx(0.999 * REFERENCE_F1)
    assert (result.num_features_scored, result.num_examples_with_features) == (FIXTURE_FEATURES, FIXTURE_QUESTIONS)
    lines = out.read_text().splitlines()
    match = re.match(CHECKER_F1_PATTERN, lines[0])
    assert match and float(match.group(1)) == 100.0
    assert lines[1].startswith("PASS")
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    assert predictions["cl-01"] == "Zürich" and predictions["oc-01"] == "world-class touring bicycles"
    assert predictions["cl-03"] == "8.50 francs"


def test_a_sample_logged_twice_is_scored_from_its_last_response(tmp_path, preprocessed):
    """As the reference (accuracy-squad.py keys results by feature, a later entry overwrites an earlier one)."""
    features = BertFeatures.load(preprocessed)
    responses = _run_oracle(features, 0)
    gold = next(i for i in range(FIXTURE_FEATURES) if features.gold_positions[i, 0] > 0)  # a feature with an answer
    entries = json.loads(_write_loadgen_log(tmp_path / "log.json", responses).read_text())
    wrong = {"seq_id": len(entries), "qsl_idx": gold, "data": _hex(np.zeros((4, 2)))}

    # Right first, wrong last: the wrong one counts.
    (tmp_path / "wrong_last.json").write_text(json.dumps([*entries, wrong]))
    logits = decode_accuracy_log(tmp_path / "wrong_last.json")
    assert len(logits) == FIXTURE_FEATURES and (logits[gold][4:] == PAD_LOGIT).all()
    wrong_last = evaluate_accuracy_log(tmp_path / "wrong_last.json", preprocessed, FIXTURE, 0.99, tmp_path / "a.txt")
    assert wrong_last.f1 < 100.0 and wrong_last.num_features_scored == FIXTURE_FEATURES

    # Wrong first, right last (and three copies of every sample): the right one counts.
    (tmp_path / "right_last.json").write_text(json.dumps([wrong, *entries, *entries, *entries]))
    right_last = evaluate_accuracy_log(tmp_path / "right_last.json", preprocessed, FIXTURE, 0.99, tmp_path / "b.txt")
    assert (right_last.exact_match, right_last.f1) == (100.0, 100.0)

    # Every entry must decode, a replaced one too, as the reference decodes them all.
    odd = {"seq_id": 0, "qsl_idx": gold, "data": _hex(np.zeros(3))}
    (tmp_path / "odd_first.json").write_text(json.dumps([odd, *entries]))
    with pytest.raises(ValueError, match=f"qsl_idx {gold} has 3 floats"):
        decode_accuracy_log(tmp_path / "odd_first.json")


def test_shifted_oracle_fails(tmp_path, preprocessed):
    features = BertFeatures.load(preprocessed)
    log = _write_loadgen_log(tmp_path / "mlperf_log_accuracy.json", _run_oracle(features, 2))
    result = evaluate_accuracy_log(log, preprocessed, FIXTURE, 0.99, tmp_path / "accuracy.txt")
    assert result.f1 < 0.99 * REFERENCE_F1 and not result.passed
    assert (tmp_path / "accuracy.txt").read_text().splitlines()[1].startswith("FAIL")


def test_partial_log_scores_missing_questions_zero(tmp_path, preprocessed):
    features = BertFeatures.load(preprocessed)
    responses = _run_oracle(features, 0)
    log = _write_loadgen_log(tmp_path / "log.json", responses[:44])  # only the long article's 11 questions
    result = evaluate_accuracy_log(log, preprocessed, FIXTURE, 0.99, tmp_path / "accuracy.txt")
    assert result.f1 == pytest.approx(100.0 * 11 / FIXTURE_QUESTIONS)
    assert json.loads((tmp_path / "predictions.json").read_text())["gl-02"] == NO_ANSWER_TEXT


def test_preprocess_cli_and_missing_data(tmp_path, capsys):
    assert preprocess_main(["--squad_json", str(FIXTURE), "--preprocessed_data_dir", str(tmp_path)]) == 0
    assert f"{FIXTURE_FEATURES} features" in capsys.readouterr().out
    loaded = BertFeatures.load(tmp_path)
    assert loaded.input_ids.dtype == np.int32 and loaded.input_ids.shape == (FIXTURE_FEATURES, MAX_SEQ_LENGTH)
    assert not loaded.is_synthetic
    with pytest.raises(DataFileError, match="make preprocess_data BENCHMARKS=bert"):
        BertFeatures.load(tmp_path / "nowhere")


# ----------------------------------------------------------------------------------------- synthetic features


def test_synthetic_features(vocab):
    features = BertFeatures.synthetic(2000, seed=0)
    assert features.is_synthetic and features.gold_positions is None
    for array in (features.input_ids, features.segment_ids, features.input_mask):
        assert array.dtype == np.int32 and array.shape == (2000, MAX_SEQ_LENGTH)
    assert features.lengths.dtype == np.int32
    assert (features.input_mask.sum(axis=1) == features.lengths).all()
    rows = np.arange(2000)
    assert (features.input_ids[:, 0] == 101).all() and (features.input_ids[rows, features.lengths - 1] == 102).all()
    for i in range(0, 2000, 97):
        n = features.lengths[i]
        ids, segments = features.input_ids[i], features.segment_ids[i]
        sep = int(np.flatnonzero(ids == 102)[0])
        assert 5 <= sep < n - 1  # [CLS] question [SEP] context [SEP]
        assert (segments[: sep + 1] == 0).all() and (segments[sep + 1 : n] == 1).all() and (segments[n:] == 0).all()
        assert (ids[n:] == 0).all() and (ids[1:sep] >= 999).all() and (ids[sep + 1 : n - 1] >= 999).all()
    stats = features.describe_lengths()
    assert SYNTH_MEAN_LENGTH_BAND[0] <= stats["mean"] <= SYNTH_MEAN_LENGTH_BAND[1]
    assert stats["p50"] < stats["mean"] < stats["p90"] < stats["max"] == MAX_SEQ_LENGTH
    again = BertFeatures.synthetic(2000, seed=0)
    assert np.array_equal(again.input_ids, features.input_ids)
    assert not np.array_equal(BertFeatures.synthetic(2000, seed=1).input_ids, features.input_ids)


def test_gather_trims_to_longest():
    features = BertFeatures.synthetic(64, seed=3)
    indices = np.array([5, 1, 40], dtype=np.int64)
    input_ids, segment_ids, input_mask = features.gather(indices)
    longest = int(features.lengths[indices].max())
    for array in (input_ids, segment_ids, input_mask):
        assert array.shape == (3, longest) and array.dtype == np.int32 and array.flags.c_contiguous
    assert np.array_equal(input_ids, features.input_ids[indices, :longest])


def test_one_definition_of_squads_constants():
    """The padding logit, the data folder and the feature count: one definition each, imported everywhere."""
    from code.bert import accuracy, benchmark, download_data, preprocess_data, squad
    from code.bert.backends import pytorch_engine
    from code.bert.packed import packing
    from code.common.constants import DATASET_SIZE, Benchmark

    assert accuracy.PAD_LOGIT is squad.PAD_LOGIT and benchmark.PAD_LOGIT is squad.PAD_LOGIT
    assert packing.PAD_LOGIT is squad.PAD_LOGIT
    assert download_data.SQUAD_SUBDIR is squad.SQUAD_SUBDIR and preprocess_data.SQUAD_SUBDIR is squad.SQUAD_SUBDIR
    assert pytorch_engine.CALIBRATION_LIST.parent.name == squad.SQUAD_SUBDIR
    assert preprocess_data.EXPECTED_DEV_FEATURES == DATASET_SIZE[Benchmark.BERT]


def _reference_loop_span(feature, logits, n_best_size=20, max_answer_length=30):
    """The reference's nested loop over the n-best starts and ends, as accuracy.py ran it before ``best_span``."""
    start_logits, end_logits = logits[:, 0], logits[:, 1]
    best = None
    for start in np.argsort(-start_logits, kind="stable")[:n_best_size].tolist():
        if start >= len(feature.tokens) or start not in feature.token_to_orig_map:
            continue
        if not feature.token_is_max_context.get(start, False):
            continue
        for end in np.argsort(-end_logits, kind="stable")[:n_best_size].tolist():
            if end >= len(feature.tokens) or end not in feature.token_to_orig_map:
                continue
            if end < start or end - start + 1 > max_answer_length:
                continue
            score = float(start_logits[start] + end_logits[end])
            if best is None or score > best[0]:
                best = (score, start, end)
    return best


def test_best_span_is_the_reference_loop():
    from code.bert.accuracy import best_span
    from code.bert.squad import EvalFeature

    rng = np.random.default_rng(0)
    for trial in range(300):
        length = int(rng.integers(5, 120))
        context = [p for p in range(3, length - 1) if rng.random() < 0.9]
        feature = EvalFeature(0, 0, ["t"] * length, {p: p for p in context},
                              {p: bool(rng.random() < 0.8) for p in context}, [], [], [])
        # Small integers make ties common, so the tie rule is tested too.
        logits = (rng.integers(-3, 4, size=(MAX_SEQ_LENGTH, 2)) if trial % 2 else
                  rng.normal(size=(MAX_SEQ_LENGTH, 2))).astype(np.float32)
        assert best_span(feature, logits) == _reference_loop_span(feature, logits), trial
