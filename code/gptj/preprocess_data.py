"""Tokenize the CNN/DailyMail eval set into GPT-J prompts (`make preprocess_data BENCHMARKS=gptj`).

    python -m code.gptj.preprocess_data [--data_dir build/data] [--preprocessed_data_dir build/preprocessed_data]
                                        [--model_dir build/models] [--eval_json PATH]

Reads ``<data_dir>/cnn-daily-mail/cnn_eval.json`` and writes ``<preprocessed_data_dir>/cnn_dailymail_tokenized_gptj/``:

- ``input_ids_padded.npy``: int32 ``[N, 1919]``. Row i holds the tokens of record i's prompt (the reference's
  Alpaca template, ``code.gptj.prompt.build_prompt``) truncated like the reference (first 1,919 tokens kept),
  **left-aligned and right-padded** with 50256 (``<|endoftext|>``). The reference tokenizes one sample at a time, so
  it never pads; NVIDIA's harness stores the same right-padded layout. Whoever batches prompts re-pads them on
  whichever side its model needs (the reference's tokenizer pads on the left).
- ``input_lengths.npy``: int32 ``[N]``, the real tokens of each row.
- ``manifest.json`` (written last: its presence marks a complete folder): source file and sha256, count, lengths,
  the tokenizer files and their sha256, and ``eval_json``, the file the accuracy script reads the targets from.

Tokenization is untimed in MLPerf, so it is done once here and runs only load arrays.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from code.common import atomic
from code.common.download import file_checksum
from code.common.faults import check_free_space, fault_exit
from code.common.paths import DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR
from code.common.periodic import track
from code.gptj.prompt import (
    CALIBRATION_FILE,
    CALIBRATION_TOKENIZED_SUBDIR,
    FORMAT_VERSION,
    INPUT_IDS_FILE,
    INPUT_LENGTHS_FILE,
    MANIFEST_FILE,
    MAX_INPUT_TOKENS,
    PROMPT_TEMPLATE,
    TOKENIZED_SUBDIR,
    build_prompt,
)
from code.gptj.tokenizer import PAD_TOKEN_ID, GptjTokenizer, load_tokenizer
from code.llm.cnn_dailymail import (
    CNN_DAILYMAIL_VALIDATION_SAMPLES,
    DATASET_SUBDIR,
    EVAL_FILE,
    INSTRUCTION,
    CnnDailyMailError,
    default_eval_json,
    load_eval_records,
)

PADDING_SIDE = "right"
TRUNCATION_SIDE = "right"


def tokenize_prompts(
    records: list[dict], tokenizer: GptjTokenizer, max_length: int = MAX_INPUT_TOKENS
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(input_ids [N, max_length] right-padded, lengths [N], number truncated)`` of the records' prompts."""
    chunks = [records[i:i + 256] for i in range(0, len(records), 256)]  # a progress line at least every 15 s
    encoded = [ids for chunk in track(chunks, len(chunks), "tokenizing prompts (chunks of 256)", "chunks",
                                      step="preprocess_data")
               for ids in tokenizer.encode_batch([build_prompt(record) for record in chunk])]
    input_ids = np.full((len(encoded), max_length), PAD_TOKEN_ID, dtype=np.int32)
    lengths = np.zeros(len(encoded), dtype=np.int32)
    truncated = 0
    for row, ids in enumerate(encoded):
        if len(ids) > max_length:
            ids = ids[:max_length]  # the reference's truncation=True, max_length=1919: keep the beginning
            truncated += 1
        input_ids[row, : len(ids)] = ids
        lengths[row] = len(ids)
    return input_ids, lengths, truncated


