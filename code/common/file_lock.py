"""Advisory locks on a lock file (``flock``): how processes that share a file or folder take turns.

A lock goes with the process that holds it: a killed process never leaves one held, so a lock file left behind
means nothing and is never removed (removing it would let two holders lock two different files).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from code.common.benchmark_errors import BenchmarkError


class LockPathError(BenchmarkError):
    """A folder where a lock file belongs (made by hand or a stray ``mkdir``); the message names it and the fix."""


def _not_a_folder(lock_file: Path) -> None:
    """Opening a folder would raise IsADirectoryError, which says neither what the path is for nor what to do."""
    if lock_file.is_dir():
        raise LockPathError(f"{lock_file} is a folder, where the lock file that lets runs take turns belongs; "
                            f"remove it (rmdir {lock_file}, or rm -r if it holds files: a lock file holds nothing), "
                            "then run again")


@contextmanager
def holding(lock_file: Path, *, shared: bool = False) -> Iterator[None]:
    """Holds ``lock_file`` (created if missing) exclusively, or ``shared`` with other shared holders; waits for the
    holders of the other kind."""
    lock_file = Path(lock_file)
    descriptor = _open(lock_file, shared)
    if descriptor is None:  # a reader where the owner made no lock file and it may not make one: nothing to wait for
        yield
        return
    try:
        _lock(descriptor, lock_file, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _open(lock_file: Path, shared: bool) -> int | None:
    """The lock file's descriptor. A shared holder in a folder it may not write (a shared, read-only engines folder)
    opens its owner's lock file read-only (a lock needs no write access), or gets None where the owner made none."""
    _not_a_folder(lock_file)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        if not shared:
            raise
    try:
        return os.open(lock_file, os.O_RDONLY)
    except OSError:
        return None


def _lock(descriptor: int, lock_file: Path, operation: int) -> None:
    """``flock``; a file system without locks (NFS mounted with nolock) is named with the fix instead of errno 37."""
    try:
        fcntl.flock(descriptor, operation)
    except OSError as error:
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP):
            raise OSError(error.errno, f"the file system of {lock_file.parent} does not support file locks "
                          f"({error.strerror}); keep build/ on a local disk of this host, or on NFS with locking "
                          "on", str(lock_file)) from None
        raise


_held_for_life: list[IO[str]] = []  # open files, so their locks stay held


def hold_for_life(lock_file: Path) -> None:
    """Holds ``lock_file`` exclusively until this process exits or is killed: "in use" for exactly its life."""
    lock_file = Path(lock_file)
    _not_a_folder(lock_file)
    lock = open(lock_file, "a")  # noqa: SIM115 - kept open on purpose: closing it would release the lock
    _lock(lock.fileno(), lock_file, fcntl.LOCK_EX)
    _held_for_life.append(lock)


def is_held(lock_file: Path) -> bool:
    """Whether a live process holds ``lock_file`` (a missing file is held by none). Asks without waiting."""
    try:
        descriptor = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a lock file this process may not read: its folder is not ours to treat as free
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # releases the probe's own lock, if it got one
    return False
