"""Download the reference's tokenized CNN/DailyMail files for llama3.1-8b (`make download_data BENCHMARKS=llama31`).

    python -m code.llama31.download_data [--data_dir build/data] [--data_sets datacenter,edge] [--refresh_metadata]

MLCommons serves both from its R2 storage (mlcommons/inference v5.1 ``language/llama3.1-8b/README.md``, "Get
Dataset"; ``mlc-r2-downloader.sh`` reads the same metadata): ``cnn_eval.json`` (13,368 records, datacenter) and
``sample_cnn_eval_5000.json`` (5,000, edge), each md5-checked against the ``.md5`` listing published beside its
``.uri``. They land in ``<data_dir>/cnn-daily-mail/mlcommons-r2-llama3.1-8b/``, the folder GPT-J's download reads
the articles from too, so one copy serves both benchmarks. A verified file is not fetched again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from code.common.download import download_command, download_parser
from code.common.paths import DATA_DIR
from code.common.r2_download import fetch_r2_file
from code.llama31.dataset import EVAL_FILES, SAMPLE_COUNTS, eval_file, load_records
from code.llm.cnn_dailymail import CnnDailyMailError

URIS = {
    "datacenter": "https://inference.mlcommons-storage.org/metadata/llama3-1-8b-cnn-eval.uri",
    "edge": "https://inference.mlcommons-storage.org/metadata/llama3-1-8b-sample-cnn-eval-5000.uri",
}
RETRY_HINT = "delete it and re-run `make download_data BENCHMARKS=llama31`"


def download_eval_file(data_set: str, data_dir: Path = DATA_DIR, uri_url: str | None = None,
                       refresh_metadata: bool = False, **kwargs: object) -> Path:
    """Fetch (or find verified) the reference's file of ``data_set`` and check its records; return its path."""
    target = eval_file(data_set, data_dir)
    path, _ = fetch_r2_file(uri_url or URIS[data_set], target.parent, EVAL_FILES[data_set], RETRY_HINT,
                            refresh_metadata, **kwargs)
    count = len(load_records(path))
    if count != SAMPLE_COUNTS[data_set]:
        raise CnnDailyMailError(f"{path}: {count} records, the {data_set} set has {SAMPLE_COUNTS[data_set]}; "
                                f"{RETRY_HINT}")
    print(f"  {path.name}: {count} records ({path})", file=sys.stderr, flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = download_parser("code.llama31.download_data", __doc__.splitlines()[0], "data_dir", r2_metadata=True)
    parser.add_argument("--data_sets", default="datacenter,edge",
                        help="comma-separated: datacenter (13,368 records), edge (5,000)")
    args = parser.parse_args(argv)
    data_sets = [s.strip() for s in args.data_sets.split(",") if s.strip()]
    if unknown := [s for s in data_sets if s not in URIS]:
        parser.error(f"unknown data set {unknown[0]!r}; choose from {', '.join(URIS)}")
    return download_command(lambda: [download_eval_file(s, args.data_dir, refresh_metadata=args.refresh_metadata)
                                     for s in data_sets], (CnnDailyMailError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
