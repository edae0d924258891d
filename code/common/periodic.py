"""Progress of a long loop outside LoadGen (preprocessing): a tqdm bar on a terminal, a plain line at least every
``EVERY_S`` seconds otherwise (a pipe, CI, a log file), so a step of minutes is never silent.

Downloads print their own lines (``code/common/download.py``: every few seconds and every 10 %); LoadGen tests
theirs (``code/harness/progress.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from code.common.log import get_logger

EVERY_S = 15.0
T = TypeVar("T")


def track(items: Iterable[T], total: int | None, what: str, unit: str = "items", step: str = "progress",
          every_s: float = EVERY_S, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items``, reporting how far the loop is: a bar when ``stream`` (stderr) is a terminal, else a
    ``[step] what: done/total unit (pct), rate/s, elapsed, ETA`` line every ``every_s`` seconds and one at the
    end (the end line only when an earlier one was printed: a loop of a second stays quiet)."""
    stream = stream or sys.stderr
    if stream.isatty():
        from tqdm import tqdm

        yield from tqdm(items, total=total, desc=what, unit=f" {unit}", file=stream, mininterval=1.0)
        return
    log = get_logger(step)
    start = last = time.monotonic()
    done = 0
    printed = False
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= every_s:
            log.info("%s", progress_line(what, done, total, unit, now - start))
            last, printed = now, True
    if printed:
        log.info("%s", progress_line(what, done, total, unit, time.monotonic() - start) + " (done)")


def progress_line(what: str, done: int, total: int | None, unit: str, elapsed_s: float) -> str:
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    line = f"{what}: {done:,}"
    if total:
        line += f"/{total:,} {unit} ({100 * done / total:.0f} %)"
        if rate > 0 and done < total:
            line += f", ETA {(total - done) / rate:.0f} s"
    else:
        line += f" {unit}"
    return line + f", {rate:,.1f} {unit}/s, {elapsed_s:.0f} s elapsed"
