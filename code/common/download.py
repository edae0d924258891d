"""Resumable, verified downloads with the standard library only.

Why this exists: the data and models of a benchmark are large (BERT's checkpoint is 1.3 GB), come from servers that
drop connections (zenodo), and an undetected bad byte shows up hours later as a failed accuracy run. So every file is
written to ``<dest>.part``, resumed with an HTTP Range request after a failure, checked against a published checksum
and only then renamed into place. A file at ``dest`` is therefore always a verified one; bad bytes are moved to
``<dest>.corrupt`` where a person can look at them.

Only ``urllib`` is used so that ``make download_*`` works before the venv has anything installed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from code.common.paths import DATA_DIR, MODELS_DIR

CHUNK_BYTES = 1 << 20
PROGRESS_EVERY_S = 5.0
USER_AGENT = "mlperf-harness-download/1.0 (python-urllib)"
DEFAULT_HINT = "delete it and re-run the download (`make download_data` / `make download_model`)"
# HTTP statuses worth retrying: the server had a transient failure (a broken connection is an OSError).
_TRANSIENT_HTTP = {408, 425, 429, 500, 502, 503, 504}
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


class DownloadError(RuntimeError):
    """A file could not be downloaded or did not verify; the message says what to do next."""


@dataclass(frozen=True)
class RemoteFile:
    """One entry of a download table. ``size`` alone is for a file with no published checksum (the table says so)."""

    name: str  # file name under the destination folder
    url: str
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None


def file_checksum(path: Path, algorithm: str = "md5") -> str:
    """Hex digest of a file, read in chunks so a 1.3 GB checkpoint does not need 1.3 GB of memory."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def _problems(path: Path, md5: str | None, sha256: str | None, size: int | None) -> list[str]:
    """What is wrong with ``path``; a wrong size settles it before gigabytes are hashed."""
    if size is not None and path.stat().st_size != size:
        return [f"size: expected {size} bytes, got {path.stat().st_size}"]
    checks = [(algorithm, expected.lower(), file_checksum(path, algorithm))
              for algorithm, expected in (("md5", md5), ("sha256", sha256)) if expected is not None]
    return [f"{algorithm}: expected {expected}, got {actual}" for algorithm, expected, actual in checks
            if actual.lower() != expected]


def _say(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


class _Progress:
    """Prints a line every few seconds or every 10 %, whichever comes first, so logs stay short."""

    def __init__(self, name: str, total: int | None, start: int, enabled: bool) -> None:
        self.name, self.total, self.enabled, self.start_bytes = name, total, enabled, start
        self.t0 = self.last_t = time.monotonic()
        self.last_decile, self.last_done = self._decile(start), -1

    def _decile(self, done: int) -> int:
        return done * 10 // self.total if self.total else 0

    def update(self, done: int, final: bool = False) -> None:
        now, decile = time.monotonic(), self._decile(done)
        quiet = decile == self.last_decile and now - self.last_t < PROGRESS_EVERY_S
        if not self.enabled or done == self.last_done or (quiet and not final):
            return
        self.last_t, self.last_decile, self.last_done = now, decile, done
        rate = (done - self.start_bytes) / max(now - self.t0, 1e-6) / 1e6
        what = (f"{100 * done // self.total:3d}% ({done / 1e6:.1f}/{self.total / 1e6:.1f} MB)" if self.total
                else f"{done / 1e6:.1f} MB")
        _say(f"{self.name}: {what} {rate:.1f} MB/s")


def _move_aside(path: Path, corrupt: Path) -> None:
    """Keep the bad bytes for inspection but never at a path a reader would trust."""
    corrupt.unlink(missing_ok=True)
    os.replace(path, corrupt)


def _attempt(url: str, part: Path, size: int | None, timeout_s: float, progress: bool, name: str) -> None:
    """One HTTP request that appends to (or restarts) ``part``; returns once the body is complete. Raises
    ``OSError``/``HTTPException`` for failures worth retrying and ``DownloadError`` for those that are not."""
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:  # longer than the file can be: not ours to resume
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        return  # a previous attempt finished the body; verification decides
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:  # urllib keeps the headers across redirects (zenodo and GitHub redirect to their storage hosts)
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # Range not satisfiable: the .part already holds the whole file (or more)
            return
        if e.code in _TRANSIENT_HTTP:
            raise OSError(f"HTTP {e.code} {e.reason}") from e
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}; check the URL or try again later") from e
    with response:
        length = response.headers.get("Content-Length")
        if offset and response.status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:  # not the piece we asked for: start over
                _say(f"{name}: unexpected Content-Range, restarting from zero")
                part.unlink()
                raise OSError("unexpected Content-Range")
            total = None if match.group(3) == "*" else int(match.group(3))
            mode = "ab"
            _say(f"{name}: resuming at {offset / 1e6:.1f} MB")
        else:
            if offset:
                _say(f"{name}: server ignored the Range request, restarting from zero")
            offset, mode = 0, "wb"
            total = int(length) if length is not None else None
            if response.status != 200:
                raise DownloadError(f"{url}: unexpected HTTP status {response.status}")
        total = size if total is None else total
        meter = _Progress(name, total, offset, progress)
        done = offset
        with open(part, mode) as f:
            while chunk := response.read(CHUNK_BYTES):
                f.write(chunk)
                done += len(chunk)
                meter.update(done)
            f.flush()
            os.fsync(f.fileno())
        # urllib does not raise when a connection closes early, so compare against what the server promised.
        if total is not None and done < total:
            raise http.client.IncompleteRead(b"", total - done)
        meter.update(done, final=True)


