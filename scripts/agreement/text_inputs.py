"""SQuAD-like features from real English text that ships with the environment (no download, no SQuAD needed).

Why: numerical checks of fast BERT paths (``python -m scripts.agreement``) need real language tokenized with the
real uncased vocabulary, because random token ids have none of the structure (frequent tokens, repeated words,
question/context overlap) that drives activation outliers. SQuAD itself is a download; this module builds a
stand-in from text that is present wherever ``make setup`` (or the container) installed ``requirements.txt``.

Text, in this order (each source is recorded, with a sha256 of the whole corpus, so a run says what it read):

1. ``tests/fixtures/squad_tiny.json``: its hand-written examples as they are, and its paragraphs as text.
2. Prose files of the pinned packages of requirements*.txt (license texts, READMEs, package descriptions),
   read through ``importlib.metadata``: the same bytes on every machine with the same pins.
3. Docstrings of the pinned ``nltk`` package (parsed with ``ast``, never imported): ~50,000 words of English
   about language processing.

Only sentences that read as prose pass a filter (6-50 words, capitalised, ending in ``.``/``!``/``?``, at least
90% plain words, no code characters); duplicates are dropped. Contexts are runs of consecutive sentences of one
document whose word-piece length is drawn like the synthetic features' (LogNormal median 130, sigma 0.5, see
``code/bert/dataset.py``), so the length distribution resembles SQuAD v1.1 dev. Questions are "echo questions"
made from a sentence of the context: a phrase (a number, a name, a noun phrase after a determiner) is replaced by
a wh-word ("... was built in what year by a merchant named Tobias Hale?"); the replaced phrase is the answer.

The examples go through our SQuAD preprocessing unchanged (``read_squad_examples`` then
``convert_examples_to_features``: windows of 384, stride 128, questions cut at 64 pieces), so the result is a
``BertFeatures`` plus the ``PostprocessData`` the accuracy scorer's post-processing reads.

    python -m scripts.agreement.text_inputs [--features 2500] [--seed 0] [--out DIR]

prints the length distribution; ``--out`` also saves the set like ``make preprocess_data`` does
(``DIR/squad_tokenized/``), so ``--input_data=DIR`` runs the harness on it.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import json
import math
import random
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from code.bert.dataset import SYNTH_CONTEXT_MEDIAN, SYNTH_CONTEXT_RANGE, SYNTH_CONTEXT_SIGMA, BertFeatures
from code.bert.squad import (
    DOC_STRIDE,
    MAX_QUERY_LENGTH,
    MAX_SEQ_LENGTH,
    TOKENIZED_SUBDIR,
    EvalFeature,
    PostprocessData,
    SquadExample,
    convert_examples_to_features,
    doc_spans_for,
    read_squad_examples,
    save_features,
)
from code.bert.vocab import BertTokenizer, find_vocab
from code.common.download import file_checksum
from code.common.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"
DEFAULT_FEATURES = 2500
QUESTIONS_PER_CONTEXT = (3, 6)
"""SQuAD v1.1 dev has ~5 questions per paragraph; each context gets a number drawn from this range."""
DOCSTRING_PACKAGES = ("nltk", "numpy")
"""Pinned pure-Python packages whose docstrings are read as prose."""
SENTENCE_WORDS = (6, 50)
# Code, markup and addresses: a sentence holding any of these is not prose.
_NOT_PROSE = re.compile(r"[{}\[\]<>=_|\\`#*@~^$%/]|https?:|www\.|::|\.\.|--|>>>")
_WORD = re.compile(r"[(\"']?(?:[A-Za-z]+(?:['-][A-Za-z]+)*|\d{1,4}(?:[.,]\d+)?)[)\"']?[,.;:!?]?[)\"']?")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_PROSE_FILE = re.compile(r"(^|/)(LICEN[CS]E|COPYING|NOTICE|AUTHORS|README|METADATA)[^/]*$|\.(md|rst|txt)$", re.I)
_NOT_PROSE_FILE = re.compile(
    r"(^|/)(RECORD|WHEEL|INSTALLER|REQUESTED|entry_points\.txt|top_level\.txt|"
    r"requirements[^/]*|dependency_links\.txt|SOURCES\.txt)$|third_party|/tests?/",
    re.I,
)
_EDGE_PUNCT = "\"'()[],.;:!?"
_DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "its", "their", "each", "every", "some"}
_STOP_AFTER = {
    "and",
    "or",
    "of",
    "to",
    "in",
    "on",
    "for",
    "with",
    "by",
    "is",
    "are",
    "was",
    "were",
    "be",
    "that",
    "which",
    "who",
    "from",
    "as",
    "at",
    "if",
    "when",
    "than",
    "but",
    "not",
    "can",
    "will",
}


@dataclass
class Document:
    """Prose sentences of one file (or one package's docstrings), in reading order."""

    source: str
    sentences: list[str]


@dataclass
class TextInputs:
    """The built set: model inputs, what post-processing needs, and where the text came from."""

    features: BertFeatures
    postprocess: PostprocessData
    examples: list[SquadExample]
    paragraphs: list[list[str]]
    eval_features: list[EvalFeature]
    squad: dict[str, Any]
    sources: list[dict[str, Any]] = field(default_factory=list)
    corpus_sha256: str = ""
    passes: int = 1

    def describe(self) -> dict[str, Any]:
        """Counts, the length distribution (real tokens per feature) and the text sources, for reports."""
        lengths = self.features.lengths.astype(np.float64)
        return {
            "examples": len(self.examples),
            "contexts": len(self.paragraphs),
            "features": len(self.features),
            "features_at_384": int((self.features.lengths == MAX_SEQ_LENGTH).sum()),
            "multi_window_examples": int(sum(1 for f in self.eval_features if f.doc_span_index == 1)),
            "length_mean": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
            "length_p50": float(np.percentile(lengths, 50)) if len(lengths) else 0.0,
            "length_p90": float(np.percentile(lengths, 90)) if len(lengths) else 0.0,
            "length_max": int(self.features.lengths.max()) if len(lengths) else 0,
            "corpus_sha256": self.corpus_sha256,
            "corpus_passes": self.passes,
            "sources": self.sources,
        }


# ------------------------------------------------------------------------------------------------- the corpus


def prose_sentences(text: str) -> list[str]:
    """The sentences of ``text`` that read as English prose (see the module docstring for the rule)."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for sentence in _SENTENCE_END.split(flat):
            words = sentence.split()
            if not SENTENCE_WORDS[0] <= len(words) <= SENTENCE_WORDS[1]:
                continue
            if not sentence[0].isupper() or sentence[-1] not in ".!?" or _NOT_PROSE.search(sentence):
                continue
            if sum(1 for w in words if _WORD.fullmatch(w)) < 0.9 * len(words):
                continue
            found.append(sentence)
    return found


def _requirement_names() -> list[str]:
    """Distribution names pinned in requirements*.txt, torch excluded (GPU machines bring their own build)."""
    names = []
    for name in ("requirements.txt", "requirements-assets.txt"):
        path = REPO_ROOT / name
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==", line)
            if match and match[1].lower() != "torch":
                names.append(match[1])
    return names


def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _files(name: str, keep: Callable[[str], bool]) -> Iterator[tuple[str, importlib.metadata.PackagePath]]:
    """The files of an installed distribution whose path ``keep`` takes, as (path, file), in path order; none when
    it is not installed."""
    dist = _distribution(name)
    for file in sorted(dist.files or [], key=str) if dist is not None else []:
        if keep(str(file)):
            yield str(file), file


def _prose_file_documents(name: str) -> Iterator[Document]:
    """License texts, READMEs and the package description of one installed distribution."""
    for path, file in _files(name, lambda path: bool(_PROSE_FILE.search(path)) and not _NOT_PROSE_FILE.search(path)):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if text:
            yield Document(f"{name}:{path}", prose_sentences(text))


def _docstring_documents(name: str) -> Iterator[Document]:
    """One document per module of a distribution: its docstrings in source order (module, classes, functions)."""
    for path, file in _files(name, lambda path: path.endswith(".py") and "/test" not in path):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        sentences = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                docstring = ast.get_docstring(node)
                if docstring:
                    sentences += prose_sentences(docstring)
        yield Document(f"{name}:{path} (docstrings)", sentences)


def _fixture_documents(fixture: Path) -> Iterator[Document]:
    data = json.loads(fixture.read_text(encoding="utf-8"))["data"]
    for article in data:
        for index, paragraph in enumerate(article["paragraphs"]):
            yield Document(f"fixture:{fixture.name}:{article['title']}:{index}", prose_sentences(paragraph["context"]))


class Corpus:
    """The documents of every source, read lazily (a small set reads only the first sources) and kept for later
    passes; duplicate sentences are dropped. Records what was read: a per-source summary and a sha256."""

    def __init__(self, fixture: Path | None = FIXTURE) -> None:
        self.documents: list[Document] = []
        self.summary: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._digest = hashlib.sha256()
        self._pending = self._read(fixture)

    @staticmethod
    def _groups(fixture: Path | None) -> Iterator[tuple[str, Iterator[Document]]]:
        if fixture is not None and fixture.is_file():
            yield f"fixture {fixture.name}", _fixture_documents(fixture)
        for name in _requirement_names():
            yield f"{name} prose files", _prose_file_documents(name)
        for name in DOCSTRING_PACKAGES:
            yield f"{name} docstrings", _docstring_documents(name)

    def _read(self, fixture: Path | None) -> Iterator[Document]:
        for label, docs in self._groups(fixture):
            entry = {"source": label, "documents": 0, "sentences": 0, "words": 0}
            self.summary.append(entry)
            for doc in docs:
                fresh = [s for s in doc.sentences if s not in self._seen]
                if not fresh:
                    continue
                self._seen.update(fresh)
                for sentence in fresh:
                    self._digest.update(sentence.encode() + b"\n")
                entry["documents"] += 1
                entry["sentences"] += len(fresh)
                entry["words"] += sum(len(s.split()) for s in fresh)
                yield Document(doc.source, fresh)

    def __iter__(self) -> Iterator[Document]:
        """One pass: the documents read so far, then more from the sources until they run out."""
        index = 0
        while True:
            if index == len(self.documents):
                document = next(self._pending, None)
                if document is None:
                    return
                self.documents.append(document)
            yield self.documents[index]
            index += 1

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()


# ----------------------------------------------------------------------------------------------- the questions


def _strip_edges(words: list[str], start: int, end: int) -> tuple[int, int] | None:
    """Characters to cut off the phrase's first and last word so the answer carries no edge punctuation."""
    first, last = words[start], words[end - 1]
    lead = len(first) - len(first.lstrip(_EDGE_PUNCT))
    trail = len(last) - len(last.rstrip(_EDGE_PUNCT))
    if start == end - 1 and lead + trail >= len(first):
        return None
    return lead, trail


def _continues_name(previous: str) -> bool:
    """Whether a capitalised word after ``previous`` is inside a name already taken (or starts a sentence)."""
    return previous.endswith((".", ":")) or (previous[-1].isalnum() and previous.strip(_EDGE_PUNCT)[:1].isupper())


def phrase_candidates(words: list[str]) -> list[tuple[int, int, str]]:
    """(first word, end word, wh-word) of phrases a question can ask about: numbers, names, noun phrases."""
    found: list[tuple[int, int, str]] = []
    for i, word in enumerate(words):
        core = word.strip(_EDGE_PUNCT)
        if not core:
            continue
        if re.fullmatch(r"\d[\d,.]*", core):
            year = re.fullmatch(r"1[0-9]{3}|20[0-9]{2}", core) is not None
            found.append((i, i + 1, "what year" if year else "how many"))
        elif i > 0 and core[0].isupper() and core.isalpha() and not _continues_name(words[i - 1]):
            end = i + 1
            while (
                end < len(words)
                and end - i < 4
                and words[end - 1][-1].isalnum()
                and words[end].strip(_EDGE_PUNCT)[:1].isupper()
            ):
                end += 1
            found.append((i, end, "who or what"))
        elif core.lower() in _DETERMINERS and word == core and i + 1 < len(words):
            end = i + 1
            while end < len(words) and end - i <= 3:
                piece = words[end]
                if piece.strip(_EDGE_PUNCT).lower() in _STOP_AFTER:
                    break
                end += 1
                if piece[-1] in ",.;:!?)":
                    break
            if end > i + 1:
                found.append((i + 1, end, "what"))
    return found


def make_question(words: list[str], rng: random.Random) -> tuple[str, int, int, int, int] | None:
    """An echo question about one phrase of a sentence, and the phrase as (start, end, lead, trail) cuts.

    The question keeps a few words either side of the phrase (SQuAD questions average ~11 words) and puts the
    wh-word where the phrase was.
    """
    candidates = phrase_candidates(words)
    if not candidates:
        if len(words) < 8:
            return None
        start = rng.randrange(2, len(words) - 3)
        candidates = [(start, start + rng.randint(1, 2), "what")]
    start, end, wh = rng.choice(candidates)
    cuts = _strip_edges(words, start, end)
    if cuts is None:
        return None
    left = max(0, start - rng.randint(2, 7))
    right = min(len(words), end + rng.randint(2, 7))
    kept = [*words[left:start], wh, *words[end:right]]
    kept[-1] = kept[-1].rstrip(_EDGE_PUNCT) or kept[-1]
    text = " ".join(kept).strip(_EDGE_PUNCT + " ")
    if not text:
        return None
    return text[0].upper() + text[1:] + "?", start, end, cuts[0], cuts[1]


# ------------------------------------------------------------------------------------------------- the contexts


def _context_target(rng: random.Random) -> int:
    """Word pieces of the next context: LogNormal like the synthetic features (SQuAD-like lengths)."""
    value = rng.lognormvariate(math.log(SYNTH_CONTEXT_MEDIAN), SYNTH_CONTEXT_SIGMA)
    return int(min(max(round(value), SYNTH_CONTEXT_RANGE[0]), SYNTH_CONTEXT_RANGE[1]))


def _piece_count(tokenizer: BertTokenizer, sentence: str) -> int:
    return sum(len(tokenizer.tokenize(word)) for word in sentence.split())


def _contexts(
    documents: Corpus, tokenizer: BertTokenizer, rng: random.Random, offset: int
) -> Iterator[tuple[str, list[str]]]:
    """(source, sentences) runs of consecutive sentences of one document, each about a drawn piece count.

    ``offset`` shifts where the runs start (a second pass over a small corpus gives other contexts).
    """
    for doc in documents:
        run: list[str] = []
        pieces = 0
        target = _context_target(rng)
        for sentence in doc.sentences[offset % max(len(doc.sentences), 1) :]:
            run.append(sentence)
            pieces += _piece_count(tokenizer, sentence)
            if pieces >= target:
                yield doc.source, run
                run, pieces, target = [], 0, _context_target(rng)
        if run and pieces >= target // 2:
            yield doc.source, run


def _windows(tokenizer: BertTokenizer, context: str, question: str) -> int:
    """How many features preprocessing will make of this example (same rule as convert_examples_to_features)."""
    query = min(len(tokenizer.tokenize(question)), MAX_QUERY_LENGTH)
    return len(doc_spans_for(_piece_count(tokenizer, context), MAX_SEQ_LENGTH - query - 3, DOC_STRIDE))


def _paragraph(
    source_index: int, sentences: list[str], tokenizer: BertTokenizer, rng: random.Random
) -> tuple[dict[str, Any], int]:
    """One SQuAD paragraph (context + questions) and the number of features it will give."""
    context = " ".join(sentences)
    starts, position = [], 0
    for sentence in sentences:
        starts.append(position)
        position += len(sentence) + 1
    qas, asked = [], set()
    windows = 0
    for _ in range(rng.randint(*QUESTIONS_PER_CONTEXT)):
        which = rng.randrange(len(sentences))
        words = sentences[which].split()
        made = make_question(words, rng)
        if made is None or made[0] in asked:
            continue
        question, start, end, lead, trail = made
        asked.add(question)
        char_start = starts[which] + sum(len(w) + 1 for w in words[:start]) + lead
        phrase = " ".join(words[start:end])
        answer = phrase[lead : len(phrase) - trail]
        assert context[char_start : char_start + len(answer)] == answer
        qas.append(
            {
                "id": f"text-{source_index:05d}-{len(qas):02d}",
                "question": question,
                "answers": [{"text": answer, "answer_start": char_start}],
            }
        )
        windows += _windows(tokenizer, context, question)
    return {"context": context, "qas": qas}, windows


def _fixture_feature_count(fixture: Path, tokenizer: BertTokenizer) -> int:
    data = json.loads(fixture.read_text(encoding="utf-8"))["data"]
    return sum(
        _windows(tokenizer, p["context"], qa["question"]) for a in data for p in a["paragraphs"] for qa in p["qas"]
    )


def build_squad(
    documents: Corpus, tokenizer: BertTokenizer, min_features: int, seed: int, fixture: Path | None = FIXTURE
) -> tuple[dict[str, Any], int]:
    """A SQuAD v1.1-format dict with at least ``min_features`` features, and how many passes over the corpus."""
    rng = random.Random(seed)
    data: list[dict[str, Any]] = []
    total = 0
    if fixture is not None and fixture.is_file():
        data += json.loads(fixture.read_text(encoding="utf-8"))["data"]
        total += _fixture_feature_count(fixture, tokenizer)
    articles: dict[str, dict[str, Any]] = {}
    passes = paragraphs = 0
    while total < min_features:
        passes += 1
        made_any = False
        for source, sentences in _contexts(documents, tokenizer, rng, offset=passes - 1):
            paragraph, windows = _paragraph(paragraphs, sentences, tokenizer, rng)
            if not paragraph["qas"]:
                continue
            paragraphs += 1
            key = f"{source} #{passes}"
            article = articles.setdefault(key, {"title": key, "paragraphs": []})
            if not article["paragraphs"]:
                data.append(article)
            article["paragraphs"].append(paragraph)
            total += windows
            made_any = True
            if total >= min_features:
                break
        if not made_any:
            raise ValueError(
                "the text corpus yields no questions; is the fixture or nltk installed? (make setup installs both)"
            )
    return {"version": "text-inputs-1", "data": data}, passes


# ------------------------------------------------------------------------------------------------- the features


def features_from_eval(eval_features: list[EvalFeature]) -> BertFeatures:
    """Model inputs of preprocessed features, as BertFeatures (real text: ``synthetic`` is False)."""
    n = len(eval_features)
    input_ids = np.array([f.input_ids for f in eval_features], dtype=np.int32).reshape(n, MAX_SEQ_LENGTH)
    segment_ids = np.array([f.segment_ids for f in eval_features], dtype=np.int32).reshape(n, MAX_SEQ_LENGTH)
    input_mask = np.array([f.input_mask for f in eval_features], dtype=np.int32).reshape(n, MAX_SEQ_LENGTH)
    gold = np.array([[f.start_position, f.end_position] for f in eval_features], dtype=np.int32).reshape(n, 2)
    lengths = input_mask.sum(axis=1, dtype=np.int64).astype(np.int32)
    return BertFeatures(input_ids, segment_ids, input_mask, lengths, is_synthetic=False, gold_positions=gold)


def build_text_inputs(
    min_features: int = DEFAULT_FEATURES,
    seed: int = 0,
    vocab_path: Path | None = None,
    fixture: Path | None = FIXTURE,
    work_dir: Path | None = None,
) -> TextInputs:
    """At least ``min_features`` SQuAD-like features of real English text, through our SQuAD preprocessing.

    Deterministic in (installed text, ``seed``). ``work_dir`` keeps the generated ``text_squad.json`` (the file
    ``read_squad_examples`` reads); without it a temporary folder is used and removed.
    """
    tokenizer = BertTokenizer(vocab_path or find_vocab())
    corpus = Corpus(fixture)
    squad, passes = build_squad(corpus, tokenizer, min_features, seed, fixture)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(work_dir) if work_dir is not None else Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        squad_path = folder / "text_squad.json"
        squad_path.write_text(json.dumps(squad, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        examples, paragraphs = read_squad_examples(squad_path)
    eval_features = convert_examples_to_features(examples, tokenizer)
    postprocess = PostprocessData(
        qas_ids=[e.qas_id for e in examples],
        example_doc_tokens=[e.doc_tokens for e in examples],
        features=eval_features,
    )
    return TextInputs(
        features_from_eval(eval_features),
        postprocess,
        examples,
        paragraphs,
        eval_features,
        squad,
        corpus.summary,
        corpus.sha256,
        passes,
    )


def save_text_inputs(inputs: TextInputs, out_dir: Path, vocab_path: Path | None = None) -> Path:
    """Save like ``make preprocess_data`` (``<out_dir>/squad_tokenized/``), so ``--input_data=<out_dir>`` reads it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    squad_path = out_dir / "text_squad.json"
    squad_path.write_text(json.dumps(inputs.squad, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    vocab = Path(vocab_path or find_vocab())
    described = inputs.describe()
    manifest = {
        "dataset": "SQuAD-like text inputs (scripts/agreement/text_inputs.py), NOT SQuAD v1.1",
        "source_file": str(squad_path.resolve()),
        "source_sha256": file_checksum(squad_path, "sha256"),
        "vocab_file": str(vocab.resolve()),
        "vocab_sha256": file_checksum(vocab, "sha256"),
        "num_paragraphs": len(inputs.paragraphs),
        "num_examples": len(inputs.examples),
        "num_features": len(inputs.eval_features),
        "num_features_with_answer": sum(1 for f in inputs.eval_features if f.start_position > 0),
        "max_seq_length": MAX_SEQ_LENGTH,
        "doc_stride": DOC_STRIDE,
        "max_query_length": MAX_QUERY_LENGTH,
        "do_lower_case": True,
        "mean_length": described["length_mean"],
        "max_length": described["length_max"],
        "corpus_sha256": inputs.corpus_sha256,
    }
    target = out_dir / TOKENIZED_SUBDIR
    save_features(target, inputs.examples, inputs.paragraphs, inputs.eval_features, manifest)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build SQuAD-like features from installed English text.")
    parser.add_argument("--features", type=int, default=DEFAULT_FEATURES, help="at least this many features")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="save as a preprocessed set (<out>/squad_tokenized/), usable as --input_data=<out>",
    )
    args = parser.parse_args(argv)
    try:
        inputs = build_text_inputs(args.features, args.seed)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    described = inputs.describe()
    sources = described.pop("sources")
    print(json.dumps(described, indent=2))
    for source in sources:
        print(
            f"  {source['source']}: {source['documents']} documents, {source['sentences']} sentences, "
            f"{source['words']} words"
        )
    if args.out is not None:
        print(f"saved: {save_text_inputs(inputs, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
