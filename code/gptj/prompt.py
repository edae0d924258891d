"""GPT-J's prompt over a CNN/DailyMail record, its truncation, and the tokenized layout ``preprocess_data`` writes.

The MLCommons GPT-J QSL (`language/gpt-j/dataset.py`) turns each ``cnn_eval.json`` record
(``code/llm/cnn_dailymail.py``) into an Alpaca-style prompt with ``PROMPT_DICT["prompt_input"].format_map(record)``
and tokenizes it with the GPT-J tokenizer, ``truncation=True, max_length=1919`` (right truncation: the first 1,919
tokens are kept, so a long article loses its end and the ``### Response:`` tail).
"""

from __future__ import annotations

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


def build_prompt(record: dict) -> str:
    """The reference prompt of one record (``str.format_map``, so braces inside the article are kept verbatim)."""
    return PROMPT_TEMPLATE.format_map({"instruction": record["instruction"], "input": record["input"]})
