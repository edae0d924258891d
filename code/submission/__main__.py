"""``python -m code.submission stage|truncate|check|pack``: what make stage_results, truncate_results,
check_submission and pack_submission run. Exit status: 0 done (check: the checker found no error), 1 the checker
found errors, a tool failed or the disk is full (one line each), 2 bad input (named, with its fix)."""

from __future__ import annotations

import argparse
import csv
import sys
import textwrap
from pathlib import Path

from code.common.constants import ExitCode
from code.common.faults import describe
from code.common.rounds import RoundError
from code.submission.checker import AlreadyTruncated, CheckResult, ToolFailed, check, truncate, truncated
from code.submission.pack import pack
from code.submission.stage import DIVISION, SUBMISSION_DIR, SYSTEMS_DIR, StageError, stage, staged_round
from code.submission.tools import ToolsError

# The CSV columns that say what a result is; the checker writes 28.
CSV_COLUMNS = ("SystemName", "Model", "Scenario", "Result", "Units", "Accuracy", "compliance", "errors")
MESSAGE_WIDTH = 100  # a refusal's lines: one problem can name a dozen reasons and a folder, read in a terminal


def wrapped(text: str, first: str, rest: str) -> str:
    """``text`` in lines of ``MESSAGE_WIDTH`` columns, a word or path longer than that whole (to be copied)."""
    return "\n".join(textwrap.wrap(text, MESSAGE_WIDTH, initial_indent=first, subsequent_indent=rest,
                                   break_long_words=False, break_on_hyphens=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m code.submission", description=__doc__)
    parser.add_argument("action", choices=("stage", "truncate", "check", "pack"))
    parser.add_argument("--submitter", required=True, help="the organization: build/submission/closed/<submitter>")
    parser.add_argument("--system", help="stage this system's runs (default: the only system in the runs)")
    parser.add_argument("--round", help="stage this round's runs (default: the only round in the runs)")
    parser.add_argument("--logs", nargs="*", type=Path, help="run folders (default: every one in build/logs)")
    parser.add_argument("--compliance_logs", nargs="*", type=Path,
                        help="audit folders (default: every one in build/compliance_logs)")
    parser.add_argument("--systems_dir", type=Path, default=SYSTEMS_DIR,
                        help="where <system>.json is (default: systems/)")
    parser.add_argument("--allow_incomplete", action="store_true",
                        help="stage (or pack) even with missing or not-submittable tests; the tree's README says so")
    parser.add_argument("--skip_compliance", action="store_true", help="check: pass --skip_compliance")
    args = parser.parse_args(argv)
    try:
        if args.action == "stage":
            return _stage(args)
        if args.action == "pack":
            packed = pack(args.submitter, allow_incomplete=args.allow_incomplete)
            print(f"[pack_submission] {packed.archive} ({packed.files} files)\n  sha1   {packed.sha1}\n"
                  f"  sha256 {packed.sha256}\n[pack_submission] upload the archive through the submission UI; "
                  f"{packed.archive.with_suffix('').with_suffix('.sha1').name} holds its sha1 as pack_submission.sh "
                  "writes it")
            return ExitCode.OK
        round_name = staged_round(args.submitter)
        if args.action == "truncate":
            print(truncate(args.submitter, round_name).rstrip())
            print(f"[truncate_results] truncated with round {round_name}'s truncate_accuracy_log.py")
            return ExitCode.OK
        if not truncated(SUBMISSION_DIR / DIVISION / args.submitter):
            print("[check_submission] note: the tree is not truncated yet, so the checker will say 'not hash value' "
                  "and 'is not truncated': make truncate_results first")
        if args.skip_compliance:
            print("[check_submission] note: --skip_compliance: the checker does not look at compliance/ (a dry check; "
                  "a submission needs the audits)")
        result = check(args.submitter, round_name, skip_compliance=args.skip_compliance)
        _print_check(result, round_name)
        return ExitCode.OK if result.passed else 1
    except AlreadyTruncated as refused:
        print(f"[truncate_results] {refused}")
        return ExitCode.OK
    except (StageError, ToolsError, RoundError, FileNotFoundError) as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except (ToolFailed, OSError) as error:  # a tool's own failure, a full disk or a read-only folder: exit 1
        message = str(error) if isinstance(error, ToolFailed) else describe(error, writing_in=SUBMISSION_DIR)
        if message is None:
            raise
        print(f"ERROR: {message}", file=sys.stderr)
        return 1


def _stage(args: argparse.Namespace) -> int:
    allowed = args.allow_incomplete
    staged = stage(args.submitter, logs=args.logs, compliance=args.compliance_logs, system=args.system,
                   round_name=args.round, allow_incomplete=allowed, systems_dir=args.systems_dir)
    for note in staged.notes:
        print(wrapped(note, "[stage_results] note: ", "  "))
    if staged.problems:
        stream = sys.stdout if allowed else sys.stderr
        head = ("staged anyway (--allow_incomplete; the tree's README lists these)" if allowed else
                f"nothing staged ({staged.tree} is as the last staging left it): these runs are not a complete, "
                "submittable set (fix them, or stage with ALLOW_INCOMPLETE=1 and a README that says so)")
        print(wrapped(f"{head}:", "[stage_results] ", "  "), file=stream)
        for problem in staged.problems:
            print(wrapped(problem, "  - ", "    "), file=stream)
        if not allowed:
            return ExitCode.BAD_INPUT
    print(f"[stage_results] staged {staged.tree} (round {staged.round}, system {staged.system}); next: "
          "make truncate_results, then make check_submission")
    return ExitCode.OK


def _print_check(result: CheckResult, round_name: str) -> None:
    """The checker's complaints and closing counts, its verdict, and its CSV summary (the whole log is kept)."""
    for complaint in result.complaints:
        print(f"  checker: {complaint}")
    for line in result.output.splitlines():
        if "Results=" in line or "SUMMARY:" in line:
            print(line)
    print(f"[check_submission] round {round_name} checker: {result.verdict}; {len(result.errors)} error line(s), "
          f"{len(result.complaints)} complaint(s); whole log: {result.csv.parent / 'checker.log'}")
    if result.csv.is_file():
        with result.csv.open() as handle:
            rows = list(csv.DictReader(handle))
        print(f"[check_submission] {result.csv}: {len(rows)} result(s)")
        for row in rows:
            print("  " + ", ".join(f"{column}={row.get(column, '')}" for column in CSV_COLUMNS))


if __name__ == "__main__":
    sys.exit(main())
