"""Live progress of a running LoadGen test: a line at least every 15 s, built from the core's counters.

LoadGen prints nothing between the start and the end of a test, and a valid test lasts at least ten minutes (a
GPT-J accuracy run, hours). The C++ core counts issued, completed and late samples (``core.progress``); a thread
here reads them while ``run_test`` blocks and prints one line each period. The test process's output is a pipe, so
it prints plain lines; the parent (``code/actions/run_harness.py``) redraws them in place when its own output is a
terminal, and the child then prints them more often (``PROGRESS_TTY_ENV``).

What a line can promise differs by scenario: Offline issues its one query at the start, so the samples left and
the rate give an ETA; Server and SingleStream issue until LoadGen's minimum duration and query count are met, so
the line shows the time left of the minimum duration and, for Server, the samples already past the latency bound.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from code.common.periodic import Periodic

PREFIX = "[progress] "
PERIOD_S = 15.0  # plain lines: at least one every 15 s
TTY_PERIOD_S = 1.0  # redrawn in place by the parent on a terminal
PROGRESS_TTY_ENV = "MLPERF_PROGRESS_TTY"  # set by the parent when its output is a terminal
BAR_WIDTH = 24
MLPERF_MIN_DURATION_MS = 600_000  # mlperf.conf's, for a user.conf that does not set its own

Counters = dict[str, float]
Read = Callable[[], Counters]


@dataclass(frozen=True)
class ProgressShape:
    """What the line needs to know of the test besides the counters."""

    scenario: str  # "Offline" | "Server" | "SingleStream"
    min_duration_s: float
    latency_bound_s: float | None = None  # Server's bound, for the "late" count


def min_duration_s(user_conf: Path, scenario: str) -> float:
    """The test's minimum duration as its user.conf sets it (``*.<Scenario>.min_duration`` or a model's), else
    mlperf.conf's 600 s."""
    pattern = re.compile(rf"^\s*[\w*.-]+\.{scenario}\.min_duration\s*=\s*(\d+)")
    found = [int(m.group(1)) for line in user_conf.read_text().splitlines() if (m := pattern.match(line))]
    return (found[-1] if found else MLPERF_MIN_DURATION_MS) / 1000.0


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(counters: Counters, shape: ProgressShape) -> str:
    """One line: samples done, rate, elapsed, and what is left (see the module docstring for why it differs)."""
    issued, done = int(counters["issued"]), int(counters["completed"])
    elapsed = float(counters["elapsed_s"])
    rate = done / elapsed if elapsed > 0 else 0.0
    share = done / issued if issued else 0.0
    filled = int(share * BAR_WIDTH)
    left = shape.min_duration_s - elapsed
    if shape.scenario == "Offline":
        what = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%} {done:,}/{issued:,} samples"
        end = [f"ETA {format_duration((issued - done) / rate)}"] if done and issued > done else []
    else:
        what = f"{done:,} samples done, {issued - done:,} in flight"
        end = [f"min duration left {format_duration(left)}" if left > 0 else "min duration met"]
    parts = [f"{PREFIX}{shape.scenario}", what, f"{rate:,.1f} samples/s", f"elapsed {format_duration(elapsed)}", *end]
    if shape.latency_bound_s is not None:
        parts.append(f"{int(counters['late']):,} late (> {shape.latency_bound_s:g} s)")
    return ", ".join(parts)


class ProgressReporter:
    """A thread that prints ``progress_line`` every ``period_s`` while the ``with`` block runs (a test)."""

    def __init__(self, read: Read, shape: ProgressShape, period_s: float = PERIOD_S, out: TextIO | None = None) -> None:
        self._read, self._shape, self._out = read, shape, out or sys.stdout
        # Progress never stops a test: a failed read ends the lines, and the last one says why.
        self._periodic = Periodic(self._print_line, period_s, "progress", on_error=self._stopped)

    def __enter__(self) -> ProgressReporter:
        self._periodic.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._periodic.stop()

    def _print_line(self) -> None:
        print(progress_line(self._read(), self._shape), file=self._out, flush=True)

    def _stopped(self, error: BaseException) -> None:
        print(f"{PREFIX}stopped: {type(error).__name__}: {error}", file=self._out, flush=True)


class ProgressScreen:
    """The parent's side: passes the test's output through, redrawing progress lines in place on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.redraws = out.isatty()
        self._drawn = False  # a progress line is on the screen, without its newline

    def write(self, line: str) -> None:
        if self.redraws and line.startswith(PREFIX):
            self._out.write("\r\033[K" + line.rstrip("\n"))
            self._drawn = True
        else:
            self.done()
            self._out.write(line)
        self._out.flush()

    def done(self) -> None:
        """Ends a redrawn line, so what follows starts on its own line."""
        if self._drawn:
            self._out.write("\n")
            self._drawn = False
