"""``python -m code.report <log dir>`` (``make report LOG_DIR=...``): reports for every test of a run, and one page
for the run. Exit 2 with one line naming the fix when the folder holds no test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from code.report.pages import ReportError, write_run_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m code.report", description=__doc__.split("\n")[0])
    parser.add_argument("log_dir", type=Path, help="a run's folder, e.g. build/logs/<timestamp>")
    args = parser.parse_args(argv)
    try:
        path = write_run_report(args.log_dir)
    except ReportError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
