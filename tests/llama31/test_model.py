"""Our Llama against HF's ``LlamaForCausalLM``: the same logits on the same weights, batched and left-padded; the
same greedy tokens as HF ``generate``; Llama 3's RoPE frequencies; checkpoints loaded strictly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from code.common.faults import CheckpointError
from code.llama31.architecture import LLAMA_CONFIGS, LlamaConfig
from code.llama31.model import (
    empty_model,
    hf_config,
    hf_state,
    inverse_frequencies,
    load_checkpoint,
    random_weights,
)
from code.llm.generation import GenerationConfig, cache_shape, generate, left_pad

TINY = LLAMA_CONFIGS["tiny"]
LENGTHS = [7, 1, 40, 18, 3, 25]  # a single token, odd and even; the longest sets the padding
PAD = TINY.eos_token_id

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ours():
    """Random weights of the tiny architecture, the norms too (else parity would not cover them)."""
    model = random_weights(TINY, seed=3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    return model


@pytest.fixture(scope="module")
def hf_model(ours) -> transformers.LlamaForCausalLM:
    model = transformers.LlamaForCausalLM(hf_config(TINY, attn_implementation="eager")).eval()
    missing, unexpected = model.load_state_dict(hf_state(ours), strict=False)
    assert not unexpected and all("rotary" in name for name in missing), (missing, unexpected)
    return model


@pytest.fixture(scope="module")
def prompts() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 128000, size=n).astype(np.int32) for n in LENGTHS]


def test_8b_is_the_reference_architecture():
    """Llama-3.1-8B-Instruct's config.json, as HF would read it, gives our named 8b config."""
    hf = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "max_position_embeddings": 131072, "hidden_act": "silu",
          "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    assert LlamaConfig.from_hf(hf) == LLAMA_CONFIGS["8b"]
    params = sum(p.numel() for p in empty_model(LLAMA_CONFIGS["8b"], device="meta").parameters())
    assert params == 8_030_261_248  # Llama-3.1-8B's published parameter count


def test_unsupported_config_is_refused():
    with pytest.raises(ValueError, match="rope_scaling type 'yarn'"):
        LlamaConfig.from_hf({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 16, "rope_scaling": {"rope_type": "yarn"}})


def test_rope_frequencies_match_hf():
    """Llama 3's scaling, against HF's own ``llama3`` rope init, for the 8b head size (all three bands present)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LLAMA_CONFIGS["8b"]
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config(config), "cpu")
    got = inverse_frequencies(config)
    assert torch.equal(got, expected)
    base = 1.0 / (config.rope_theta ** (torch.arange(0, 128, 2).float() / 128))
    assert (got == base).sum() > 0 and (got == base / 8).sum() > 0 and (got != base).sum() > (got == base / 8).sum()


@torch.no_grad()
def test_logits_match_hf_batched_and_padded(ours, hf_model, prompts):
    """One left-padded batch through our model against HF run on each prompt alone (float32, eager attention)."""
    tokens, pad = left_pad([torch.as_tensor(p, dtype=torch.long) for p in prompts], PAD)
    got = ours(tokens, 0, pad)
    for row, prompt in enumerate(prompts):
        expected = hf_model(torch.as_tensor(prompt, dtype=torch.long)[None]).logits[0]
        mine = got[row, tokens.shape[1] - len(prompt):]
        assert expected.abs().max() > 0.1  # random weights give logits that are not all zero
        torch.testing.assert_close(mine, expected, rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_cached_decode_matches_full_forward(ours, prompts):
    """Prefill then one token at a time through the KV cache gives the full forward's logits."""
    prompt = torch.as_tensor(prompts[2], dtype=torch.long)[None]
    full = ours(prompt)
    ours.setup_caches(1, prompt.shape[1])
    try:
        ours(prompt[:, :30], 0)
        steps = [ours(prompt[:, i:i + 1], i, last_only=True) for i in range(30, prompt.shape[1])]
        torch.testing.assert_close(torch.stack(steps, dim=1)[0], full[0, 30:], rtol=1e-4, atol=1e-4)
    finally:
        for layer in ours.layers:
            layer.attention.kv_cache = None


def test_greedy_matches_hf_generate(ours, hf_model, prompts):
    """The reference's decoding (greedy, at least 1 and at most 128 new tokens, stop at any of Llama 3.1's EOS
    tokens), batched, against HF ``generate`` prompt by prompt. A few EOS-favoured logits make rows end early."""
    eos = TINY.eos_token_ids
    with torch.no_grad():
        for token in eos:  # both models share the weights: favour the stop tokens so some rows end early
            ours.output.weight[token] = ours.output.weight[:1000].mean(0) + 0.3 * ours.norm.weight.sign()
            hf_model.lm_head.weight[token] = ours.output.weight[token]
    config = GenerationConfig(num_beams=1, min_new_tokens=1, max_new_tokens=24, eos_token_id=eos[0],
                              pad_token_id=PAD, more_eos_token_ids=eos[1:])
    ours.setup_caches(*cache_shape(LENGTHS, config))
    try:
        got = generate(ours, prompts, config)
    finally:
        for layer in ours.layers:
            layer.attention.kv_cache = None
    lengths = []
    for prompt, tokens in zip(prompts, got, strict=True):
        hf = hf_model.generate(torch.as_tensor(prompt, dtype=torch.long)[None], do_sample=False, num_beams=1,
                               min_new_tokens=1, max_new_tokens=24, eos_token_id=list(eos), pad_token_id=PAD)
        assert tokens.tolist() == hf[0, len(prompt):].tolist()
        lengths.append(len(tokens))
    assert min(lengths) < 24  # some rows stopped at an EOS token


def test_checkpoint_folder_round_trip_and_strictness(ours, tmp_path):
    """An HF-layout folder (config.json + safetensors) loads to the same weights; a missing tensor is named."""
    from safetensors.torch import save_file

    state = {name: t.contiguous().clone() for name, t in hf_state(ours).items()}
    hf = hf_config(TINY).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(hf))
    save_file(state, tmp_path / "model.safetensors")
    loaded = load_checkpoint(tmp_path, dtype=torch.float32)
    assert loaded.config == TINY
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), ours.parameters(), strict=True))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing: model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(tmp_path)


def test_random_weights_depend_only_on_seed():
    a, b, c = random_weights(TINY, 1), random_weights(TINY, 1), random_weights(TINY, 2)
    assert torch.equal(a.output.weight, b.output.weight) and not torch.equal(a.output.weight, c.output.weight)
    assert torch.equal(a.norm.weight, torch.ones(TINY.dim))
    assert abs(float(a.layers[0].feed_forward.w1.weight.std()) - 0.02) < 0.002

