"""GPT-J's architecture (sizes) as plain data, without torch: what the model, the in-flight engine and the memory
plan (``code/gptj/memory_plan.py``, which a config resolves without loading torch) all read.

``GPTJ_CONFIGS`` names the architectures a run can draw random weights for; a checkpoint brings its own
(``GptjConfig.from_hf``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from code.common.registry import pick


@dataclass(frozen=True)
class GptjConfig:
    vocab_size: int = 50401  # the MLCommons checkpoint; EleutherAI's own config.json says 50400
    n_positions: int = 2048
    n_embd: int = 4096
    n_layer: int = 28
    n_head: int = 16
    rotary_dim: int = 64
    n_inner: int = 16384
    layer_norm_epsilon: float = 1e-5
    eos_token_id: int = 50256
    pad_token_id: int = 50256

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and in (0, head_dim={self.head_dim}]")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @classmethod
    def from_name(cls, name: str) -> GptjConfig:
        return pick("GPT-J config", GPTJ_CONFIGS, name)

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> GptjConfig:
        """From an HF ``config.json``; refuses settings this model does not implement rather than ignoring them."""
        unsupported = {
            "model_type": (hf.get("model_type", "gptj"), "gptj"),
            "activation_function": (hf.get("activation_function", "gelu_new"), "gelu_new"),
            "tie_word_embeddings": (hf.get("tie_word_embeddings", False), False),
        }
        bad = [f"{k}={got!r} (need {want!r})" for k, (got, want) in unsupported.items() if got != want]
        if hf.get("rotary_dim") is None:
            bad.append("rotary_dim missing")
        if bad:
            raise ValueError(f"unsupported GPT-J config: {', '.join(bad)}")
        copied = {k: hf[k] for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "rotary_dim")}
        eos = hf.get("eos_token_id", 50256)
        n_inner, eps = hf.get("n_inner") or 4 * hf["n_embd"], hf.get("layer_norm_epsilon", 1e-5)
        return cls(
            **copied,
            n_inner=n_inner,
            layer_norm_epsilon=eps,
            eos_token_id=eos,
            pad_token_id=hf.get("pad_token_id") or eos,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GPTJ_CONFIGS: dict[str, GptjConfig] = {
    # EleutherAI/gpt-j-6B as fine-tuned on CNN/DailyMail by MLCommons (the benchmark's checkpoint)
    "6b": GptjConfig(),
    # tests and CI end-to-end runs on 2 CPU cores; the full vocabulary so real tokenizer ids fit
    "tiny": GptjConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_inner=256),
}
