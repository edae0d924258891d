"""CNN/DailyMail as MLPerf's summarization benchmarks store it: the eval file, its records, the reference summaries.

The MLCommons reference (`language/gpt-j/download_cnndm.py`) stores the HF `cnn_dailymail` 3.0.0 validation split as
``cnn_eval.json``: a JSON list of 13,368 records ``{"instruction": "Summarize the following news article:",
"input": <article>, "output": <highlights>}``. A benchmark turns each record into its model's prompt (GPT-J:
``code/gptj/prompt.py``); the accuracy script scores generated summaries against ``output``.

Everything here but ``describe_lengths`` is plain data and standard library, so the accuracy code can import it
without numpy or tokenizers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from code.common.constants import DATASET_SIZE, Benchmark
from code.common.paths import DATA_DIR

if TYPE_CHECKING:
    import numpy as np

DATASET_SUBDIR = "cnn-daily-mail"
"""Folder under ``DATA_DIR`` (NVIDIA's layout: ``build/data/cnn-daily-mail/cnn_eval.json``)."""

EVAL_FILE = "cnn_eval.json"
CNN_DAILYMAIL_VALIDATION_SAMPLES = DATASET_SIZE[Benchmark.GPTJ]
"""Records of HF ``cnn_dailymail`` 3.0.0 ``validation``: GPT-J's QSL total and performance sample count."""

INSTRUCTION = "Summarize the following news article:"
"""``instruction_template`` of the reference's ``download_cnndm.py``, stored in every record."""

RECORD_KEYS = ("instruction", "input", "output")


class CnnDailyMailError(ValueError):
    """An eval file that is not what the benchmark needs; the message names the file and what to run."""


def default_eval_json(data_dir: Path = DATA_DIR) -> Path:
    """``<data_dir>/cnn-daily-mail/cnn_eval.json``, where ``make download_data BENCHMARKS=gptj`` puts it."""
    return Path(data_dir) / DATASET_SUBDIR / EVAL_FILE


def make_record(article: str, highlights: str) -> dict:
    """One ``cnn_eval.json`` record, keys in the reference's order."""
    return {"instruction": INSTRUCTION, "input": article, "output": highlights}


def convert_records(records: object, source: Path | str) -> list[dict]:
    """``cnn_eval.json`` records from another benchmark's CNN/DailyMail file (llama3.1-8b's, with its own prompt and
    token ids) or from one in this format: keep ``input`` (article) and ``output`` (highlights), set ``INSTRUCTION``.

    The eval set's download and the calibration set's both convert this way."""
    if not isinstance(records, list):
        raise CnnDailyMailError(f"{source}: expected a JSON list of records, got {type(records).__name__}")
    converted = []
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("input", "output")):
            raise CnnDailyMailError(
                f"{source}: record {index} lacks the string fields 'input' (article) and 'output' (highlights)"
            )
        converted.append(make_record(record["input"], record["output"]))
    return converted


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


def describe_lengths(lengths: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Count, mean/min/p50/p90/p99/max prompt length and total prompt tokens of a set of prompts, for logs."""
    import numpy as np

    if len(lengths) == 0:
        return {"count": 0, "mean": 0.0, "min": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0, "total": 0}
    ints = np.asarray(lengths, dtype=np.int64)
    floats = ints.astype(np.float64)
    return {
        "count": len(ints),
        "mean": round(float(floats.mean()), 2),
        "min": int(ints.min()),
        "p50": float(np.percentile(floats, 50)),
        "p90": float(np.percentile(floats, 90)),
        "p99": float(np.percentile(floats, 99)),
        "max": int(ints.max()),
        "total": int(ints.sum()),
    }
