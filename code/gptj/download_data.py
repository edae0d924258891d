"""Download CNN/DailyMail 3.0.0 validation and write the GPT-J reference's ``cnn_eval.json`` (13,368 records).

Run ``python -m code.gptj.download_data [--data_dir build/data] [--source_json PATH] [--refresh_metadata]``; the
result is ``<data_dir>/cnn-daily-mail/cnn_eval.json``, a JSON list of ``{"instruction": "Summarize the following news
article:", "input": <article>, "output": <highlights>}`` in the validation split's order: what
mlcommons/inference ``language/gpt-j/download_cnndm.py`` writes, and what the accuracy script reads.

Where the data comes from. The GPT-J reference builds the file with HF ``datasets`` (``load_dataset("cnn_dailymail",
"3.0.0")``); MLCommons hosts no GPT-J copy. It does host, on its R2 storage with a published md5, the llama3.1-8b
benchmark's ``cnn_eval.json`` (``language/llama3.1-8b/download_cnndm.py``): the same validation split, in the same
order, with ``input`` = the article and ``output`` = the highlights, plus a Llama prompt and its token ids that we
drop. Rewriting those two fields under the GPT-J instruction gives the GPT-J file without ``datasets``/``pyarrow``.
``--source_json`` takes a local file instead, in either format (e.g. one made by the reference's script).

Checksums. The source file is checked against the md5 that MLCommons lists in ``llama3-1-8b-cnn-eval.md5`` (read at
download time, as ``mlc-r2-downloader.sh`` does). No checksum of the GPT-J ``cnn_eval.json`` is published anywhere, so
the first successful run records the sha256 of the source and of the written file in ``cnn_eval.lock.json`` next to
it; later runs check against that record, and a run whose result differs stops with an error instead of silently
using other data. A second run with a verified file makes no network request.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

from code.common.download import download_command, download_parser, file_checksum
from code.common.paths import DATA_DIR
from code.common.r2_download import fetch_r2_file
from code.llm.cnn_dailymail import (
    CNN_DAILYMAIL_VALIDATION_SAMPLES,
    DATASET_SUBDIR,
    EVAL_FILE,
    CnnDailyMailError,
    check_records,
    convert_records,
)

# mlcommons/inference language/llama3.1-8b/README.md ("Full dataset (datacenter)") and mlcommons/mlperf-automations
# script/get-dataset-cnndm/meta.yaml (variation validation,datacenter,llama3,mlc,r2-downloader).
CNN_EVAL_URI = "https://inference.mlcommons-storage.org/metadata/llama3-1-8b-cnn-eval.uri"
SOURCE_FILE = "cnn_eval.json"
SOURCE_SUBDIR = "mlcommons-r2-llama3.1-8b"
"""Folder under ``cnn-daily-mail/`` holding the downloaded source and its R2 metadata."""
LOCK_FILE = "cnn_eval.lock.json"
RETRY_HINT = "delete it and re-run `make download_data BENCHMARKS=gptj`"


def write_eval_json(records: list[dict], path: Path) -> None:
    """Write ``records`` as the reference does (``indent=4``, UTF-8 kept as is), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(records, f, indent=4, ensure_ascii=False)
    os.replace(tmp, path)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CnnDailyMailError(f"{path} is not valid UTF-8 JSON ({error}); {RETRY_HINT}") from error


