"""The MLPerf GPT-J calibration set: 1,000 CNN/DailyMail 3.0.0 *train* articles chosen by MLCommons' list.

What the reference does. mlcommons/inference ``calibration/CNNDailyMail/calibration-list.txt`` (identical copy in
``language/gpt-j/calibration-list.txt``) holds 1,000 article ids, one per line: the ``id`` field of HF
``cnn_dailymail`` 3.0.0 ``train`` (the sha1 of the article's URL). ``language/gpt-j/prepare-calibration.py`` loads
the train split with HF ``datasets``, looks every listed id up, and writes ``cnn_dailymail_calibration.json`` in
``cnn_eval.json``'s format (``instruction`` = "Summarize the following news article:", ``input`` = article,
``output`` = highlights), in the list's order. FP8 scales are calibrated on its prompts.

What we do. The list is fetched from a pinned commit and checked against its sha256 (``CALIBRATION_LIST_SHA256``).
The train split itself (~1.2 GB of Parquet) needs ``datasets``/``pyarrow``, which the harness does not install, so
the articles come from one of:

- MLCommons' R2 copy of the llama3.1-8b benchmark's ``cnn_dailymail_calibration.json`` (md5 from its listing), made
  by ``language/llama3.1-8b/prepare-calibration.py``: the same code path over the same train split and a list of
  1,000 ids, with a Llama instruction and token ids that we drop. Its records carry no ids, so that it used this very
  list is MLCommons' statement (both benchmarks cite the CNN/DailyMail calibration list), not something this code
  can check: the provenance file says ``ids_checked: false``.
- ``--calibration_source_json PATH``: a local file, e.g. the reference's ``prepare-calibration.py`` output. If its
  records carry an ``id`` field, the ids must equal the list, in order (``ids_checked: true``).

Either way the result is checked (1,000 records of string ``input``/``output``) and written atomically, with
``cnn_dailymail_calibration.provenance.json`` beside it (the list's URL and sha256, the source, its checksums).
``make preprocess_data BENCHMARKS=gptj`` then tokenizes it like the validation set, and ``make generate_engines``
calibrates FP8 engines on it (``code/gptj/backends/inflight_engine.py``).
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from code.common import atomic
from code.common.download import download, file_checksum
from code.common.paths import DATA_DIR
from code.common.r2_download import fetch_r2_listing
from code.gptj.prompt import CALIBRATION_FILE, CNN_DAILYMAIL_CALIBRATION_SAMPLES
from code.llm.cnn_dailymail import DATASET_SUBDIR, CnnDailyMailError, check_records, convert_records

CALIBRATION_LIST_COMMIT = "bcaa08a3d4ca7c923c2adcb10ae76ba23e77985c"  # the list's last change (June 2023)
CALIBRATION_LIST_URL = ("https://raw.githubusercontent.com/mlcommons/inference/"
                        f"{CALIBRATION_LIST_COMMIT}/calibration/CNNDailyMail/calibration-list.txt")
CALIBRATION_LIST_SHA256 = "4de1bc2bcf345ba8fc118788455dfaf2e09530fd9ed4daedf2b15661324ad9a7"
LIST_FILE = "calibration-list.txt"
CALIBRATION_URI = "https://inference.mlcommons-storage.org/metadata/llama3-1-8b-cnn-dailymail-calibration.uri"
SOURCE_SUBDIR = "mlcommons-r2-llama3.1-8b-calibration"
PROVENANCE_FILE = "cnn_dailymail_calibration.provenance.json"
RETRY_HINT = "delete it and re-run `make download_data BENCHMARKS=gptj CALIBRATION=1`"
_ARTICLE_ID = re.compile(r"[0-9a-f]{40}")


def read_calibration_list(path: Path, expected_count: int | None = CNN_DAILYMAIL_CALIBRATION_SAMPLES) -> list[str]:
    """The list's article ids, in order: 40-hex-digit ids, no duplicates, ``expected_count`` of them."""
    ids = Path(path).read_text(encoding="utf-8").split()
    bad = [i for i in ids if not _ARTICLE_ID.fullmatch(i)]
    if bad or len(set(ids)) != len(ids) or (expected_count is not None and len(ids) != expected_count):
        raise CnnDailyMailError(f"{path}: expected {expected_count} distinct 40-hex-digit article ids, got "
                                f"{len(ids)} ({len(set(ids))} distinct, {len(bad)} malformed); {RETRY_HINT}")
    return ids


