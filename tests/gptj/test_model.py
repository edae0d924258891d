"""Our GPT-J against HF's: same logits on the same weights, batched and padded; same tokens from beam search and
greedy decoding as HF ``generate`` (MLPerf settings) run prompt by prompt; checkpoints loaded strictly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from code.common.faults import CheckpointError
from code.gptj.model import GPTJ_CONFIGS, GptjConfig, hf_config, load_checkpoint, random_weights
from code.llm.generation import GenerationConfig, cache_shape, generate, left_pad

TINY = GPTJ_CONFIGS["tiny"]
EOS = 50256
# Prompt lengths: a single token, odd and even, the longest sets the padding. Token ids stay below EOS.
LENGTHS = [7, 1, 40, 18, 3, 25, 12, 9]
MLPERF = dict(num_beams=4, min_new_tokens=30, max_new_tokens=128, early_stopping=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")




@pytest.fixture(scope="module")
def hf_model() -> transformers.GPTJForCausalLM:
    """Every weight random (biases and LayerNorms too, so parity covers them), and EOS favoured a little by the LM
    head's bias so that beams end at different lengths: at min_new_tokens, later, and not at all."""
    torch.manual_seed(0)
    model = transformers.GPTJForCausalLM(hf_config(TINY, attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.05)
            if ("ln_1" in name or "ln_f" in name) and name.endswith("weight"):
                p.add_(1.0)
        model.lm_head.bias[EOS] += 1.0
    return model


@pytest.fixture(scope="module")
def ours(hf_model):
    return load_checkpoint(hf_model.state_dict(), TINY)


@pytest.fixture(scope="module")
def prompts() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, EOS, size=n).astype(np.int32) for n in LENGTHS]


@torch.no_grad()
def max_rel_error_vs_hf(model, hf_model, prompts) -> float:
    """Our logits for all prompts in one left-padded batch against HF's for each prompt alone."""
    tokens, pad = left_pad([torch.as_tensor(p, dtype=torch.long) for p in prompts], EOS)
    got = model(tokens, 0, pad)
    errors = []
    for row, p in enumerate(prompts):
        expected = hf_model(torch.as_tensor(p, dtype=torch.long)[None]).logits[0]
        diff = (got[row, tokens.shape[1] - len(p) :] - expected).abs().max()
        errors.append((diff / expected.abs().max()).item())
    return max(errors)


def test_logits_match_hf_per_sample_in_a_padded_batch(hf_model, ours, prompts):
    assert max_rel_error_vs_hf(ours, hf_model, prompts) <= 1e-4


def test_checkpoint_folders_sharded_safetensors_and_bin(hf_model, ours, prompts, tmp_path):
    hf_model.save_pretrained(tmp_path / "st", max_shard_size="2MB")
    assert (tmp_path / "st" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "st").glob("*.safetensors"))) > 1

    # What older transformers wrote (and the MLCommons checkpoint is): pytorch_model-0000N-of-0000M.bin shards, an
    # index, and the attention buffers attn.bias / attn.masked_bias, which are not weights.
    folder = tmp_path / "bin"
    folder.mkdir()
    hf_model.config.to_json_file(folder / "config.json")
    state = dict(hf_model.state_dict())
    for i in range(TINY.n_layer):
        state[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 8, 8, dtype=torch.bool))
        state[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e9)
    names = list(state)
    shards = [names[0::3], names[1::3], names[2::3]]
    weight_map = {}
    for i, shard in enumerate(shards):
        file = f"pytorch_model-{i + 1:05d}-of-00003.bin"
        torch.save({k: state[k] for k in shard}, folder / file)
        weight_map |= dict.fromkeys(shard, file)
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    for path in (tmp_path / "st", folder):
        loaded = load_checkpoint(path)  # config from config.json
        assert loaded.config == TINY
        for (name, a), b in zip(loaded.state_dict().items(), ours.state_dict().values(), strict=True):
            assert torch.equal(a, b), (path, name)
    assert max_rel_error_vs_hf(load_checkpoint(folder), hf_model, prompts[:3]) <= 1e-4


