"""Fine-tuning BertQA on echo questions (scripts/agreement/finetune_qa.py): the gold positions, the document split, the
loss, the span rule, and a tiny CPU run whose checkpoint loads strictly. The GPU run on MiniLM is not tested here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from code.bert.model import BERT_CONFIGS, load_checkpoint
from code.bert.squad import EvalFeature
from code.bert.vocab import BertTokenizer, find_vocab
from scripts.agreement import finetune_qa
from scripts.agreement.finetune_qa import (
    FinetuneSettings,
    build_splits,
    example_documents,
    feature_span,
    qa_loss,
    read_metadata,
    save_finetuned,
    split_by_document,
)
from scripts.agreement.text_inputs import build_text_inputs


@pytest.fixture(scope="module")
def inputs():
    return build_text_inputs(200, seed=1)


def test_split_is_by_document_and_keeps_gold_positions(inputs):
    train, heldout = split_by_document(inputs, 0.3)
    assert len(train) + len(heldout) == len(inputs.eval_features) and len(train) and len(heldout)
    documents = example_documents(inputs)
    by_qas = {e.qas_id: documents[i] for i, e in enumerate(inputs.examples)}
    train_docs = {by_qas[q] for q in train.postprocess.qas_ids}
    heldout_docs = {by_qas[q] for q in heldout.postprocess.qas_ids}
    assert not train_docs & heldout_docs and None not in heldout_docs  # the fixture's own examples always train
    assert heldout.documents == len(heldout_docs)
    # gold = the SQuAD training positions of preprocessing: the answer's word pieces, or [CLS] (0) when the window
    # does not hold it; features of one split point at their own examples
    tokenizer = BertTokenizer(find_vocab())
    gold = train.gold.numpy()
    spelled = answered = 0
    for i, feature in enumerate(train.postprocess.features):
        assert (gold[i] == (feature.start_position, feature.end_position)).all()
        assert int(train.input_mask[i].sum()) == train.lengths[i] == len(feature.tokens)
        if gold[i, 0]:
            answered += 1
            answer = train.answers[feature.example_index][0]
            spelled += feature.tokens[gold[i, 0] : gold[i, 1] + 1] == tokenizer.tokenize(answer)
        else:
            assert gold[i, 1] == 0
    assert spelled > 0.9 * answered


def test_hash_split_is_stable_and_near_its_fraction():
    names = [f"nltk:module{i}.py (docstrings)" for i in range(2000)]
    held = [finetune_qa._held_out(n, 0.15) for n in names]
    assert held == [finetune_qa._held_out(n, 0.15) for n in names]
    assert 0.11 < sum(held) / len(held) < 0.19
    assert finetune_qa._document("nltk:x.py (docstrings) #2") == "nltk:x.py (docstrings)"
    assert finetune_qa._document("Merrowick") is None  # the fixture's hand-written article
    assert finetune_qa._document("fixture:squad_tiny.json:Merrowick:0 #1") is None  # its paragraph's text


def test_loss_ignores_padding_and_rewards_the_gold_span():
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    gold = torch.tensor([[2, 3]])
    logits = torch.zeros(1, 6, 2)
    flat = qa_loss(logits, mask, gold)
    assert flat.item() == pytest.approx(np.log(4))  # uniform over the 4 real tokens: padding is out
    logits[0, 4:, :] = 50.0  # padding logits do not matter
    assert qa_loss(logits, mask, gold).item() == pytest.approx(np.log(4))
    logits[0, 2, 0] = logits[0, 3, 1] = 20.0
    assert qa_loss(logits, mask, gold).item() < 1e-6


def test_feature_span_follows_the_scorers_rules():
    feature = EvalFeature(0, 0, ["[CLS]", "q", "[SEP]", "a", "b", "c", "[SEP]"], {3: 0, 4: 1, 5: 2}, {}, [], [], [])
    logits = np.zeros((7, 2), dtype=np.float32)
    logits[0] = 9.0  # [CLS] is never a span
    logits[5, 0], logits[3, 1] = 5.0, 4.0  # end before start: not allowed
    logits[4, 1] = 3.0
    assert feature_span(logits, feature) == (5, 5)
    logits[4, 0] = 6.0
    assert feature_span(logits, feature) == (4, 4)


def test_settings_are_checked_and_keyed():
    with pytest.raises(ValueError, match="unknown BERT config"):
        FinetuneSettings(config="huge")
    with pytest.raises(ValueError, match="holdout_fraction"):
        FinetuneSettings(holdout_fraction=1.0)
    base = FinetuneSettings(config="tiny")
    assert base.key(None, "cpu") == FinetuneSettings(config="tiny").key(None, "cpu")
    assert base.key(None, "cpu") != FinetuneSettings(config="tiny", epochs=3).key(None, "cpu")
    assert base.key(None, "cpu") != base.key(None, "cuda")


def test_tiny_finetune_lowers_the_loss_and_saves_a_strict_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(finetune_qa, "PROBE_FEATURES", 10)  # a probe smaller than the training set, as on the GPU
    settings = FinetuneSettings(
        config="tiny", features=64, epochs=1, batch_size=16, lr=3e-3, warmup_fraction=0.0, holdout_fraction=0.5
    )
    lines: list[str] = []
    result = finetune_qa.finetune_qa(settings, None, "cpu", log=lines.append)
    metrics = result.metrics
    assert metrics["steps"] == -(-metrics["train_features"] // 16)
    assert metrics["after"]["train"]["loss"] < metrics["before"]["train"]["loss"]
    assert 10 <= metrics["after"]["train"]["features"] < metrics["train_features"]
    assert metrics["after"]["train"]["questions"] <= 10  # whole examples: the answer scorer sees all their windows
    assert metrics["after"]["heldout"]["features"] > 0 and metrics["heldout_exact_match"] is not None
    assert any("training loss" in line for line in lines)
    path = save_finetuned(result, tmp_path / "tiny-qa.safetensors")
    loaded = load_checkpoint(path, BERT_CONFIGS["tiny"])  # strict: every weight, nothing else
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    stored = read_metadata(path)
    assert stored["steps"] == metrics["steps"] and stored["settings"]["data_seed"] == settings.data_seed
    assert stored["data"].startswith("echo questions") and "not SQuAD" in stored["data"]


def test_splits_hold_about_the_features_asked_for():
    train, heldout, _ = build_splits(FinetuneSettings(config="tiny", features=100, holdout_fraction=0.0))
    assert len(train) >= 100 and len(heldout) == 0


def test_feature_span_is_the_all_positions_argmax():
    """feature_span (the scorer's best_span without n-best and max-context) picks what the position-order argmax over
    every valid (start, end) picks, ties included."""
    rng = np.random.default_rng(1)
    for trial in range(200):
        length = int(rng.integers(5, 120))
        context = [p for p in range(3, length - 1) if rng.random() < 0.9]
        feature = EvalFeature(0, 0, ["t"] * length, {p: p for p in context}, {}, [], [], [])
        logits = (rng.integers(-3, 4, size=(384, 2)) if trial % 2 else rng.normal(size=(384, 2))).astype(np.float32)
        positions = np.array(sorted(context), dtype=np.int64)
        if positions.size == 0:
            assert feature_span(logits, feature) == (0, 0)
            continue
        score = logits[positions, 0][:, None] + logits[positions, 1][None, :]
        width = positions[None, :] - positions[:, None]
        score = np.where((width >= 0) & (width < 30), score, -np.inf)
        start, end = np.unravel_index(int(np.argmax(score)), score.shape)
        assert feature_span(logits, feature) == (int(positions[start]), int(positions[end])), trial
