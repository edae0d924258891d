"""Test processes that never outlive the run that started them.

Each LoadGen test runs in its own process group: Ctrl-C at a terminal reaches only the parent, which stops the whole
group and records what it stopped (its stop signals become ``Interrupted``). The test also asks the kernel for
SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), which covers a parent killed outright. A several-device test's
workers (code/harness/workers.py) are started the same way one level down, from the test's main thread: the kernel
sends that signal when the thread that started the child ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from code.common.benchmark_errors import BenchmarkError

# The parent's pid, given to the child so it can tell whether the parent died before PR_SET_PDEATHSIG took hold.
PARENT_PID_ENV = "MLPERF_HARNESS_PARENT_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a stopped test may take to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE_S = 5.0


def how_it_ended(returncode: int) -> str:
    """A child's exit status in words: "exited with status 1", "was killed by SIGKILL (...)". A negative status is
    the signal that ended it, which a bare "exit -9" leaves the reader to decode."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = " (the out-of-memory killer, or kill -9)" if name == "SIGKILL" else ""
    return f"was killed by {name}{hint}"


class Interrupted(Exception):
    """The parent got a stop signal (Ctrl-C, a timeout's SIGTERM, a closed terminal's SIGHUP)."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + signum  # the shell's convention for "ended by a signal"
        super().__init__(f"interrupted by {self.signal_name}")


@contextmanager
def _on_stop_signals(action: Any) -> Iterator[None]:
    """Within the block, the stop signals get ``action``; after it, what they had before."""
    previous = {signum: signal.signal(signum, action) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, earlier in previous.items():
            signal.signal(signum, earlier)


def stop_signals_raise() -> AbstractContextManager[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` (a killed parent could clean nothing)."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    return _on_stop_signals(handler)


def stop_signals_ignored() -> AbstractContextManager[None]:
    """Within the block, a second Ctrl-C cannot cut short the cleanup that the first one started."""
    return _on_stop_signals(signal.SIG_IGN)


class StartError(BenchmarkError):
    """A child process could not be started at all (its program cannot be run); the message names the fix."""


def start_in_own_group(command: list[str], **popen_args: Any) -> subprocess.Popen:
    """Start a child in a new process group, told our pid (see ``die_with_parent``); stdin is closed."""
    return start_child(command, process_group=0, **popen_args)


def start_child(command: list[str], **popen_args: Any) -> subprocess.Popen:
    """Start a helper of a test (a device's worker) in the test's process group, told our pid (see
    ``die_with_parent``). A program that cannot be run is a ``StartError`` naming it, not a bare OSError that reads
    as a file that cannot be written (exec's EACCES is about running a file, or searching its folders)."""
    env = {**popen_args.pop("env", os.environ), PARENT_PID_ENV: str(os.getpid())}
    try:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env, **popen_args)
    except OSError as error:
        program = command[0]
        real = os.path.realpath(program)
        leads = f", which leads to {real}" if real != os.path.abspath(program) else ""
        why = error.strerror or str(error)
        if error.errno in (errno.EACCES, errno.EPERM):
            raise StartError(f"cannot run {program}{leads} ({why}): this user (uid {os.getuid()}) may not execute "
                             "it, or not enter a folder on its path; run as the user who set up the environment, "
                             "or give this user read and execute access there (chmod o+rx)") from None
        raise StartError(f"cannot run {program}{leads} ({why}); run make setup (or make build) again") from None


def stop_group(process: subprocess.Popen) -> bool:
    """Stop a child of ``start_in_own_group`` and its whole group; True if it was still running. SIGTERM first (the
    test has no handler for it), SIGKILL after ``STOP_GRACE_S``; the group is signalled even when its leader is gone,
    for what it left behind (Linux reuses no group's id while a member lives)."""
    was_running = process.poll() is None
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
    _signal_group(process.pid, signal.SIGKILL)
    return was_running


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is empty: nothing left to stop
        os.killpg(pgid, signum)


def die_with_parent() -> None:
    """In a child of ``start_in_own_group``: have the kernel SIGKILL us when the parent dies (Linux only), and exit
    at once if it died before the request took hold."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(error)}")
    expected = os.environ.get(PARENT_PID_ENV)
    if expected and os.getppid() != int(expected):
        print(f"ERROR: the harness process {expected} that started this test has exited; not running it",
              file=sys.stderr, flush=True)
        os._exit(1)


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``: how tests find a test's processes by its folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