def preprocess(eval_json: Path, out_dir: Path, tokenizer: GptjTokenizer, max_length: int = MAX_INPUT_TOKENS,
               dataset: str = "CNN/DailyMail 3.0.0 validation") -> dict:
    """Tokenize ``eval_json`` into ``out_dir``; returns the manifest written there. The calibration set goes
    through the same function (``dataset`` names which), so its prompts are built exactly like the QSL's."""
    eval_json = Path(eval_json)
    records = load_eval_records(eval_json)
    if not records:
        raise CnnDailyMailError(f"{eval_json} holds no records; run `make download_data BENCHMARKS=gptj`")
    input_ids, lengths, truncated = tokenize_prompts(records, tokenizer, max_length)
    manifest = {
        "format": FORMAT_VERSION,
        "dataset": dataset,
        "source_file": str(eval_json.resolve()),
        "source_sha256": file_checksum(eval_json, "sha256"),
        "eval_json": str(eval_json.resolve()),
        "count": len(records),
        "max_length": max_length,
        "padding_side": PADDING_SIDE,
        "truncation_side": TRUNCATION_SIDE,
        "pad_token_id": PAD_TOKEN_ID,
        "num_truncated": truncated,
        "mean_length": round(float(lengths.mean()), 3),
        "min_length": int(lengths.min()),
        "max_real_length": int(lengths.max()),
        "instruction": INSTRUCTION,
        "prompt_template": PROMPT_TEMPLATE,
        "tokenizer": {
            "vocab_file": str(tokenizer.vocab_file),
            "vocab_sha256": file_checksum(tokenizer.vocab_file, "sha256"),
            "merges_file": str(tokenizer.merges_file),
            "merges_sha256": file_checksum(tokenizer.merges_file, "sha256"),
            "vocab_size": tokenizer.vocab_size,
        },
        "arrays": {
            INPUT_IDS_FILE: {"dtype": "int32", "shape": list(input_ids.shape)},
            INPUT_LENGTHS_FILE: {"dtype": "int32", "shape": list(lengths.shape)},
        },
    }
    save_arrays(out_dir, input_ids, lengths, manifest)
    return manifest


def save_arrays(out_dir: Path, input_ids: np.ndarray, lengths: np.ndarray, manifest: dict) -> None:
    """Write the two arrays, then (last, as the completeness marker) manifest.json; whole or not at all: into a
    folder beside ``out_dir`` renamed into its place when complete (``atomic.replacing_folder_alone``), after a check
    that the disk can hold it, so a full disk leaves the earlier set as it was and says so."""
    out_dir = Path(out_dir)
    arrays = {INPUT_IDS_FILE: np.ascontiguousarray(input_ids, dtype=np.int32),
              INPUT_LENGTHS_FILE: np.ascontiguousarray(lengths, dtype=np.int32)}
    check_free_space(out_dir.parent, sum(array.nbytes for array in arrays.values()),
                     f"the preprocessed prompts ({len(lengths)} of them)")
    with atomic.replacing_folder_alone(out_dir) as folder:
        for name, array in arrays.items():
            np.save(folder / name, array)
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                            encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=Path, default=DATA_DIR)
    parser.add_argument("--preprocessed_data_dir", type=Path, default=PREPROCESSED_DATA_DIR)
    parser.add_argument("--model_dir", type=Path, default=MODELS_DIR, help="where to look for the tokenizer files")
    parser.add_argument("--eval_json", type=Path, default=None, help="default: <data_dir>/cnn-daily-mail/cnn_eval.json")
    parser.add_argument("--calibration_json", type=Path, default=None,
                        help=f"default: <data_dir>/cnn-daily-mail/{CALIBRATION_FILE}, tokenized when present")
    args = parser.parse_args(argv)

    eval_json = args.eval_json or default_eval_json(args.data_dir)
    out_dir = args.preprocessed_data_dir / TOKENIZED_SUBDIR
    calibration_json = args.calibration_json or Path(args.data_dir) / DATASET_SUBDIR / CALIBRATION_FILE
    start = time.monotonic()
    try:
        tokenizer = load_tokenizer(model_dir=args.model_dir)
        manifest = preprocess(eval_json, out_dir, tokenizer)
        if calibration_json.is_file():  # the MLPerf calibration set (make download_data ... CALIBRATION=1)
            calibration_dir = args.preprocessed_data_dir / CALIBRATION_TOKENIZED_SUBDIR
            calibrated = preprocess(calibration_json, calibration_dir, tokenizer,
                                    dataset="CNN/DailyMail 3.0.0 train: the MLPerf GPT-J calibration list")
            print(f"CNN/DailyMail calibration: {calibrated['count']} prompts (mean {calibrated['mean_length']} "
                  f"tokens) -> {calibration_dir}")
    except Exception as error:  # a missing or bad input (CnnDailyMailError is a ValueError), a full disk, a
        # read-only folder: one line naming the fix
        return fault_exit(error, writing_in=args.preprocessed_data_dir)
    print(
        f"CNN/DailyMail: {manifest['count']} prompts (mean {manifest['mean_length']} tokens, max "
        f"{manifest['max_real_length']}, {manifest['num_truncated']} truncated to {manifest['max_length']}) in "
        f"{time.monotonic() - start:.1f} s -> {out_dir}"
    )
    if Path(eval_json).name == EVAL_FILE and manifest["count"] != CNN_DAILYMAIL_VALIDATION_SAMPLES:
        print(
            f"WARNING: expected {CNN_DAILYMAIL_VALIDATION_SAMPLES} records in {eval_json} (GPT-J's QSL size); "
            "run `make download_data BENCHMARKS=gptj`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
