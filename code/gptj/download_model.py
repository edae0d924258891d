"""Download the MLCommons fine-tuned GPT-J-6B checkpoint (HF format, fp32, ~24 GB) with per-file md5 checks.

Run ``python -m code.gptj.download_model [--model_dir build/models] [--refresh_metadata] [--list]``; files land in
``<model_dir>/GPTJ-6B/checkpoint-final/`` (config.json, the 3 ``pytorch_model-0000k-of-00003.bin`` shards and their
index, and whatever else the upstream folder holds).

The checkpoint is served by MLCommons' Cloudflare R2 storage: a ``.uri`` + ``.md5`` metadata pair
(``code/common/r2_download.py`` reads it) lists every file and its md5; the files are fetched with
``code.common.download`` (resume with HTTP Range, md5 check before a file is put in place, bad bytes kept as
``.corrupt``). The two metadata files are kept in ``<model_dir>/GPTJ-6B/`` (as the R2 tool keeps the ``.md5``), so a
second run verifies the files against the same list without a network request; ``--refresh_metadata`` fetches them
again.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path, PurePosixPath

from code.common.download import RemoteFile, download_command, download_parser, fetch
from code.common.paths import MODELS_DIR
from code.common.r2_download import R2Listing, fetch_r2_listing

# Where the checkpoint comes from: mlcommons/inference language/gpt-j/README.md ("Download GPT-J model", PR #2365,
# Oct 2025) and mlcommons/mlperf-automations script/get-ml-model-gptj/meta.yaml (variation pytorch,fp32,
# r2-downloader). The md5 of every file is published by MLCommons in gpt-j-model-checkpoint.md5 next to the .uri;
# it is read at download time, so no checksum is pinned here. (The original cloud.mlcommons.org zip, md5
# e677e28aaf03da84584bb3073b7ee315, went offline in 2024: mlcommons/inference#1609.)
GPTJ_CHECKPOINT_URI = "https://inference.mlcommons-storage.org/metadata/gpt-j-model-checkpoint.uri"
MODEL_SUBDIR = "GPTJ-6B"
CHECKPOINT_SUBDIR = "checkpoint-final"
CHECKPOINT_CONFIG = "config.json"
CHECKPOINT_INDEXES = ("pytorch_model.bin.index.json", "model.safetensors.index.json")
CHECKPOINT_BYTES = 24_300_000_000
"""Rough size of the fp32 checkpoint (3 shards, 22.66 GiB zipped), for the free-space warning only."""

RETRY_HINT = "delete it and re-run `make download_model BENCHMARKS=gptj`"


# ----------------------------------------------------------------------------------------------------------------------
# The checkpoint


def checkpoint_path(entry_path: str) -> PurePosixPath:
    """Where a listed file goes under ``GPTJ-6B/``: always inside ``checkpoint-final/``.

    The bucket's folder is ``gpt-j/checkpoint-final/...`` (MLCommons' rclone instructions copied it to
    ``model/checkpoint-final``); a listing relative to any level of that tree lands in the same place.
    """
    parts = PurePosixPath(entry_path).parts
    if CHECKPOINT_SUBDIR in parts[:-1]:
        parts = parts[parts.index(CHECKPOINT_SUBDIR) :]
    else:
        parts = (CHECKPOINT_SUBDIR, *parts)
    return PurePosixPath(*parts)


def checkpoint_dir(model_dir: Path = MODELS_DIR) -> Path:
    """``<model_dir>/GPTJ-6B/checkpoint-final``: the folder ``from_pretrained`` reads."""
    return Path(model_dir) / MODEL_SUBDIR / CHECKPOINT_SUBDIR


def check_checkpoint(directory: Path) -> list[Path]:
    """Check that ``directory`` is a complete HF checkpoint: config.json, a weight index and every shard it names.

    Returns the weight files; raises ``FileNotFoundError`` naming what is missing and the command that fetches it.
    """
    directory = Path(directory)
    fix = "run `make download_model BENCHMARKS=gptj`"
    if not (directory / CHECKPOINT_CONFIG).is_file():
        raise FileNotFoundError(f"GPT-J checkpoint {directory} has no {CHECKPOINT_CONFIG}; {fix}")
    for index_name in CHECKPOINT_INDEXES:
        index = directory / index_name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            except (ValueError, KeyError, AttributeError) as error:
                raise FileNotFoundError(f"{index} is not a weight index ({error}); {fix}") from error
            missing = [s for s in shards if not (directory / s).is_file()]
            if missing:
                raise FileNotFoundError(f"GPT-J checkpoint {directory} lacks {', '.join(missing)}; {fix}")
            return [directory / s for s in shards]
    singles = [directory / n for n in ("pytorch_model.bin", "model.safetensors") if (directory / n).is_file()]
    if singles:
        return singles
    raise FileNotFoundError(f"GPT-J checkpoint {directory} has no weights ({' or '.join(CHECKPOINT_INDEXES)}); {fix}")


def remote_files(listing: R2Listing) -> list[RemoteFile]:
    """The listing as download-table entries whose ``name`` is the path under ``GPTJ-6B/``."""
    return [RemoteFile(name=str(checkpoint_path(e.path)), url=listing.url_of(e), md5=e.md5) for e in listing.entries]


def _warn_if_short_of_space(root: Path, files: list[RemoteFile]) -> None:
    present = sum((root / f.name).stat().st_size for f in files if (root / f.name).is_file())
    needed = CHECKPOINT_BYTES - present
    probe = root
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        print(
            f"WARNING: about {needed / 1e9:.0f} GB more are needed for the GPT-J checkpoint and {probe} has "
            f"{free / 1e9:.0f} GB free; point build/models at a bigger disk (MLPERF_SCRATCH_PATH, `make link_dirs`)",
            file=sys.stderr,
        )


def download_gptj_model(
    model_dir: Path = MODELS_DIR,
    uri_url: str = GPTJ_CHECKPOINT_URI,
    refresh_metadata: bool = False,
    **kwargs: object,
) -> list[Path]:
    """Fetch every file of the R2 listing into ``<model_dir>/GPTJ-6B/checkpoint-final/`` and check the result.

    Files already present and matching their md5 are kept; ``.part`` files are resumed. Keyword arguments go to
    ``code.common.download.download``. Returns the paths of the files.
    """
    root = Path(model_dir) / MODEL_SUBDIR
    listing = fetch_r2_listing(uri_url, root, refresh=refresh_metadata, **kwargs)
    files = remote_files(listing)
    _warn_if_short_of_space(root, files)
    kwargs.setdefault("hint", RETRY_HINT)
    paths = []
    for remote in files:
        paths.append(fetch(remote, root, **kwargs))
    check_checkpoint(root / CHECKPOINT_SUBDIR)
    return paths


# What the command's --help says it does.
HELP = (
    "Download the MLCommons fine-tuned GPT-J-6B checkpoint (fp32, HF format, ~24 GB) from MLCommons R2 "
    "storage into <model_dir>/GPTJ-6B/checkpoint-final/, verifying each file against the published md5 "
    "list. Interrupted downloads resume; verified files are kept without downloading them again."
)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code (0 on success)."""
    parser = download_parser("code.gptj.download_model", HELP, "model_dir", r2_metadata=True)
    parser.add_argument("--uri", default=GPTJ_CHECKPOINT_URI, help=f"R2 metadata URL (default: {GPTJ_CHECKPOINT_URI})")
    parser.add_argument("--list", action="store_true", help="print the files and URLs, download nothing else")
    args = parser.parse_args(argv)
    if args.list:
        return download_command(lambda: _list_files(args.model_dir / MODEL_SUBDIR, args.uri, args.refresh_metadata),
                                (ValueError,))
    # FileNotFoundError (an OSError): the checkpoint is incomplete after the download
    return download_command(lambda: download_gptj_model(args.model_dir, args.uri, args.refresh_metadata), (ValueError,))


def _list_files(root: Path, uri: str, refresh: bool) -> list[Path]:
    """``--list``: print each file's md5, destination and URL; download only the metadata."""
    listing = fetch_r2_listing(uri, root, refresh=refresh)
    for remote in remote_files(listing):
        print(f"{remote.md5}  {root / remote.name}  <- {remote.url}")
    return []


if __name__ == "__main__":
    sys.exit(main())
