"""Files and folders that are whole or absent: written under a temporary name beside their place, then renamed
into it.

A rename within one folder is atomic on POSIX file systems, so a reader (a later run, a concurrent one, staging)
finds the earlier file or the new one, never half of one; an interrupted or failed write (Ctrl-C, a full disk)
leaves the earlier file as it was and no temporary behind.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` for the block to write; renamed over ``path`` when the block ends
    without error, removed otherwise (KeyboardInterrupt included)."""
    path = Path(path)
    # Unique per call, and made by the writer, so the file gets the umask's permissions, not mkstemp's owner-only.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> Path:
    """``path.write_text(text)``, whole or not at all."""
    with replacing(path) as tmp:
        tmp.write_text(text)
    return Path(path)


FOLDER_TEMPORARY = "tmp"  # a folder being written: .<name>.<pid>.<token>.tmp
FOLDER_REPLACED = "old"  # the folder it replaces, until removed: .<name>.<pid>.<token>.old


@contextmanager
def replacing_folder(path: Path) -> Iterator[Path]:
    """A fresh empty folder beside ``path`` for the block to fill; put in ``path``'s place when the block ends without
    error, removed otherwise. ``path`` is absent for an instant between the two renames (readers share a lock)."""
    path = Path(path)
    token = f"{os.getpid()}.{secrets.token_hex(4)}"
    building = path.with_name(f".{path.name}.{token}.{FOLDER_TEMPORARY}")
    replaced = path.with_name(f".{path.name}.{token}.{FOLDER_REPLACED}")
    building.mkdir(parents=True)
    try:
        yield building
        if path.exists():
            path.rename(replaced)
        building.rename(path)
    except BaseException:
        if replaced.exists() and not path.exists():
            replaced.rename(path)  # the earlier folder back where it was
        shutil.rmtree(building, ignore_errors=True)
        raise
    shutil.rmtree(replaced, ignore_errors=True)


def leftovers(path: Path) -> list[Path]:
    """The folders a killed ``replacing_folder(path)`` left beside ``path``; only the writer of ``path`` may remove
    them (another may be filling one now)."""
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.\d+\.[0-9a-f]{{8}}\.({FOLDER_TEMPORARY}|{FOLDER_REPLACED})")
    if not path.parent.is_dir():
        return []
    return sorted(entry for entry in path.parent.iterdir() if pattern.fullmatch(entry.name) and entry.is_dir())


def recover(path: Path) -> None:
    """Undo what a killed ``replacing_folder(path)`` left: a kill between its two renames left ``path`` missing and
    its earlier folder renamed away, which is put back; every other leftover is removed. The writer's alone to call."""
    path = Path(path)
    found = leftovers(path)
    replaced = [entry for entry in found if entry.name.endswith(f".{FOLDER_REPLACED}")]
    if replaced and not path.exists():
        newest = max(replaced, key=lambda entry: entry.stat().st_mtime)
        newest.rename(path)
        found.remove(newest)
    for leftover in found:
        shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def replacing_folder_alone(path: Path) -> Iterator[Path]:
    """``replacing_folder`` for writers that may run side by side (two ``make preprocess_data``): one at a time,
    under a lock file beside ``path``, each first recovering what a killed one left."""
    from code.common.file_lock import holding

    path = Path(path)
    with holding(path.with_name(f".{path.name}.lock")):
        recover(path)
        with replacing_folder(path) as folder:
            yield folder