def test_single_files_and_dtypes(hf_model, tmp_path):
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in hf_model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    torch.save(hf_model.state_dict(), tmp_path / "w.bin")
    a = load_checkpoint(tmp_path / "w.safetensors", TINY, dtype=torch.bfloat16)
    b = load_checkpoint(tmp_path / "w.bin", TINY, dtype=torch.bfloat16)
    hf_q = hf_model.transformer.h[1].attn.q_proj.weight
    for model in (a, b):
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        assert torch.equal(model.layers[1].attention.wqkv.weight[: TINY.n_embd], hf_q.to(torch.bfloat16))
        logits = model(torch.tensor([[5, 6, 7]]))
        assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="no config.json"):
        load_checkpoint(tmp_path / "w.bin")
    with pytest.raises(CheckpointError, match="unknown checkpoint format"):
        load_checkpoint(tmp_path / "w.onnx", TINY)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "empty", TINY)


def test_strict_loading_names_missing_unexpected_and_wrong_shape(hf_model):
    state = dict(hf_model.state_dict())
    del state["transformer.h.1.attn.k_proj.weight"], state["transformer.ln_f.bias"]
    state["transformer.h.0.attn.rotary_emb.inv_freq"] = torch.zeros(4)
    state["lm_head.bias"] = torch.zeros(7)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(state, TINY)
    msg = str(err.value)
    assert "missing: transformer.h.1.attn.k_proj.weight" in msg and "missing: transformer.ln_f.bias" in msg
    assert "transformer.h.1.attn.q_proj.weight" not in msg  # the other parts of the fused wqkv were there
    assert "unexpected: transformer.h.0.attn.rotary_emb.inv_freq" in msg
    assert "wrong shape: lm_head.bias: checkpoint (7,), model (50401,)" in msg
    assert "missing: lm_head.bias" not in msg  # listed once, by why it was refused
    with pytest.raises(CheckpointError, match=r"unexpected: transformer\.h\.2\.ln_1\.weight"):
        load_checkpoint(dict(hf_model.state_dict()) | {"transformer.h.2.ln_1.weight": torch.ones(64)}, TINY)


def test_configs():
    assert GptjConfig.from_name("6b") == GptjConfig(n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, n_inner=16384)
    with pytest.raises(ValueError, match="unknown GPT-J config 'gptj'; known: 6b, tiny"):
        GptjConfig.from_name("gptj")
    # EleutherAI/gpt-j-6B's config.json (abridged): n_inner null means 4 * n_embd
    eleuther = {
        "model_type": "gptj",
        "activation_function": "gelu_new",
        "n_embd": 4096,
        "n_head": 16,
        "n_inner": None,
        "n_layer": 28,
        "n_positions": 2048,
        "rotary_dim": 64,
        "vocab_size": 50400,
        "eos_token_id": 50256,
        "tie_word_embeddings": False,
        "layer_norm_epsilon": 1e-5,
    }
    assert GptjConfig.from_hf(eleuther) == GptjConfig(vocab_size=50400)
    with pytest.raises(ValueError, match="activation_function='relu'"):
        GptjConfig.from_hf(eleuther | {"activation_function": "relu"})


def test_random_weights_deterministic_with_hf_init():
    a, b, c = random_weights(TINY, 3), random_weights(TINY, 3), random_weights(TINY, 4)
    for (name, pa), pb, pc in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if name.endswith("norm.weight"):
            assert torch.equal(pa, torch.ones_like(pa))
        elif name.endswith("bias"):
            assert torch.equal(pa, torch.zeros_like(pa))
        else:
            assert not torch.equal(pa, pc) and abs(pa.std().item() - 0.02) < 0.002, name
    half = random_weights(TINY, 3, dtype=torch.float16)
    assert torch.equal(half.output.weight, a.output.weight.half())


