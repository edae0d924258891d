"""Tokenize SQuAD v1.1 dev into the BERT eval features the harness serves (`make preprocess_data BENCHMARKS=bert`).

    python -m code.bert.preprocess_data [--data_dir build/data] [--preprocessed_data_dir build/preprocessed_data]
                                        [--model_dir build/models] [--squad_json PATH]

Reads `<data_dir>/squad/dev-v1.1.json` (where `make download_data` puts it; `<data_dir>/dev-v1.1.json` also
works), writes `<preprocessed_data_dir>/squad_tokenized/` (layout in `code/bert/squad.py`).
Tokenization is untimed in MLPerf, so it is done once here and the run only loads arrays.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from code.bert.squad import (
    DOC_STRIDE,
    MAX_QUERY_LENGTH,
    MAX_SEQ_LENGTH,
    SQUAD_SUBDIR,
    TOKENIZED_SUBDIR,
    convert_examples_to_features,
    read_squad_examples,
    save_features,
)
from code.bert.vocab import BertTokenizer, find_vocab
from code.common.constants import DATASET_SIZE, Benchmark
from code.common.download import file_checksum
from code.common.faults import fault_exit
from code.common.paths import DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR

SQUAD_DEV_FILE = "dev-v1.1.json"
EXPECTED_DEV_EXAMPLES = 10570
EXPECTED_DEV_FEATURES = DATASET_SIZE[Benchmark.BERT]  # the QSL: one sample per feature


def default_squad_json(data_dir: Path) -> Path:
    """`<data_dir>/squad/dev-v1.1.json` (the download's place), else a dev file directly in `data_dir`."""
    nested = data_dir / SQUAD_SUBDIR / SQUAD_DEV_FILE
    flat = data_dir / SQUAD_DEV_FILE
    return flat if not nested.is_file() and flat.is_file() else nested


def preprocess(
    squad_json: Path,
    out_dir: Path,
    vocab_path: Path,
    max_seq_length: int = MAX_SEQ_LENGTH,
    doc_stride: int = DOC_STRIDE,
    max_query_length: int = MAX_QUERY_LENGTH,
) -> dict:
    """Build and save the features of one SQuAD file; returns the manifest written next to them."""
    if not squad_json.is_file():
        raise FileNotFoundError(f"{squad_json} is missing; run `make download_data BENCHMARKS=bert`")
    tokenizer = BertTokenizer(vocab_path)
    examples, paragraphs = read_squad_examples(squad_json)
    features = convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length)
    lengths = [sum(f.input_mask) for f in features]
    manifest = {
        "dataset": "SQuAD v1.1",
        "source_file": str(squad_json.resolve()),
        "source_sha256": file_checksum(squad_json, "sha256"),
        "vocab_file": str(Path(vocab_path).resolve()),
        "vocab_sha256": file_checksum(vocab_path, "sha256"),
        "num_paragraphs": len(paragraphs),
        "num_examples": len(examples),
        "num_features": len(features),
        "num_features_with_answer": sum(1 for f in features if f.start_position > 0),
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "max_query_length": max_query_length,
        "do_lower_case": True,
        "mean_length": round(sum(lengths) / max(len(lengths), 1), 3),
        "max_length": max(lengths, default=0),
    }
    save_features(out_dir, examples, paragraphs, features, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=Path, default=DATA_DIR)
    parser.add_argument("--preprocessed_data_dir", type=Path, default=PREPROCESSED_DATA_DIR)
    parser.add_argument("--model_dir", type=Path, default=MODELS_DIR)
    parser.add_argument("--squad_json", type=Path, default=None,
                        help=f"default: <data_dir>/{SQUAD_SUBDIR}/{SQUAD_DEV_FILE}")
    args = parser.parse_args(argv)

    squad_json = args.squad_json or default_squad_json(args.data_dir)
    out_dir = args.preprocessed_data_dir / TOKENIZED_SUBDIR
    start = time.monotonic()
    try:
        manifest = preprocess(squad_json, out_dir, find_vocab(args.model_dir))
    except Exception as error:  # a missing or bad input, a full disk, a read-only folder: one line naming the fix
        return fault_exit(error, writing_in=args.preprocessed_data_dir)
    print(
        f"SQuAD: {manifest['num_examples']} questions, {manifest['num_paragraphs']} paragraphs -> "
        f"{manifest['num_features']} features (mean length {manifest['mean_length']}, "
        f"max {manifest['max_length']}) in {time.monotonic() - start:.1f} s -> {out_dir}"
    )
    counts = (manifest["num_examples"], manifest["num_features"])
    if squad_json.name == SQUAD_DEV_FILE and counts != (EXPECTED_DEV_EXAMPLES, EXPECTED_DEV_FEATURES):
        print(f"WARNING: expected {EXPECTED_DEV_EXAMPLES} questions -> {EXPECTED_DEV_FEATURES} features for the "
              "SQuAD v1.1 dev set (MLPerf's QSL size)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
