"""Running the round's official tools on a staged tree: accuracy-log truncation and the submission checker.

Both run unmodified, as subprocesses from their own folder (they import their siblings and log through the root
logger); we only pass arguments and read what they print. Their round is the staged tree's (stage.json).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from code.common.rounds import get_round
from code.submission.stage import DIVISION, SUBMISSION_DIR, WORK_DIR, record_tree
from code.submission.tools import submission_tools

# The checker logs one line per complaint: "[<date> <time> submission_checker.py:<line> ERROR] <message>" (the
# format its log_parser import sets), or logging's default "ERROR:main:<message>" should that import change.
ERROR_LINE = re.compile(r"^(?:\[[^\]]* ERROR\] |ERROR:main:)(.*)$", re.MULTILINE)
# Errors that only repeat an earlier complaint about the same folder: the complaints are the others (v6.1's package
# checker closes each failed group of checks with "Some <group> checks Checks failed for: <path>").
FOLLOW_ON_ERRORS = ("has issues", "NoResults ", "does not have all required scenarios", "SUMMARY: ",
                    "is OK but accuracy has issues", " Checks failed for: ")
HASH_LINE = re.compile(r"^hash=\w+$", re.MULTILINE)
CHECK_RECORD = "result.json"  # beside the checker's log: its verdict and the tree it judged (make pack_submission)


class AlreadyTruncated(RuntimeError):
    """A second truncation: the tool would find nothing to do, and the originals are already kept."""


class ToolFailed(RuntimeError):
    """An official tool ended in an error; the message quotes its last error line and names its whole log."""


@dataclass(frozen=True)
class CheckResult:
    """The checker's verdict: its exit status, each ERROR line, its whole output and its CSV summary."""

    returncode: int
    errors: list[str]
    output: str
    csv: Path

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.errors

    @property
    def complaints(self) -> list[str]:
        """The errors that say what is wrong, without the ones that repeat them for the enclosing folder."""
        return [error for error in self.errors if not any(mark in error for mark in FOLLOW_ON_ERRORS)]

    @property
    def verdict(self) -> str:
        if lines := [line for line in self.output.splitlines() if "SUMMARY:" in line]:
            return lines[-1].split("SUMMARY:", 1)[1].strip()
        return f"no verdict: the checker stopped (exit status {self.returncode}) on {self.last_error}"

    @property
    def last_error(self) -> str:
        """Why a checker that gave no verdict stopped: the last line of its traceback (``AttributeError: ...``), else
        its last ERROR line, else its last line; the rest of the story is in its log."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        if any(line.startswith("Traceback (most recent call last)") for line in lines):
            return lines[-1]
        return (self.errors or lines or ["no output"])[-1]


def tree_digest(tree: Path) -> str:
    """sha256 of every path and file of the tree: whether it is still the tree the checker judged."""
    digest = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        digest.update(path.relative_to(tree).as_posix().encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def truncated(tree: Path) -> bool:
    """Whether every staged accuracy.txt carries the hash the truncation tool appends (a tree truncated before)."""
    accuracy_txts = sorted(tree.glob("results/*/*/*/accuracy/accuracy.txt"))
    return bool(accuracy_txts) and all(HASH_LINE.search(path.read_text()) for path in accuracy_txts)


def truncate(submitter: str, round_name: str, submission_dir: Path = SUBMISSION_DIR, work_dir: Path = WORK_DIR) -> str:
    """Run the round's truncate_accuracy_log.py in place, the originals kept under
    ``<work_dir>/<submitter>/originals``; a tree truncated before is refused."""
    tree = submission_dir / DIVISION / submitter
    originals = work_dir / submitter / "originals"
    if not any(tree.glob("results/*/*/*/accuracy/accuracy.txt")):
        raise FileNotFoundError(f"nothing staged in {tree}: make stage_results SUBMITTER={submitter} first")
    if truncated(tree):
        raise AlreadyTruncated(f"{tree} is already truncated (its accuracy.txt files carry the hash; the originals "
                               f"are in {originals / DIVISION / submitter}); nothing done. To truncate again, "
                               "stage again: make stage_results")
    log = work_dir / submitter / "truncate.log"
    returncode, output = _run_tool(round_name, ["truncate_accuracy_log.py", "--input", str(submission_dir.resolve()),
                                                "--submitter", submitter, "--backup", str(originals.resolve())], log)
    # The tool walks compliance/ too, and says so as an error when a tree has no audits yet.
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")
              and not (line.endswith(f"{DIVISION}/{submitter}/compliance") and not (tree / "compliance").exists())]
    record_tree(tree, work_dir / submitter)  # the tool's changes, even where it failed: not a hand edit
    if returncode != 0 or errors:
        lines = errors or [line for line in output.splitlines() if line.strip()] or ["no output"]
        raise ToolFailed(f"truncate_accuracy_log.py (round {round_name}) failed (exit {returncode}): "
                         f"{lines[-1].strip()}; whole log: {log}")
    return output


def check(submitter: str, round_name: str, submission_dir: Path = SUBMISSION_DIR, work_dir: Path = WORK_DIR,
          skip_compliance: bool = False) -> CheckResult:
    """Run the round's submission checker on the tree; its log and CSV summary go beside it, never inside."""
    check_dir = work_dir / submitter / "check"
    csv = check_dir / "summary.csv"
    returncode, output = _run_tool(round_name, [
        *get_round(round_name).tools.checker, "--input", str(submission_dir.resolve()), "--version", round_name,
        "--submitter", submitter, "--csv", str(csv.resolve()), *(["--skip_compliance"] if skip_compliance else [])],
        check_dir / "checker.log")
    result = CheckResult(returncode, ERROR_LINE.findall(output), output, csv)
    (check_dir / CHECK_RECORD).write_text(json.dumps({
        "round": round_name, "passed": result.passed, "verdict": result.verdict, "errors": len(result.errors),
        "tree_sha256": tree_digest(submission_dir / DIVISION / submitter)}, indent=1) + "\n")
    return result


def _run_tool(round_name: str, arguments: list[str], log: Path) -> tuple[int, str]:
    """Run one of the round's official tools from its folder; its exit status and output, which ``log`` keeps."""
    tools = submission_tools(round_name)
    log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, *arguments], cwd=tools, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr)
    return done.returncode, done.stdout + done.stderr