@torch.no_grad()
def test_kv_cache_decode_matches_full_forward(prompts):
    model = random_weights(TINY, 0)
    rows = [torch.as_tensor(p, dtype=torch.long) for p in prompts[:4]]
    tokens, pad = left_pad(rows, EOS)
    full = model(tokens, 0, pad)
    model.setup_caches(8, 64)
    split = tokens.shape[1] - 6
    prefill = model(tokens[:, :split], 0, pad)
    for row, n in enumerate(pad.tolist()):  # logits at padding columns are meaningless
        torch.testing.assert_close(prefill[row, n:], full[row, n:split], rtol=1e-5, atol=1e-5)
    for col in range(split, tokens.shape[1]):
        step = model(tokens[:, col : col + 1], col, pad, last_only=True)
        real = pad <= col
        torch.testing.assert_close(step[real], full[real, col], rtol=1e-5, atol=1e-5)


def hf_generate(hf_model, prompt: np.ndarray, **kwargs) -> np.ndarray:
    ids = torch.as_tensor(prompt, dtype=torch.long)[None]
    out = hf_model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=EOS, eos_token_id=EOS, **kwargs
    )
    return out[0, ids.shape[1] :].numpy()


def test_beam_search_matches_hf_mlperf_settings(hf_model, ours, prompts):
    config = GenerationConfig()  # the MLPerf defaults
    assert {k: getattr(config, k) for k in MLPERF} == MLPERF and config.length_penalty == 1.0
    ours.setup_caches(*cache_shape(LENGTHS, config))
    got = generate(ours, prompts, config)
    expected = [hf_generate(hf_model, p, **MLPERF) for p in prompts]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, e)
    # The run exercised what matters: EOS barred until 30 new tokens, then taken right away, later, or never.
    lengths = sorted(len(g) for g in got)
    assert lengths[0] == 31 and any(31 < n < 128 for n in lengths) and lengths[-1] == 128, lengths
    assert all((g[-1] == EOS) == (len(g) < 128) and EOS not in g[:-1] for g in got)


@pytest.mark.parametrize(("early_stopping", "length_penalty"), [(False, 1.0), ("never", 2.0)])
def test_beam_search_other_stopping_rules_match_hf(hf_model, ours, prompts, early_stopping, length_penalty):
    config = GenerationConfig(
        min_new_tokens=5, max_new_tokens=40, early_stopping=early_stopping, length_penalty=length_penalty
    )
    ours.setup_caches(*cache_shape(LENGTHS[:3], config))
    got = generate(ours, prompts[:3], config)
    for g, p in zip(got, prompts[:3], strict=True):
        e = hf_generate(
            hf_model,
            p,
            num_beams=4,
            min_new_tokens=5,
            max_new_tokens=40,
            early_stopping=early_stopping,
            length_penalty=length_penalty,
        )
        np.testing.assert_array_equal(g, e)


def test_greedy_matches_hf(hf_model, ours, prompts):
    config = GenerationConfig(num_beams=1)
    ours.setup_caches(*cache_shape(LENGTHS, config))
    # the same prompts as one right-padded array + lengths (how a preprocessed dataset stores them)
    padded = np.full((len(prompts), max(LENGTHS)), EOS, dtype=np.int32)
    for row, p in enumerate(prompts):
        padded[row, : len(p)] = p
    got = generate(ours, padded, config, lengths=LENGTHS)
    for g, p in zip(got, prompts, strict=True):
        np.testing.assert_array_equal(g, hf_generate(hf_model, p, num_beams=1, min_new_tokens=30, max_new_tokens=128))
    assert min(len(g) for g in got) >= 31 and any(len(g) < 128 for g in got)


def test_generate_refuses_what_it_cannot_do(prompts):
    model = random_weights(TINY, 0)
    with pytest.raises(ValueError, match=r"call model.setup_caches\(8, 134\)"):
        generate(model, prompts[:2])
    model.setup_caches(8, 1000)
    with pytest.raises(ValueError, match="empty prompt"):
        generate(model, [np.array([1, 2]), np.array([], dtype=np.int32)])
    with pytest.raises(ValueError, match="exceeds 2048 positions"):
        generate(model, [np.zeros(1950, dtype=np.int32)])
    with pytest.raises(ValueError, match="early_stopping"):
        GenerationConfig(early_stopping="sometimes")

