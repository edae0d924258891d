"""Python's cyclic garbage collector during a timed test: what a process holds when the test starts is frozen.

A full (generation 2) collection walks every object the collector tracks. A process that has loaded a data set, an
engine and LoadGen's samples tracks millions, and one such pass took 30-244 ms on an H200 host during a bert-99
Server test: each pass stalled every thread that needs the interpreter, and each stall pushed thousands of queries
past the 130 ms bound at once (documentation/notes/journal/2026-11-26.md). ``gc.freeze()`` moves every object alive at
the start
into a permanent generation that collections skip, so cycles made during the test are still collected, by passes
over the test's own objects only; reference counting frees the rest as before.
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