def calibration_records(records: object, source: Path | str, ids: list[str],
                        expected_count: int | None = CNN_DAILYMAIL_CALIBRATION_SAMPLES) -> tuple[list[dict], bool]:
    """GPT-J records from a calibration file (GPT-J or llama3.1-8b format) and whether its ids were checked
    against the list (only possible when every record carries an ``id``)."""
    converted = check_records(convert_records(records, source), source, expected_count)
    assert isinstance(records, list)  # convert_records refused anything else
    with_ids = [r.get("id") for r in records]
    ids_checked = all(isinstance(i, str) for i in with_ids)
    if ids_checked and with_ids != ids:
        first = next((n for n, (a, b) in enumerate(zip(with_ids, ids, strict=False)) if a != b),
                     min(len(with_ids), len(ids)))
        raise CnnDailyMailError(f"{source}: its article ids differ from the MLPerf calibration list (first at "
                                f"record {first}); it is not the MLPerf calibration set")
    return converted, ids_checked


def download_calibration(
    data_dir: Path = DATA_DIR,
    uri_url: str = CALIBRATION_URI,
    source_json: Path | None = None,
    list_url: str = CALIBRATION_LIST_URL,
    list_sha256: str = CALIBRATION_LIST_SHA256,
    refresh_metadata: bool = False,
    expected_count: int | None = CNN_DAILYMAIL_CALIBRATION_SAMPLES,
    **kwargs: object,
) -> Path:
    """Make ``<data_dir>/cnn-daily-mail/cnn_dailymail_calibration.json`` (GPT-J format) and return it.

    A file already in place that matches its provenance record (sha256) is kept without a network request.
    Keyword arguments go to ``code.common.download.download``.
    """
    out_dir = Path(data_dir) / DATASET_SUBDIR
    target, provenance_path = out_dir / CALIBRATION_FILE, out_dir / PROVENANCE_FILE
    if source_json is None and target.is_file() and provenance_path.is_file():
        recorded = json.loads(provenance_path.read_text(encoding="utf-8"))
        if recorded.get("sha256") == file_checksum(target, "sha256"):
            return target
    kwargs.setdefault("hint", RETRY_HINT)
    list_path = download(list_url, out_dir / LIST_FILE, sha256=list_sha256, **kwargs)  # type: ignore[arg-type]
    ids = read_calibration_list(list_path, expected_count)
    if source_json is not None:
        source_path = Path(source_json)
        if not source_path.is_file():
            raise FileNotFoundError(f"--calibration_source_json {source_path} does not exist")
        provenance: dict[str, object] = {"source": str(source_path.resolve())}
    else:
        listing = fetch_r2_listing(uri_url, out_dir / SOURCE_SUBDIR, refresh=refresh_metadata, **kwargs)
        entry = listing.find(CALIBRATION_FILE)
        source_path = download(listing.url_of(entry), out_dir / SOURCE_SUBDIR / entry.path, md5=entry.md5,
                               **kwargs)  # type: ignore[arg-type]
        provenance = {"source_url": listing.url_of(entry), "source_md5": entry.md5, "source_metadata": uri_url}
    try:
        raw = json.loads(source_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CnnDailyMailError(f"{source_path} is not valid UTF-8 JSON ({error}); {RETRY_HINT}") from error
    records, ids_checked = calibration_records(raw, source_path, ids, expected_count)
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(target) as partial:
        partial.write_text(json.dumps(records, indent=4, ensure_ascii=False), encoding="utf-8")
    atomic.write_text(provenance_path, json.dumps({
        "file": target.name,
        "sha256": file_checksum(target, "sha256"),
        "count": len(records),
        "calibration_list_url": list_url,
        "calibration_list_sha256": list_sha256,
        "ids_checked": ids_checked,
        "source_sha256": file_checksum(source_path, "sha256"),
        "recorded": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **provenance,
    }, indent=2) + "\n")
    return target