def download(url: str, dest: Path, *, md5: str | None = None, sha256: str | None = None, size: int | None = None,
             retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 60.0, hint: str = DEFAULT_HINT,
             progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` unless a verified copy is already there; return ``dest``.

    A mismatch raises ``DownloadError`` with both checksums and ``hint`` (what to run) and leaves the bytes at
    ``<dest>.corrupt``. Up to ``retries`` attempts in a row that make no progress are made, waiting ``backoff_s``,
    then twice that...; one that fetched bytes resets the count, so a long download over a flaky link finishes.
    ``timeout_s`` bounds each socket operation, not the whole file.
    """
    dest = Path(dest)
    part, corrupt, name = dest.with_suffix(dest.suffix + ".part"), dest.with_suffix(dest.suffix + ".corrupt"), dest.name
    if dest.exists():
        problems = _problems(dest, md5, sha256, size)
        if not problems:
            _say(f"{name}: present and verified ({dest})")
            return dest
        _move_aside(dest, corrupt)
        _say(f"{name}: existing file is corrupt ({'; '.join(problems)}); moved to {corrupt}, downloading again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _say(f"{name}: downloading {url}")
    failures = 0
    while True:
        before = part.stat().st_size if part.exists() else 0
        try:
            _attempt(url, part, size, timeout_s, progress, name)
            break
        except (OSError, http.client.HTTPException) as e:  # URLError, timeouts and resets are OSErrors
            after = part.stat().st_size if part.exists() else 0
            failures = 1 if after > before else failures + 1
            if failures > retries:
                raise DownloadError(f"{url}: giving up after {failures} failed attempts in a row ({type(e).__name__}: "
                                    f"{e}); any partial file is kept at {part}: re-run the same command to resume"
                                    ) from e
            wait = backoff_s * 2 ** (failures - 1)
            _say(f"{name}: {type(e).__name__}: {e}; retrying in {wait:.1f} s")
            time.sleep(wait)
    if not part.exists():
        raise DownloadError(f"{url}: the server sent nothing for {dest}")
    problems = _problems(part, md5, sha256, size)
    if problems:
        _move_aside(part, corrupt)
        raise DownloadError(f"{dest}: downloaded file does not verify ({'; '.join(problems)}). The bytes were moved to "
                            f"{corrupt}; {hint}. If it fails again the upstream file ({url}) may have changed: compare "
                            "with the source named in the download table.")
    if md5 is None and sha256 is None:
        _say(f"{name}: no published checksum, verified by size only")
    os.replace(part, dest)  # atomic on one filesystem: readers see either no file or the verified one
    expected = [f"md5 {md5}" if md5 else "", f"sha256 {sha256}" if sha256 else "", f"{size} bytes" if size else ""]
    _say(f"{name}: done, verified ({', '.join(piece for piece in expected if piece) or 'nothing (unverified)'})")
    return dest


def fetch(remote: RemoteFile, directory: Path, **kwargs: object) -> Path:
    """``download`` one table entry into ``directory / remote.name``; keyword arguments go to ``download``."""
    return download(remote.url, Path(directory) / remote.name, md5=remote.md5, sha256=remote.sha256, size=remote.size,
                    **kwargs)  # type: ignore[arg-type]


# The root folder a download command writes under: its flag -> (what it holds, its default).
DOWNLOAD_ROOTS = {"data_dir": ("the raw data", DATA_DIR), "model_dir": ("the models", MODELS_DIR)}


def download_parser(module: str, description: str, root: str, r2_metadata: bool = False) -> argparse.ArgumentParser:
    """The command line every ``python -m code.<bench>.download_*`` starts from: its root folder (``--data_dir`` or
    ``--model_dir``) and, for files on MLCommons' R2 storage, ``--refresh_metadata``."""
    if root not in DOWNLOAD_ROOTS:
        raise ValueError(f"unknown download root {root!r}; valid roots: {', '.join(DOWNLOAD_ROOTS)}")
    holds, default = DOWNLOAD_ROOTS[root]
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument(f"--{root}", type=Path, default=default,
                        help=f"root of {holds} (default: {default}); may be a link into $MLPERF_SCRATCH_PATH")
    if r2_metadata:
        parser.add_argument("--refresh_metadata", action="store_true",
                            help="fetch the R2 .uri/.md5 metadata again instead of the kept copy")
    return parser


def download_command(fetch_all: Callable[[], Path | Iterable[Path]], errors: tuple[type[Exception], ...] = ()) -> int:
    """The end of every download command: print each path ``fetch_all`` returns and exit 0, or the error in one line
    and exit 1 (a traceback would bury what to run next). ``errors``: a command's own, beside ``DownloadError`` and
    ``OSError``."""
    try:
        fetched = fetch_all()
    except (DownloadError, OSError, *errors) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in [fetched] if isinstance(fetched, Path) else fetched:
        print(path)
    return 0
