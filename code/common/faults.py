"""Faults a user fixes outside the harness, each as one line that names the file and the fix.

A truncated download, an engine cut short by a full disk, a read-only log folder: none of them is a bug, so none
of them should end in a traceback. ``reading`` turns bad bytes into a ``DataFileError`` naming the file and the fix;
``check_free_space`` refuses a write the disk cannot hold before it starts, so no half file set is left behind;
``describe`` gives the line for any error a user can fix, and None for a bug, whose traceback is the report.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import pickle
import shutil
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from code.common.benchmark_errors import BenchmarkError
from code.common.constants import ExitCode

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
FREE_SPACE = "free space there (make clean_logs deletes old runs; MLPERF_SCRATCH_PATH moves data to a bigger disk)"


class DataFileError(BenchmarkError, ValueError):
    """A file the run reads is missing, truncated or corrupt; the message names it and the step that makes a good
    one. (A ValueError too, so callers of a loader that catch ValueError keep working.)"""


class NoSpaceError(BenchmarkError):
    """A write the disk cannot hold, refused before it starts; the message says how much and the fix."""


# Room left beyond a write's own bytes: the file system's metadata and whatever else writes there meanwhile.
SPACE_MARGIN = 64 * 2**20


def _size(count: int) -> str:
    if count >= 2**30:
        return f"{count / 2**30:.2f} GiB"
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"


def check_free_space(folder: Path, needed: int, what: str) -> None:
    """``NoSpaceError`` unless the disk of ``folder`` has ``needed`` bytes free beyond ``SPACE_MARGIN``."""
    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < needed + SPACE_MARGIN:
        # Both parts said: a small set refused for the margin alone must not read as a set of that size.
        raise NoSpaceError(f"{what} needs {_size(needed + SPACE_MARGIN)} free in {folder} ({_size(needed)} of its "
                           f"own and a {_size(SPACE_MARGIN)} margin kept free for the file system and other "
                           f"writers), and {_size(free)} is free there; {FREE_SPACE}, then run again (nothing was "
                           "written)")


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` says the disk is full: an OSError's errno, or the text of a writer that wraps it in its own
    exception (safetensors' Rust writer raises ``SafetensorError: ... No space left on device (os error 28)``)."""
    if isinstance(error, OSError):
        return error.errno in NO_SPACE
    text = str(error)
    return "No space left on device" in text or "Disk quota exceeded" in text


@contextmanager
def writing_folder(folder: Path, what: str, needed: int | None = None) -> Iterator[None]:
    """A full disk while writing ``what`` into ``folder`` becomes one ``NoSpaceError`` naming the folder and the fix.
    The caller writes a temporary folder removed on error (code/common/atomic.py): nothing half-written is left."""
    try:
        yield
    except NoSpaceError:
        raise
    except Exception as error:
        if not is_no_space(error):
            raise
        size = f"; it needs about {_size(needed)} there" if needed else ""
        raise NoSpaceError(f"no space left writing {what} in {folder}{size}; {FREE_SPACE}, then run again "
                           "(nothing half-written was left)") from error


class CheckpointError(ValueError):
    """A checkpoint that is missing or does not fill the model exactly; the loaders list every mismatch but do not
    know how the file was made, so ``reading`` adds that fix."""


# How many of a CheckpointError's listed mismatches the one-paragraph message quotes.
QUOTED_MISMATCHES = 3


def _is_decode_error(error: BaseException, also: tuple[type[BaseException], ...]) -> bool:
    """Whether a decoder raised ``error`` on bad bytes (torch's zip reader raises a plain RuntimeError)."""
    decoders = [EOFError, pickle.UnpicklingError, zlib.error, gzip.BadGzipFile, json.JSONDecodeError,
                UnicodeDecodeError, *also]
    with contextlib.suppress(ImportError):  # without safetensors no .safetensors file is ever read
        from safetensors import SafetensorError

        decoders.append(SafetensorError)
    return isinstance(error, tuple(decoders)) or isinstance(error, RuntimeError) and "PytorchStreamReader" in str(error)


@contextmanager
def reading(path: Path | str, fix: str, also: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Around the read of ``path``: bad bytes become one ``DataFileError`` saying which file and ``fix``. ``also``:
    what means bad bytes for this reader only (np.load's ValueError on a short file); wrap the read alone, so a bug
    around it is not blamed on the file."""
    try:
        yield
    except CheckpointError as error:
        raise DataFileError(f"{_paragraph(str(error))}; {fix}") from error
    except Exception as error:
        if not _is_decode_error(error, also):
            raise
        cause = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DataFileError(f"{path} is truncated or corrupt ({cause}); {fix}") from error


def _paragraph(text: str) -> str:
    """A loader's message as one paragraph: its head line, the first few mismatches, and how many more."""
    head, *items = [line.strip() for line in text.splitlines() if line.strip()]
    if not items:
        return head
    quoted = "; ".join(items[:QUOTED_MISMATCHES])
    more = f"; and {len(items) - QUOTED_MISMATCHES} more" if len(items) > QUOTED_MISMATCHES else ""
    return f"{head.rstrip(':')}: {quoted}{more}"


def describe(error: BaseException, writing_in: Path | None = None) -> str | None:
    """The one line for an error a user can fix, or None for a bug. ``writing_in``: the folder being written, named
    when the error names no file (a failed ``write`` on an open file does not)."""
    if isinstance(error, BenchmarkError):
        return str(error)
    if not isinstance(error, OSError) or error.errno not in NO_SPACE + NOT_WRITABLE:
        return None
    where = error.filename or writing_in or "a file"
    reason = error.strerror or str(error)
    if error.errno in NO_SPACE:
        return f"no space left writing {where} ({reason}); {FREE_SPACE}, then run again"
    return (f"cannot write {where} ({reason}): the folder is read-only or not yours; make it writable, or write "
            "elsewhere (--log_dir, MLPERF_SCRATCH_PATH), then run again")


def fault_exit(error: Exception, writing_in: Path | None = None) -> int:
    """For a command's ``except Exception``: print the one line of a fault the user fixes (a missing or malformed
    input, any ``describe``-d error) and return BAD_INPUT; re-raise a bug, whose traceback is the report."""
    line = str(error) if isinstance(error, (FileNotFoundError, ValueError)) else describe(error, writing_in)
    if line is None:
        raise error
    print(f"error: {line}", file=sys.stderr)
    return ExitCode.BAD_INPUT
