"""Files that are whole or absent: written under a temporary name beside their place, then renamed into it.

A rename within one folder is atomic on POSIX file systems, so a reader (a later run, a concurrent one, staging)
finds the earlier file or the new one, never half of one; an interrupted or failed write (Ctrl-C, a full disk)
leaves the earlier file as it was and no temporary behind.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` for the block to write; renamed over ``path`` when the block ends
    without error, removed otherwise (whatever the exception, KeyboardInterrupt included)."""
    path = Path(path)
    # Unique per process and call, and created by the block's writer, so the file gets the usual permissions
    # (the umask's), not mkstemp's owner-only ones.
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
