"""Work done every so often: progress of a long loop outside LoadGen (preprocessing), and a call repeated on a
thread of its own (``Periodic``: LoadGen's progress lines, GPU power during a test).

A loop's progress is a tqdm bar on a terminal, a plain line at least every ``EVERY_S`` seconds otherwise (a pipe,
CI, a log file), so a step of minutes is never silent.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

from code.common.log import get_logger

EVERY_S = 15.0
T = TypeVar("T")


def track(items: Iterable[T], total: int | None, what: str, unit: str = "items", step: str = "progress",
          every_s: float = EVERY_S, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items``: a bar when ``stream`` (stderr) is a terminal, else a progress line every ``every_s`` seconds
    and one at the end (only after an earlier one: a loop of a second stays quiet)."""
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


class Periodic:
    """Calls ``tick`` every ``period_s`` on a daemon thread, from ``start`` until ``stop`` (or the ``with`` block).

    Ticks keep to whole periods from the start: a slow tick shifts no later one, and one that overruns skips the
    ticks it missed. A tick that raises ends the thread (the error would only repeat): ``error`` keeps it and
    ``on_error`` hears it once, on the thread."""

    def __init__(self, tick: Callable[[], None], period_s: float, name: str,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, not {period_s}")
        self._tick, self._period_s, self._on_error = tick, period_s, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread and waits for it: no tick runs after this returns."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Periodic:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _loop(self) -> None:
        start = time.monotonic()
        due = 1
        while not self._stop.wait(max(0.0, start + due * self._period_s - time.monotonic())):
            try:
                self._tick()
            except Exception as error:  # noqa: BLE001 - the owner decides what a failed tick means
                self.error = error
                if self._on_error is not None:
                    self._on_error(error)
                return
            due = max(due + 1, int((time.monotonic() - start) / self._period_s) + 1)
