"""The reference's tokenized CNN/DailyMail files -> arrays a run loads (`make preprocess_data BENCHMARKS=llama31`).

    python -m code.llama31.preprocess_data [--data_dir build/data] [--preprocessed_data_dir build/preprocessed_data]

For each data set whose file is there (datacenter ``cnn_eval.json``, edge ``sample_cnn_eval_5000.json``, see
``dataset.py``), writes ``<preprocessed_data_dir>/cnn_dailymail_tokenized_llama3.1-8b/<data set>/``: the records'
``tok_input`` ids as they are (the reference's QSL feeds them unchanged), flat, with offsets, and ``manifest.json``
last (its presence marks a complete folder), naming ``eval_json``, the file the accuracy script reads targets from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from code.common import atomic
from code.common.download import file_checksum
from code.common.paths import DATA_DIR, PREPROCESSED_DATA_DIR
from code.llama31.dataset import (
    EVAL_FILES,
    FORMAT_VERSION,
    MANIFEST_FILE,
    OFFSETS_FILE,
    SAMPLE_COUNTS,
    TOKENIZED_SUBDIR,
    TOKENS_FILE,
    LlamaSamples,
    eval_file,
    load_records,
)


def preprocessed_dir(data_set: str, root: Path = PREPROCESSED_DATA_DIR) -> Path:
    return Path(root) / TOKENIZED_SUBDIR / data_set


def preprocess(eval_json: Path, out_dir: Path, data_set: str, expected_count: int | None = -1) -> dict:
    """Write ``out_dir`` from ``eval_json``; returns the manifest. A file of another size than ``expected_count``
    (default: the data set's; None: any, for tests) is refused: a run on it would not be the benchmark."""
    records = load_records(eval_json)
    expected = SAMPLE_COUNTS[data_set] if expected_count == -1 else expected_count
    if expected is not None and len(records) != expected:
        raise ValueError(f"{eval_json}: {len(records)} records, the {data_set} set has {expected}; "
                         "delete it and run `make download_data BENCHMARKS=llama31`")
    samples = LlamaSamples.from_token_lists([r["tok_input"] for r in records], is_synthetic=False)
    manifest = {"format": FORMAT_VERSION, "data_set": data_set, "count": len(samples),
                "eval_json": str(Path(eval_json).resolve()), "eval_json_sha256": file_checksum(eval_json, "sha256"),
                "lengths": samples.describe_lengths()}
    with atomic.replacing_folder_alone(Path(out_dir)) as folder:
        np.save(folder / TOKENS_FILE, samples.tokens)
        np.save(folder / OFFSETS_FILE, samples.offsets)
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=Path, default=DATA_DIR)
    parser.add_argument("--preprocessed_data_dir", type=Path, default=PREPROCESSED_DATA_DIR)
    args = parser.parse_args(argv)
    found = [s for s in EVAL_FILES if eval_file(s, args.data_dir).is_file()]
    if not found:
        print(f"error: neither {eval_file('datacenter', args.data_dir)} nor {EVAL_FILES['edge']} beside it; run "
              "`make download_data BENCHMARKS=llama31`", file=sys.stderr)
        return 2
    for data_set in found:
        out_dir = preprocessed_dir(data_set, args.preprocessed_data_dir)
        try:
            manifest = preprocess(eval_file(data_set, args.data_dir), out_dir, data_set)
        except (FileNotFoundError, ValueError) as error:  # CnnDailyMailError and DataFileError are ValueErrors
            print(f"error: {error}", file=sys.stderr)
            return 2
        lengths = manifest["lengths"]
        print(f"llama3.1-8b {data_set}: {manifest['count']} prompts (mean {lengths['mean']} tokens, max "
              f"{lengths['max']}) -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
