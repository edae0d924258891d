"""MLCommons' Cloudflare R2 storage, read as its ``mlc-r2-downloader.sh`` (github.com/mlcommons/r2-downloader) does.

A dataset is two metadata files side by side: ``<name>.uri`` holds the base URL of its files, and ``<name>.md5``
is ``md5sum`` output, one ``<md5>  <relative path>`` line per file, fetched from ``<base URL>/<path>``. GPT-J's
checkpoint and its CNN/DailyMail source come this way. Only public datasets (no Cloudflare Access login).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from code.common.download import DownloadError, download

_MD5_LINE = re.compile(r"^([0-9a-fA-F]{32})\s+\*?(.+)$")


@dataclass(frozen=True)
class R2Entry:
    """One line of a ``.md5`` listing: a file's path relative to the dataset's base URL, and its md5."""

    path: str
    md5: str


@dataclass(frozen=True)
class R2Listing:
    """What an R2 ``.uri`` + ``.md5`` pair says: where the files are and how to recognise each."""

    name: str  # dataset name: the .uri file's stem, e.g. "gpt-j-model-checkpoint"
    base_url: str
    entries: tuple[R2Entry, ...]

    def url_of(self, entry: R2Entry) -> str:
        return f"{self.base_url.rstrip('/')}/{urllib.parse.quote(entry.path, safe='/')}"

    def find(self, file_name: str) -> R2Entry:
        """The one entry whose last path component is ``file_name``."""
        matches = [e for e in self.entries if PurePosixPath(e.path).name == file_name]
        if len(matches) != 1:
            listed = ", ".join(e.path for e in self.entries) or "nothing"
            raise DownloadError(f"{self.name}.md5 lists {len(matches)} files named {file_name} (it lists: {listed})")
        return matches[0]


def metadata_urls(uri_url: str) -> tuple[str, str, str]:
    """``(name, uri_url, md5_url)`` for a ``.../metadata/<name>.uri`` URL (the ``.md5`` sits next to it)."""
    parsed = urllib.parse.urlsplit(uri_url)
    path = PurePosixPath(parsed.path)
    if parsed.scheme not in ("http", "https") or path.suffix != ".uri" or not path.stem:
        raise ValueError(f"{uri_url!r} is not the URL of an R2 dataset metadata file (http(s)://host/.../<name>.uri)")
    md5_url = urllib.parse.urlunsplit(parsed._replace(path=str(path.with_suffix(".md5")), query="", fragment=""))
    return path.stem, uri_url, md5_url


def parse_uri_text(text: str, source: str) -> str:
    """The base URL a ``.uri`` file holds (one http(s) URL; anything else, e.g. a login page, is an error)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or urllib.parse.urlsplit(lines[0]).scheme not in ("http", "https"):
        preview = text.strip()[:120].replace("\n", " ")
        raise DownloadError(
            f"{source} does not hold one download URL (got {preview!r}). If it is a login page the dataset needs "
            "Cloudflare Access authentication, which this downloader does not do: use mlc-r2-downloader.sh from "
            "github.com/mlcommons/r2-downloader instead. Otherwise re-run with --refresh_metadata."
        )
    return lines[0]


def _safe_relative(path: str, source: str) -> str:
    """A listed path as a clean relative POSIX path, refusing absolute paths and ``..`` (no writes outside)."""
    path = path.strip()
    while path.startswith("./"):
        path = path[2:]
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or "\\" in path or any(p in ("..", ".") for p in parts):
        raise DownloadError(f"{source}: refusing unsafe path {path!r}")
    return str(PurePosixPath(*parts))


def parse_md5_text(text: str, source: str) -> tuple[R2Entry, ...]:
    """Entries of an ``md5sum``-format listing; blank lines are skipped, anything else malformed is an error."""
    entries: list[R2Entry] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        match = _MD5_LINE.match(line)
        if match is None:
            raise DownloadError(f"{source}:{number}: not an md5sum line: {line[:80]!r}; re-run with --refresh_metadata")
        path = _safe_relative(match.group(2), f"{source}:{number}")
        if path in seen:
            raise DownloadError(f"{source}:{number}: {path} is listed twice")
        seen.add(path)
        entries.append(R2Entry(path=path, md5=match.group(1).lower()))
    if not entries:
        raise DownloadError(f"{source} lists no files; re-run with --refresh_metadata")
    return tuple(entries)


def fetch_r2_listing(uri_url: str, metadata_dir: Path, refresh: bool = False, **kwargs: object) -> R2Listing:
    """Read an R2 dataset's ``.uri`` and ``.md5``, kept in ``metadata_dir`` for later runs unless ``refresh``; a
    copy that does not parse is deleted, so the next run fetches it again. ``kwargs`` go to ``download``."""
    name, uri_url, md5_url = metadata_urls(uri_url)
    metadata_dir = Path(metadata_dir)
    paths = (metadata_dir / f"{name}.uri", metadata_dir / f"{name}.md5")
    if refresh:
        for path in paths:
            path.unlink(missing_ok=True)
    options = {key: value for key, value in kwargs.items() if key != "hint"}
    options.setdefault("progress", False)
    try:
        download(uri_url, paths[0], hint="re-run with --refresh_metadata", **options)  # type: ignore[arg-type]
        base_url = parse_uri_text(paths[0].read_text(encoding="utf-8", errors="replace"), uri_url)
        download(md5_url, paths[1], hint="re-run with --refresh_metadata", **options)  # type: ignore[arg-type]
        entries = parse_md5_text(paths[1].read_text(encoding="utf-8", errors="replace"), md5_url)
    except DownloadError:
        for path in paths:  # never keep metadata that did not parse, nor half of a pair
            path.unlink(missing_ok=True)
        raise
    return R2Listing(name=name, base_url=base_url, entries=entries)


def fetch_r2_file(uri_url: str, folder: Path, file_name: str, hint: str, refresh_metadata: bool = False,
                  **kwargs: object) -> tuple[Path, dict]:
    """The one file named ``file_name`` of an R2 dataset, md5-checked, in ``folder`` beside the dataset's metadata;
    returns it and its provenance (URL, md5, metadata URL). ``hint`` says what to run when its bytes are bad."""
    listing = fetch_r2_listing(uri_url, folder, refresh=refresh_metadata, **kwargs)
    entry = listing.find(file_name)
    kwargs.setdefault("hint", hint)
    path = download(listing.url_of(entry), Path(folder) / entry.path, md5=entry.md5, **kwargs)  # type: ignore[arg-type]
    return path, {"source_url": listing.url_of(entry), "source_md5": entry.md5, "source_metadata": uri_url}