def _read_lock(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CnnDailyMailError(f"{path} is damaged ({error}); delete it and re-run") from error
    if not isinstance(lock, dict) or not isinstance(lock.get("sha256"), str):
        raise CnnDailyMailError(f"{path} has no sha256 entry; delete it and re-run")
    return lock


def _write_lock(path: Path, eval_json: Path, count: int, source: dict) -> None:
    lock = {
        "file": eval_json.name,
        "sha256": file_checksum(eval_json, "sha256"),
        "count": count,
        "recorded": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "note": "sha256 of the first verified download (no checksum of this file is published); later runs must match",
        **source,
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(lock, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _usable_count(eval_json: Path, lock: dict | None, expected_count: int | None) -> int | None:
    """Records of ``eval_json`` if it can be kept as is (it matches the lock, or, with no lock yet, has the right
    records), else None."""
    if not eval_json.is_file():
        return None
    if lock is not None:
        if file_checksum(eval_json, "sha256") == lock["sha256"]:
            return int(lock.get("count", -1))
        print(f"  {eval_json.name}: differs from {LOCK_FILE}, building it again", file=sys.stderr, flush=True)
        return None
    try:
        return len(check_records(_read_json(eval_json), eval_json, expected_count))
    except CnnDailyMailError as error:
        print(f"  {eval_json.name}: existing file unusable ({error}), building it again", file=sys.stderr, flush=True)
        return None


def download_cnn_dailymail(
    data_dir: Path = DATA_DIR,
    uri_url: str = CNN_EVAL_URI,
    source_json: Path | None = None,
    refresh_metadata: bool = False,
    expected_count: int | None = CNN_DAILYMAIL_VALIDATION_SAMPLES,
    **kwargs: object,
) -> Path:
    """Make ``<data_dir>/cnn-daily-mail/cnn_eval.json`` (GPT-J format, ``expected_count`` records) and return it.

    ``source_json`` replaces the download with a local file. Keyword arguments go to
    ``code.common.download.download``. Raises ``DownloadError`` (network, md5) or ``CnnDailyMailError`` (content,
    count, lock mismatch), each naming the file and what to do.
    """
    out_dir = Path(data_dir) / DATASET_SUBDIR
    eval_json = out_dir / EVAL_FILE
    lock_path = out_dir / LOCK_FILE
    lock = _read_lock(lock_path)

    count = _usable_count(eval_json, lock, expected_count) if source_json is None else None
    if count is not None:
        if lock is None:
            _write_lock(lock_path, eval_json, count, {"source": "file found in place"})
        print(f"  {EVAL_FILE}: present and verified ({eval_json})", file=sys.stderr, flush=True)
        return eval_json

    if source_json is not None:
        source_path = Path(source_json)
        if not source_path.is_file():
            raise FileNotFoundError(f"--source_json {source_path} does not exist")
        provenance = {"source": str(source_path.resolve())}
    else:
        source_path, provenance = fetch_r2_file(uri_url, out_dir / SOURCE_SUBDIR, SOURCE_FILE, RETRY_HINT,
                                                refresh_metadata, **kwargs)
    provenance["source_sha256"] = file_checksum(source_path, "sha256")

    records = check_records(convert_records(_read_json(source_path), source_path), source_path, expected_count)
    tmp = eval_json.with_name(eval_json.name + ".new")
    write_eval_json(records, tmp)
    sha256 = file_checksum(tmp, "sha256")
    if lock is not None and sha256 != lock["sha256"]:
        tmp.unlink()
        raise CnnDailyMailError(
            f"{eval_json} built from {source_path} has sha256 {sha256}, but {lock_path} recorded {lock['sha256']} "
            f"(from {lock.get('source_url') or lock.get('source')}, {lock.get('recorded')}): the upstream data changed "
            f"or another source was given. If that is intended, delete {lock_path} and re-run."
        )
    os.replace(tmp, eval_json)
    if lock is None:
        _write_lock(lock_path, eval_json, len(records), provenance)
    print(f"  {EVAL_FILE}: {len(records)} records written to {eval_json} (sha256 {sha256})", file=sys.stderr)
    return eval_json


# What the command's --help says it does.
HELP = (
    f"Write the MLPerf GPT-J eval set, CNN/DailyMail 3.0.0 validation ({CNN_DAILYMAIL_VALIDATION_SAMPLES:,} "
    "articles), as <data_dir>/cnn-daily-mail/cnn_eval.json in the reference's format. The articles and "
    "highlights come from MLCommons' R2-hosted llama3.1-8b cnn_eval.json (md5-verified) or from --source_json."
)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code (0 on success)."""
    parser = download_parser("code.gptj.download_data", HELP, "data_dir", r2_metadata=True)
    parser.add_argument("--uri", default=CNN_EVAL_URI, help=f"R2 metadata URL of the source (default: {CNN_EVAL_URI})")
    parser.add_argument(
        "--source_json",
        type=Path,
        default=None,
        help="use this local file (GPT-J or llama3.1-8b cnn_eval.json format) instead of downloading",
    )
    parser.add_argument(
        "--calibration",
        action="store_true",
        help="also write the MLPerf calibration set (1,000 train articles of MLCommons' calibration list) as "
        "<data_dir>/cnn-daily-mail/cnn_dailymail_calibration.json (code/gptj/calibration_data.py)",
    )
    parser.add_argument(
        "--calibration_source_json",
        type=Path,
        default=None,
        help="with --calibration: use this local cnn_dailymail_calibration.json (e.g. the reference's "
        "prepare-calibration.py output) instead of MLCommons' R2 copy; implies --calibration",
    )
    args = parser.parse_args(argv)

    def fetch_all() -> list[Path]:
        from code.gptj.calibration_data import download_calibration

        paths = [download_cnn_dailymail(args.data_dir, args.uri, args.source_json, args.refresh_metadata)]
        if args.calibration or args.calibration_source_json is not None:
            paths.append(download_calibration(args.data_dir, source_json=args.calibration_source_json,
                                              refresh_metadata=args.refresh_metadata))
        return paths

    return download_command(fetch_all, (CnnDailyMailError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
