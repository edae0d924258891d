"""SQuAD v1.1 examples and BERT eval features, built the way the MLCommons reference builds them.

The QSL of the bert benchmark is the list of eval features of the SQuAD v1.1 dev set (10,570 questions -> 10,833
features): `[CLS] question [SEP] context-window [SEP]`, windows of the word-piece context taken every
`doc_stride` tokens. Accuracy is only comparable with other submissions if these features are the reference's to
the token, so this module follows `create_squad_data.py` step by step (whitespace split of the context with the
same whitespace set, WordPiece per whitespace token, the same window loop and max-context rule).

Besides what the reference keeps, each feature records where the first gold answer lies inside its window
(`start_position`/`end_position`, 0/0 when the window does not contain it): the oracle backend and the tests use
these, inference never does.

On disk (`<preprocessed_data_dir>/squad_tokenized/`, see `save_features`):
  input_ids.npy, segment_ids.npy, input_mask.npy  int32 [N, 384]
  gold_positions.npy                              int32 [N, 2]
  squad_eval.json.gz                              what post-processing needs (format below)
  manifest.json                                   counts, parameters, source and vocab sha256 (written last)
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from code.bert.vocab import CLS_TOKEN, SEP_TOKEN, BertTokenizer
from code.common import atomic
from code.common.faults import DataFileError, check_free_space, reading
from code.common.periodic import track

MAX_SEQ_LENGTH = 384
PAD_LOGIT = -10000.0
"""Start/end logit of positions past a sample's last token in a response, as the reference pads: finite, so every
reader parses it, and never among the n-best spans post-processing picks from."""
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64

SQUAD_SUBDIR = "squad"
"""Folder under ``DATA_DIR`` of the downloaded dev set and calibration list (``make download_data``)."""
TOKENIZED_SUBDIR = "squad_tokenized"
ARRAY_FILES = ("input_ids.npy", "segment_ids.npy", "input_mask.npy")
GOLD_FILE = "gold_positions.npy"
EVAL_FILE = "squad_eval.json.gz"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1


def tokenized_dir(root: Path) -> Path:
    """The folder of the preprocessed arrays: ``root`` itself when it holds them (the ``squad_tokenized`` folder
    under any name, as ``--input_data`` accepts it), else its ``squad_tokenized`` subfolder."""
    root = Path(root)
    own_layout = root.name == TOKENIZED_SUBDIR or (root / MANIFEST_FILE).is_file()
    return root if own_layout else root / TOKENIZED_SUBDIR


@dataclass
class SquadExample:
    """One question over one paragraph, the context split on whitespace as the reference splits it."""

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    answers: list[str]
    start_position: int | None = None  # word index of the first answer's first word
    end_position: int | None = None  # word index of the first answer's last word
    paragraph_index: int = 0


@dataclass
class EvalFeature:
    """One window of one example: model inputs plus what post-processing needs to map logits to text."""

    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    start_position: int = 0
    end_position: int = 0
    doc_offset: int = field(default=0)  # position of the window's first context token (len(query) + 2)


def _is_squad_whitespace(char: str) -> bool:
    # The reference's set, narrower than BERT's: e.g. a no-break space stays inside a word here.
    return char in (" ", "\t", "\r", "\n") or ord(char) == 0x202F


def split_context(text: str) -> tuple[list[str], list[int]]:
    """Whitespace-split a context; also the word index of every character (to place character-offset answers)."""
    doc_tokens: list[str] = []
    char_to_word_offset: list[int] = []
    prev_is_whitespace = True
    for char in text:
        if _is_squad_whitespace(char):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(char)
            else:
                doc_tokens[-1] += char
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def read_squad_examples(path: Path) -> tuple[list[SquadExample], list[list[str]]]:
    """All questions of a SQuAD v1.1 file in file order, plus the whitespace tokens of each paragraph."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    examples: list[SquadExample] = []
    paragraphs: list[list[str]] = []
    for article in data:
        for paragraph in article["paragraphs"]:
            doc_tokens, char_to_word = split_context(paragraph["context"])
            paragraph_index = len(paragraphs)
            paragraphs.append(doc_tokens)
            for qa in paragraph["qas"]:
                answers = qa.get("answers", [])
                start = end = None
                if answers:
                    first = answers[0]
                    offset = int(first["answer_start"])
                    length = len(first["text"])
                    if length > 0 and offset + length - 1 < len(char_to_word):
                        start = char_to_word[offset]
                        end = char_to_word[offset + length - 1]
                examples.append(
                    SquadExample(
                        qas_id=qa["id"],
                        question_text=qa["question"],
                        doc_tokens=doc_tokens,
                        answers=[a["text"] for a in answers],
                        start_position=start,
                        end_position=end,
                        paragraph_index=paragraph_index,
                    )
                )
    return examples, paragraphs


