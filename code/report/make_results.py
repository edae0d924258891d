"""``python -m code.report.make_results [--compare=<a>,<b>]`` (``make results [COMPARE=<a>,<b>]``): the newest
result per system, benchmark, scenario, GPU count and test (code/report/results.py), or two runs side by side
(code/report/compare.py); each as a table in the terminal and a CSV file in the build folder, whose path is
printed. Exit 2 with one line naming the fix when a folder to compare is missing or holds no finished test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from code.common.cli import exits_on
from code.common.paths import BUILD_DIR
from code.report.compare import COMPARE_CSV, parse_pair, write_comparison
from code.report.results import RESULTS_CSV, ResultsError, write_results


@exits_on(ResultsError)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m code.report.make_results", description=__doc__.split("\n")[1])
    parser.add_argument("--build_dir", type=Path, default=BUILD_DIR,
                        help="the build folder: runs are read from its logs/, the CSV is written in it")
    parser.add_argument("--compare", metavar="A,B", help="two run folders (or their names under logs/)")
    args = parser.parse_args(argv)
    logs_dir = args.build_dir / "logs"
    if args.compare is None:
        written = write_results(logs_dir, args.build_dir / RESULTS_CSV)
    else:
        written = write_comparison(*parse_pair(args.compare, logs_dir), args.build_dir / COMPARE_CSV)
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
