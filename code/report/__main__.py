"""``python -m code.report [<log dir>]`` (``make report [LOG_DIR=...]``): reports for every test of a run, and one
page for the run; without a folder, the newest run in build/logs. Exit 2 with one line naming the fix when there
is no run or the folder holds no test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from code.common.cli import exits_on
from code.common.paths import LOGS_DIR
from code.report.pages import ReportError, write_run_report
from code.submission.runs import run_folders


@exits_on(ReportError)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m code.report", description=__doc__.split("\n")[0])
    parser.add_argument("log_dir", type=Path, nargs="?",
                        help="a run's folder, e.g. build/logs/<timestamp> (default: the newest in build/logs)")
    args = parser.parse_args(argv)
    folders = run_folders(LOGS_DIR)  # the newest run's folder is the last: their names are timestamps
    if args.log_dir is None and not folders:
        raise ReportError(f"no run in {LOGS_DIR} yet: run one first, e.g. make run RUN_ARGS=\"--benchmarks=bert "
                          "--scenarios=offline --test_run\", or give a run's folder: make report LOG_DIR=<folder>")
    path = write_run_report(args.log_dir or folders[-1])
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
