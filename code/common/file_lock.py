"""Advisory locks on a lock file (``flock``): how processes that share a file or folder take turns.

A lock goes with the process that holds it: a killed process never leaves one held, so a lock file left behind
means nothing and is never removed (removing it would let two holders lock two different files).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def holding(lock_file: Path, *, shared: bool = False) -> Iterator[None]:
    """Holds ``lock_file`` (created if missing) exclusively, or ``shared`` with other shared holders; waits for the
    holders of the other kind."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
