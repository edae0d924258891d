"""The harness's own messages: Python ``logging``, one ``[step] message`` line each, quiet unless ``--verbose``.

INFO is what a run says (where the logs go, which test starts); DEBUG (``--verbose``) adds what helps when something
is off (each test's resolved config, the child's command line). The summary table and ``info``'s report are results,
not diagnostics: plain output. Messages go to stdout, the stream the test processes write to, so the harness's lines
and the tests' keep their order; a test process inherits the level through ``VERBOSE_ENV``.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "mlperf"
VERBOSE_ENV = "MLPERF_HARNESS_VERBOSE"


class _CurrentStdout(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at the time (pytest's capture swaps it), ``[run_harness] message`` at
    every level: the level decides whether a line is shown, not how it reads, so scripts match it either way."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout  # not setStream: that flushes the old stream, which may be closed by now
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.name.rsplit('.', 1)[-1]}] {record.getMessage()}"


def get_logger(step: str) -> logging.Logger:
    """The logger of one step (``run_harness`` ...), its name the prefix; set up on first use where no entry point
    did (a test, a script), so an INFO line is never lost."""
    if not logging.getLogger(ROOT).handlers:
        configure()
    return logging.getLogger(f"{ROOT}.{step}")


def configure(verbose: bool | None = None) -> None:
    """Set the harness's level; ``None`` reads ``VERBOSE_ENV``, a value also sets it for the processes started."""
    if verbose is None:
        verbose = os.environ.get(VERBOSE_ENV, "") == "1"
    else:
        os.environ[VERBOSE_ENV] = "1" if verbose else "0"
    root = logging.getLogger(ROOT)
    if not any(isinstance(handler, _CurrentStdout) for handler in root.handlers):
        root.addHandler(_CurrentStdout())
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False  # a library's logging.basicConfig must not print our lines twice
