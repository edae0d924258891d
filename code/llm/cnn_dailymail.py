"""CNN/DailyMail as the MLPerf GPT-J benchmark uses it: the eval file, the prompt, and the constants around them.

The MLCommons reference (`language/gpt-j/download_cnndm.py`) stores the HF `cnn_dailymail` 3.0.0 validation split as
``cnn_eval.json``: a JSON list of 13,368 records ``{"instruction": "Summarize the following news article:",
"input": <article>, "output": <highlights>}``. Its QSL (`language/gpt-j/dataset.py`) turns each record into an
Alpaca-style prompt with ``PROMPT_DICT["prompt_input"].format_map(record)`` and tokenizes it with the GPT-J tokenizer,
``truncation=True, max_length=1919`` (right truncation: the first 1,919 tokens are kept, so a long article loses its
end and the ``### Response:`` tail). The accuracy script scores generated summaries against ``output``.

Everything here is plain data and standard library, so the accuracy code can import it without numpy or tokenizers.
"""

from __future__ import annotations

import json
from pathlib import Path

from code.common.paths import DATA_DIR

DATASET_SUBDIR = "cnn-daily-mail"
"""Folder under ``DATA_DIR`` (NVIDIA's layout: ``build/data/cnn-daily-mail/cnn_eval.json``)."""

EVAL_FILE = "cnn_eval.json"
TOKENIZED_SUBDIR = "cnn_dailymail_tokenized_gptj"
"""Folder under ``PREPROCESSED_DATA_DIR`` written by ``code.gptj.preprocess_data``."""
CALIBRATION_FILE = "cnn_dailymail_calibration.json"
"""The MLPerf calibration set in ``cnn_eval.json``'s format (``code/gptj/calibration_data.py``)."""
CALIBRATION_TOKENIZED_SUBDIR = "cnn_dailymail_calibration_tokenized_gptj"
"""Folder under ``PREPROCESSED_DATA_DIR`` holding the calibration prompts, laid out as ``TOKENIZED_SUBDIR``."""
CNN_DAILYMAIL_CALIBRATION_SAMPLES = 1000
"""Articles of the MLPerf GPT-J calibration list (CNN/DailyMail 3.0.0 train)."""

INPUT_IDS_FILE = "input_ids_padded.npy"
"""int32 ``[N, MAX_INPUT_TOKENS]``: prompt tokens left-aligned, right-padded with ``PAD_TOKEN_ID``."""
INPUT_LENGTHS_FILE = "input_lengths.npy"
"""int32 ``[N]``: real prompt tokens of each row."""
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1

CNN_DAILYMAIL_VALIDATION_SAMPLES = 13368
"""Records of HF ``cnn_dailymail`` 3.0.0 ``validation``: GPT-J's QSL total and performance sample count."""

INSTRUCTION = "Summarize the following news article:"
"""``instruction_template`` of the reference's ``download_cnndm.py``, stored in every record."""

PROMPT_TEMPLATE = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
"""``PROMPT_DICT["prompt_input"]`` of mlcommons/inference ``language/gpt-j/dataset.py`` (unchanged since v3.1)."""

MAX_SEQ_LEN = 2048
MAX_NEW_TOKENS = 128
MAX_INPUT_TOKENS = MAX_SEQ_LEN - MAX_NEW_TOKENS - 1
"""1,919: the reference's ``max_length`` for prompt truncation (2048 context - 128 generated - 1)."""

RECORD_KEYS = ("instruction", "input", "output")


class CnnDailyMailError(ValueError):
    """An eval file that is not what the benchmark needs; the message names the file and what to run."""


def default_eval_json(data_dir: Path = DATA_DIR) -> Path:
    """``<data_dir>/cnn-daily-mail/cnn_eval.json``, where ``make download_data BENCHMARKS=gptj`` puts it."""
    return Path(data_dir) / DATASET_SUBDIR / EVAL_FILE


def build_prompt(record: dict) -> str:
    """The reference prompt of one record (``str.format_map``, so braces inside the article are kept verbatim)."""
    return PROMPT_TEMPLATE.format_map({"instruction": record["instruction"], "input": record["input"]})


def make_record(article: str, highlights: str) -> dict:
    """One ``cnn_eval.json`` record, keys in the reference's order."""
    return {"instruction": INSTRUCTION, "input": article, "output": highlights}


def check_records(records: object, source: Path | str, expected_count: int | None = None) -> list[dict]:
    """Return ``records`` if it is a list of ``{instruction, input, output}`` string records (of ``expected_count``).

    Raises ``CnnDailyMailError`` naming the first bad record and the command that rebuilds the file.
    """
    fix = "run `make download_data BENCHMARKS=gptj` (delete the file first if it is damaged)"
    if not isinstance(records, list):
        raise CnnDailyMailError(f"{source}: expected a JSON list of records, got {type(records).__name__}; {fix}")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise CnnDailyMailError(f"{source}: record {index} is a {type(record).__name__}, not an object; {fix}")
        for key in RECORD_KEYS:
            if not isinstance(record.get(key), str):
                raise CnnDailyMailError(
                    f"{source}: record {index} has no string {key!r} (keys: {', '.join(map(str, record))}); {fix}"
                )
    if expected_count is not None and len(records) != expected_count:
        raise CnnDailyMailError(
            f"{source}: {len(records)} records, expected {expected_count} (CNN/DailyMail 3.0.0 validation); {fix}"
        )
    return records


def load_eval_records(path: Path, expected_count: int | None = None) -> list[dict]:
    """Read and check a ``cnn_eval.json`` (the reference's format); ``expected_count`` None accepts any size."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `make download_data BENCHMARKS=gptj`")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CnnDailyMailError(
            f"{path} is not valid UTF-8 JSON ({error}); delete it and run `make download_data BENCHMARKS=gptj`"
        ) from error
    return check_records(records, path, expected_count)


def load_targets(path: Path) -> list[str]:
    """The reference summaries (``output``, the highlights) in QSL order, for ROUGE."""
    return [record["output"] for record in load_eval_records(path)]
