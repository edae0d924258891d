"""The harness's own messages: Python ``logging``, one ``[step] message`` line each, quiet unless ``--verbose``.

Levels: INFO is what a run has always said (where the logs go, which test starts, how long loading took);
DEBUG (``--verbose``, NVIDIA's flag) adds what helps when something is off (the resolved config of each test, the
child's command line); WARNING and ERROR are things that went wrong but did not stop the run. The final summary
table and ``info``'s report are results, not diagnostics, so they stay plain output.

Messages go to stdout, the stream the test processes write to: the harness copies each test's output through in
order, so one stream keeps the harness's lines and the test's lines in the order they happened. A test process
inherits the level through the environment (``VERBOSE_ENV``), so ``--verbose`` reaches every process of a run.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "mlperf"
VERBOSE_ENV = "MLPERF_HARNESS_VERBOSE"


class _StepFormatter(logging.Formatter):
    """``[run_harness] message`` at every level: the level decides whether a line is shown, not how it reads,
    so scripts that match the harness's lines read the same text with or without ``--verbose``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.name.rsplit('.', 1)[-1]}] {record.getMessage()}"


class _CurrentStdout(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stdout`` is at the time (pytest's capture swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout  # not setStream: that flushes the old stream, which may be closed by now
        super().emit(record)


def get_logger(step: str) -> logging.Logger:
    """The logger of one step of the harness (``run_harness``, ``run_single_test`` ...): its name is the prefix.
    Set up on first use when no entry point did (a test, a script), so an INFO line is never lost."""
    if not logging.getLogger(ROOT).handlers:
        configure()
    return logging.getLogger(f"{ROOT}.{step}")


def configure(verbose: bool | None = None) -> None:
    """Set the level of every harness logger; ``None`` takes it from ``VERBOSE_ENV`` (a test process), and a
    given value also sets that variable, so the processes this one starts log at the same level."""
    if verbose is None:
        verbose = os.environ.get(VERBOSE_ENV, "") == "1"
    else:
        os.environ[VERBOSE_ENV] = "1" if verbose else "0"
    root = logging.getLogger(ROOT)
    if not any(isinstance(handler, _CurrentStdout) for handler in root.handlers):
        handler = _CurrentStdout()
        handler.setFormatter(_StepFormatter())
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False  # a library's logging.basicConfig must not print our lines twice