def check_is_max_context(doc_spans: list[tuple[int, int]], cur_span_index: int, position: int) -> bool:
    """Whether window `cur_span_index` gives token `position` its most context (min of left/right, ties to longer).

    A token in the overlap of two windows must be scored in only one of them, else the same answer would be
    proposed twice with different logits.
    """
    best_score = None
    best_span_index = None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def _improve_answer_span(
    doc_tokens: list[str], start: int, end: int, tokenizer: BertTokenizer, answer_text: str
) -> tuple[int, int]:
    """Narrow a word-level answer span to the word pieces that spell the answer (e.g. "1895" in "(1895-1943).")."""
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start : new_end + 1]) == target:
                return new_start, new_end
    return start, end


def doc_spans_for(num_doc_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window: every `doc_stride` tokens until one reaches the end of the context."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < num_doc_tokens:
        length = min(num_doc_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_doc_tokens:
            break
        start += min(length, doc_stride)
    return spans


def convert_examples_to_features(
    examples: list[SquadExample],
    tokenizer: BertTokenizer,
    max_seq_length: int = MAX_SEQ_LENGTH,
    doc_stride: int = DOC_STRIDE,
    max_query_length: int = MAX_QUERY_LENGTH,
) -> list[EvalFeature]:
    """Eval features of all examples, in example order, windows of one example consecutive."""
    features: list[EvalFeature] = []
    pad_id = 0
    for example_index, example in enumerate(track(examples, len(examples), "SQuAD questions -> features",
                                                   "questions", step="preprocess_data")):
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]

        tok_to_orig_index: list[int] = []
        orig_to_tok_index: list[int] = []
        all_doc_tokens: list[str] = []
        for i, word in enumerate(example.doc_tokens):
            orig_to_tok_index.append(len(all_doc_tokens))
            for piece in tokenizer.tokenize(word):
                tok_to_orig_index.append(i)
                all_doc_tokens.append(piece)

        tok_start = tok_end = None
        if example.start_position is not None and example.end_position is not None and all_doc_tokens:
            tok_start = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end = len(all_doc_tokens) - 1
            tok_start, tok_end = _improve_answer_span(
                all_doc_tokens, tok_start, tok_end, tokenizer, example.answers[0]
            )

        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3  # [CLS], [SEP], [SEP]
        doc_spans = doc_spans_for(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
        doc_offset = len(query_tokens) + 2

        for span_index, (span_start, span_length) in enumerate(doc_spans):
            tokens = [CLS_TOKEN, *query_tokens, SEP_TOKEN]
            segment_ids = [0] * len(tokens)
            token_to_orig_map: dict[int, int] = {}
            token_is_max_context: dict[int, bool] = {}
            for i in range(span_length):
                split_index = span_start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_index]
                token_is_max_context[len(tokens)] = check_is_max_context(doc_spans, span_index, split_index)
                tokens.append(all_doc_tokens[split_index])
                segment_ids.append(1)
            tokens.append(SEP_TOKEN)
            segment_ids.append(1)

            input_ids = tokenizer.convert_tokens_to_ids(tokens)
            input_mask = [1] * len(input_ids)
            padding = max_seq_length - len(input_ids)
            input_ids += [pad_id] * padding
            input_mask += [0] * padding
            segment_ids += [0] * padding

            start_position = end_position = 0
            if tok_start is not None and tok_end is not None:
                span_end = span_start + span_length - 1
                if span_start <= tok_start and tok_end <= span_end:
                    start_position = tok_start - span_start + doc_offset
                    end_position = tok_end - span_start + doc_offset

            features.append(
                EvalFeature(
                    example_index=example_index,
                    doc_span_index=span_index,
                    tokens=tokens,
                    token_to_orig_map=token_to_orig_map,
                    token_is_max_context=token_is_max_context,
                    input_ids=input_ids,
                    input_mask=input_mask,
                    segment_ids=segment_ids,
                    start_position=start_position,
                    end_position=end_position,
                    doc_offset=doc_offset,
                )
            )
    return features


def save_features(
    out_dir: Path,
    examples: list[SquadExample],
    paragraphs: list[list[str]],
    features: list[EvalFeature],
    manifest: dict,
) -> None:
    """Write the arrays, the post-processing file and (last, as the completeness marker) manifest.json.

    The set is written whole or not at all: into a folder beside ``out_dir`` renamed into its place when complete
    (``atomic.replacing_folder_alone``), after a check that the disk can hold it, so a full disk leaves the earlier set
    as it was and says so instead of a traceback.

    `squad_eval.json.gz` (gzip'd JSON, no code execution on load unlike pickle):
      {"format": 1,
       "paragraphs": [[doc word, ...], ...],                  # whitespace tokens of each context, once
       "examples":   [{"qas_id": str, "paragraph": int}, ...],
       "features":   [{"example_index": int, "doc_span_index": int, "tokens": [str, ...],
                       "doc_offset": int,                     # window position of the first context token
                       "token_to_orig": [int, ...],           # word index of window positions doc_offset, ...
                       "max_context": [0|1, ...],             # token_is_max_context of those positions
                       "gold": [start, end]}, ...]}           # also in gold_positions.npy
    """
    n = len(features)
    arrays = {
        "input_ids.npy": np.array([f.input_ids for f in features], dtype=np.int32).reshape(n, -1),
        "segment_ids.npy": np.array([f.segment_ids for f in features], dtype=np.int32).reshape(n, -1),
        "input_mask.npy": np.array([f.input_mask for f in features], dtype=np.int32).reshape(n, -1),
        GOLD_FILE: np.array([[f.start_position, f.end_position] for f in features], dtype=np.int32).reshape(n, 2),
    }
    payload = {
        "format": FORMAT_VERSION,
        "paragraphs": paragraphs,
        "examples": [{"qas_id": e.qas_id, "paragraph": e.paragraph_index} for e in examples],
        "features": [
            {
                "example_index": f.example_index,
                "doc_span_index": f.doc_span_index,
                "tokens": f.tokens,
                "doc_offset": f.doc_offset,
                "token_to_orig": [f.token_to_orig_map[p] for p in sorted(f.token_to_orig_map)],
                "max_context": [int(f.token_is_max_context[p]) for p in sorted(f.token_is_max_context)],
                "gold": [f.start_position, f.end_position],
            }
            for f in features
        ],
    }
    eval_bytes = gzip.compress(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    needed = sum(array.nbytes for array in arrays.values()) + len(eval_bytes)
    check_free_space(out_dir.parent, needed, f"the preprocessed SQuAD set ({n} features)")
    with atomic.replacing_folder_alone(out_dir) as folder:
        for name, array in arrays.items():
            np.save(folder / name, array)
        (folder / EVAL_FILE).write_bytes(eval_bytes)
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")


@dataclass
class PostprocessData:
    """What post-processing reads back: examples (qas id, context words) and per-feature window metadata."""

    qas_ids: list[str]
    example_doc_tokens: list[list[str]]
    features: list[EvalFeature]


def load_postprocess_data(tokenized_dir: Path) -> PostprocessData:
    """Read `squad_eval.json.gz` back into `EvalFeature`s (model inputs left empty: they live in the .npy files)."""
    path = Path(tokenized_dir) / EVAL_FILE
    fix = "preprocess it again: make preprocess_data BENCHMARKS=bert"
    if not path.is_file():
        raise DataFileError(f"{path} is missing; {fix}")
    with reading(path, fix), gzip.open(path, "rt", encoding="utf-8") as f:
        payload = json.load(f)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise DataFileError(f"{path} has format {found}, expected {FORMAT_VERSION}; {fix}")
    paragraphs = payload["paragraphs"]
    features = []
    for record in payload["features"]:
        offset = record["doc_offset"]
        features.append(
            EvalFeature(
                example_index=record["example_index"],
                doc_span_index=record["doc_span_index"],
                tokens=record["tokens"],
                token_to_orig_map={offset + i: w for i, w in enumerate(record["token_to_orig"])},
                token_is_max_context={offset + i: bool(m) for i, m in enumerate(record["max_context"])},
                input_ids=[],
                input_mask=[],
                segment_ids=[],
                start_position=record["gold"][0],
                end_position=record["gold"][1],
                doc_offset=offset,
            )
        )
    return PostprocessData(
        qas_ids=[e["qas_id"] for e in payload["examples"]],
        example_doc_tokens=[paragraphs[e["paragraph"]] for e in payload["examples"]],
        features=features,
    )
