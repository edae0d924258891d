"""Llama 3.1's architecture (sizes and RoPE settings) as plain data, without torch: what the model and a memory plan
read.

``LLAMA_CONFIGS`` names the architectures a run can draw random weights for; a checkpoint brings its own
(``LlamaConfig.from_hf`` of its ``config.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from code.common.registry import pick


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's frequency scaling (HF ``rope_type: "llama3"``): long wavelengths slowed by ``factor``, short ones
    kept, those between blended, so the 8,192-token pretraining context stretches to 131,072 positions."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    """HF ``LlamaConfig``'s fields that change the computation; the defaults are Llama-3.1-8B-Instruct's."""

    vocab_size: int = 128256
    dim: int = 4096  # HF hidden_size
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8  # grouped-query attention: 4 query heads share one key/value head
    head_dim: int = 128
    intermediate_size: int = 14336  # SwiGLU's hidden width
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = RopeScaling()
    max_position_embeddings: int = 131072
    bos_token_id: int = 128000
    eos_token_ids: tuple[int, ...] = (128001, 128008, 128009)  # generation_config.json: generation stops at any

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even (RoPE turns pairs of dims)")

    @property
    def n_positions(self) -> int:
        """The longest prompt + generated tokens the model takes (``code.llm.generation.CausalLM`` reads this)."""
        return self.max_position_embeddings

    @property
    def eos_token_id(self) -> int:
        """The first stop token (``<|end_of_text|>``), the one padding uses."""
        return self.eos_token_ids[0]

    @classmethod
    def from_name(cls, name: str) -> LlamaConfig:
        return pick("Llama config", LLAMA_CONFIGS, name)

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> LlamaConfig:
        """From an HF ``config.json``; refuses settings this model does not implement rather than ignoring them.

        Reads both spellings of RoPE: ``rope_theta`` and ``rope_scaling`` (Meta's checkpoint, transformers 4.x) and
        transformers 5.x's ``rope_parameters``, which holds both (``rope_type: "default"`` there is no scaling)."""
        scaling = hf.get("rope_scaling") or hf.get("rope_parameters")
        theta = hf.get("rope_theta", (scaling or {}).get("rope_theta", 10000.0))
        rope_type = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
        if rope_type == "default":
            scaling, rope_type = None, None
        unsupported = {
            "model_type": (hf.get("model_type", "llama"), "llama"),
            "hidden_act": (hf.get("hidden_act", "silu"), "silu"),
            "tie_word_embeddings": (hf.get("tie_word_embeddings", False), False),
            "attention_bias": (hf.get("attention_bias", False), False),
            "mlp_bias": (hf.get("mlp_bias", False), False),
        }
        bad = [f"{k}={got!r} (need {want!r})" for k, (got, want) in unsupported.items() if got != want]
        if rope_type not in (None, "llama3"):
            bad.append(f"rope_scaling type {rope_type!r} (need 'llama3' or none)")
        if bad:
            raise ValueError(f"unsupported Llama config: {', '.join(bad)}")
        heads = hf["num_attention_heads"]
        eos = hf.get("eos_token_id", 128001)
        return cls(
            vocab_size=hf["vocab_size"], dim=hf["hidden_size"], n_layers=hf["num_hidden_layers"], n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            intermediate_size=hf["intermediate_size"], norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=None if scaling is None else RopeScaling(
                factor=scaling["factor"], low_freq_factor=scaling["low_freq_factor"],
                high_freq_factor=scaling["high_freq_factor"],
                original_max_position_embeddings=scaling["original_max_position_embeddings"]),
            max_position_embeddings=hf.get("max_position_embeddings", 131072),
            bos_token_id=hf.get("bos_token_id", 128000),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (eos,),
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


LLAMA_CONFIGS: dict[str, LlamaConfig] = {
    # meta-llama/Llama-3.1-8B-Instruct (config.json at be673f326cab4cd22ccfef76109faf68e41aa5f1, the reference's)
    "8b": LlamaConfig(),
    # tests and CI end-to-end runs on 2 CPU cores: every feature of 8b (GQA 4:1, RoPE scaling), the full vocabulary
    # so real tokenizer ids fit
    "tiny": LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=16, intermediate_size=128),
}
