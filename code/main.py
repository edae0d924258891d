"""Entry point: ``python -m code.main --action=<generate_engines|run_harness|run|info|run_audit> [RUN_ARGS...]``.

``--find_performance`` with run or run_harness measures the system instead (``make find_performance``). A run first
says what it will run and for about how long (code/actions/announce.py); ``--check_args`` says it, checks RUN_ARGS
and stops, which the make targets that run tests do before building the C++ core.

Errors a user can fix (a bad flag, a missing config, a round without the test, absent or corrupt data) end with
one clear message and exit 2, never a traceback; a full disk or a read-only folder ends with one too, and exit 1.
A run exits 3 when a test is INVALID or FAILs its accuracy target, and 1 when a test did not finish (``ExitCode``;
documentation/commands.md).
"""

from __future__ import annotations

import signal
import sys

from code.common.benchmark_errors import BenchmarkError
from code.common.constants import ExitCode
from code.common.faults import describe
from code.common.log import configure, get_logger
from code.common.rounds import RoundError
from code.common.systems import SystemDetectionError
from code.config.fields import FieldError
from code.config.resolved import ConfigError
from code.mlperf.arguments import ArgumentError, format_help, parse_run_args
from code.mlperf.audits import AuditError
from code.mlperf.run_logs import LogDirError

USER_ERRORS = (ArgumentError, FieldError, ConfigError, BenchmarkError, LogDirError, SystemDetectionError, RoundError,
               AuditError)


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help", "help") for arg in argv):
        print(format_help())  # usage and exit statuses too, each line within the help's width
        return ExitCode.OK
    # What a Ctrl-C would stop, for the one line that says so (run_harness and run_audit say it themselves once
    # their tests run: they stop the test, mark its logs incomplete and write the summary).
    step = "reading RUN_ARGS"
    try:
        request = parse_run_args(argv)
        configure(request.verbose)
        get_logger("main").debug("RUN_ARGS: %s", " ".join(argv))
        if request.action in ("run", "run_harness"):  # what runs and for how long, before anything slow starts
            from code.actions.announce import announce

            step = "saying what the run will do"
            announce(request)
        if request.check_args:
            get_logger("plan").info("RUN_ARGS are valid for --action=%s", request.action)
            return ExitCode.OK
        if request.action == "run_audit":
            from code.actions.run_audit import run_audit

            step = "run_audit before its first audit"
            return run_audit(request)
        if request.action == "info":
            from code.actions.info import info

            step = "info"
            info(request)
            return ExitCode.OK
        if request.action in ("generate_engines", "run"):
            from code.actions.generate_engines import generate_engines

            step = "generate_engines (an engine is renamed into place only when whole: none is left half-written)"
            generate_engines(request)
        if request.action in ("run_harness", "run") and request.find_performance:
            from code.tuning.find_performance import find_performance

            step = "find_performance before its first try"
            return find_performance(request)
        if request.action in ("run_harness", "run"):
            from code.actions.run_harness import run_harness

            step = "run_harness before its first test"
            return run_harness(request)
        return ExitCode.OK
    except USER_ERRORS as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as error:  # a full disk or a read-only folder, met by this process itself
        message = describe(error)
        if message is None:
            raise
        print(f"ERROR: {message}", file=sys.stderr)
        return ExitCode.TEST_FAILED
    except KeyboardInterrupt:  # run_harness handles Ctrl-C during tests; before them no test process exists
        get_logger("main").info("interrupted by SIGINT during %s; no test had started, so there are no run logs",
                                step)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
