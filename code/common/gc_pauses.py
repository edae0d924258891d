"""Python's cyclic garbage collector during a timed test: what a process holds when the test starts is frozen.

A full collection walks every tracked object: with a data set, an engine and LoadGen's samples loaded, one pass
took 30-244 ms during a bert-99 Server test on an H200 host and pushed thousands of queries past the 130 ms bound
at once (documentation/notes/journal/2026-11-26.md). ``gc.freeze()`` moves what is alive at the start into a
generation collections skip; cycles made during the test are still collected, by passes over the test's objects.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, freeze what is left for the block's duration, then hand it back to the collector."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
