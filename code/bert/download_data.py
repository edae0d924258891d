"""Download the BERT dataset: SQuAD v1.1 dev set and the MLCommons calibration feature list.

Run ``python -m code.bert.download_data [--data_dir build/data]``; files land in ``<data_dir>/squad/``. Everything is
checked against a checksum before it is put in place (see ``code/common/download.py``), and a second run with the
files present makes no network request.
"""

from __future__ import annotations

import sys
from pathlib import Path

from code.bert.squad import SQUAD_SUBDIR
from code.common.download import RemoteFile, download_command, download_parser, fetch
from code.common.paths import DATA_DIR

# Where each file comes from, and how to recognise it.
# - dev-v1.1.json: the SQuAD site of its authors (rajpurkar.github.io, CC BY-SA 4.0). md5 from
#   mlcommons/mlperf-automations script/get-dataset-squad/meta.yaml (version 1.1, MLC_DOWNLOAD_CHECKSUM); the same
#   value is in torchtext's SQuAD1 table and NVIDIA's BERT squad_download.sh. Size 4854279 bytes from the Stanford
#   CS224n SQuAD starter code (its maybe_download size check).
# - bert_calibration_features.txt: mlcommons/inference (Apache 2.0), pinned to commit f576d52a (PR #1171, the commit
#   that gave the file this name; the file is unchanged on master since). No checksum is published for it; md5, sha256
#   and size were computed from the git blob b2164721639c5101db67b0d46605acf783a3ffee at that commit, which anyone can
#   re-derive with `git show f576d52a:calibration/SQuAD-v1.1/bert_calibration_features.txt | md5sum`.
_INFERENCE_COMMIT = "f576d52a5b576fef7034033da4e141a2cc745cfe"
SQUAD_FILES: tuple[RemoteFile, ...] = (
    RemoteFile(
        name="dev-v1.1.json",
        url="https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",
        md5="3e85deb501d4e538b6bc56f786231552",
        size=4854279,
    ),
    RemoteFile(
        name="bert_calibration_features.txt",
        url=(
            f"https://raw.githubusercontent.com/mlcommons/inference/{_INFERENCE_COMMIT}/"
            "calibration/SQuAD-v1.1/bert_calibration_features.txt"
        ),
        md5="81fa69eb66f72831edccb624133bb4b3",
        sha256="5a4ace54371313359193a661d653731115fc749c6ed92812ada1f74d4b1b708a",
        size=495,
    ),
)

RETRY_HINT = "delete it and re-run `make download_data BENCHMARKS=bert`"


def download_squad(data_dir: Path = DATA_DIR) -> list[Path]:
    """Fetch every file of ``SQUAD_FILES`` into ``<data_dir>/squad/`` and return their paths."""
    target = Path(data_dir) / SQUAD_SUBDIR
    return [fetch(remote, target, hint=RETRY_HINT) for remote in SQUAD_FILES]


# What the command's --help says it does.
HELP = (
    "Download the SQuAD v1.1 dev set (dev-v1.1.json) and the MLCommons BERT calibration feature list "
    "into <data_dir>/squad/, verifying each file's checksum. Interrupted downloads resume; files already "
    "present and valid are kept without touching the network."
)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code (0 on success)."""
    parser = download_parser("code.bert.download_data", HELP, "data_dir")
    args = parser.parse_args(argv)
    return download_command(lambda: download_squad(args.data_dir))


if __name__ == "__main__":
    sys.exit(main())
