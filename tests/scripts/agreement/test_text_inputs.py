"""The real-text inputs of the agreement tool (scripts/agreement/text_inputs.py): the prose filter, echo
questions, SQuAD-like features whose gold spans spell the answers, and a deterministic build."""

from __future__ import annotations

import numpy as np
import pytest

from code.bert.squad import DOC_STRIDE, MAX_SEQ_LENGTH
from code.bert.vocab import BertTokenizer, find_vocab
from scripts.agreement.text_inputs import build_text_inputs, make_question, phrase_candidates, prose_sentences


@pytest.fixture(scope="module")
def text_inputs():
    return build_text_inputs(300, seed=0)


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(find_vocab())


def test_prose_filter_keeps_sentences_and_drops_code():
    text = (
        "The harbour town grew up around a shallow bay. X = np.array([1, 2]) is code.\n\n"
        "See https://example.com for more. Short one. Fishing families settled there first, drawn by the herring."
    )
    assert prose_sentences(text) == [
        "The harbour town grew up around a shallow bay.",
        "Fishing families settled there first, drawn by the herring.",
    ]


def test_questions_replace_a_phrase_with_a_wh_word():
    words = "The first stone quay was built in 1684 by a merchant named Tobias Hale.".split()
    candidates = phrase_candidates(words)
    assert (7, 8, "what year") in candidates
    assert (12, 14, "who or what") in candidates  # "Tobias Hale." (edge punctuation is cut from the answer)
    assert not any(start == 13 for start, _, _ in candidates)  # "Hale" is inside the name, not a name of its own

    class FirstChoice:
        def choice(self, items):
            return [c for c in items if c[2] == "who or what"][0]

        def randint(self, low, high):
            return high

    question, start, end, lead, trail = make_question(words, FirstChoice())
    assert question.endswith("named who or what?") and "Tobias" not in question
    assert (start, end, lead, trail) == (12, 14, 0, 1)


def test_text_inputs_are_squad_like(text_inputs, tokenizer):
    features, described = text_inputs.features, text_inputs.describe()
    assert len(features) >= 300 and not features.is_synthetic
    assert features.input_ids.shape == (len(features), MAX_SEQ_LENGTH) and features.input_ids.dtype == np.int32
    assert (features.input_ids[:, 0] == tokenizer.vocab["[CLS]"]).all()
    assert (features.lengths == features.input_mask.sum(axis=1)).all() and features.lengths.max() <= MAX_SEQ_LENGTH
    assert 100 <= described["length_mean"] <= 260 and described["length_p50"] <= described["length_p90"]
    assert described["corpus_sha256"] and described["sources"][0]["source"].startswith("fixture")
    # real words of the real vocabulary: almost no [UNK]
    unk = (features.input_ids == tokenizer.vocab["[UNK]"]).sum() / features.input_mask.sum()
    assert unk < 0.01
    # long contexts are windowed with stride 128 like the real set
    by_example: dict[int, list] = {}
    for feature in text_inputs.eval_features:
        by_example.setdefault(feature.example_index, []).append(feature)
    windowed = [fs for fs in by_example.values() if len(fs) > 1]
    assert windowed
    first, second = windowed[0][:2]
    assert first.tokens[first.doc_offset + DOC_STRIDE] == second.tokens[second.doc_offset]
    # gold spans spell the answer (after the tokenizer's improvement of the word span)
    answered = [f for f in text_inputs.eval_features if f.start_position]
    assert len(answered) > 0.8 * len(features)
    spelled = sum(
        f.tokens[f.start_position : f.end_position + 1]
        == tokenizer.tokenize(text_inputs.examples[f.example_index].answers[0])
        for f in answered
    )
    assert spelled > 0.9 * len(answered)


def test_text_inputs_are_deterministic(text_inputs):
    again = build_text_inputs(300, seed=0)
    assert np.array_equal(again.features.input_ids, text_inputs.features.input_ids)
    assert again.corpus_sha256 == text_inputs.corpus_sha256
