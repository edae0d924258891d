"""``make check_system_json``: check a system's description as the round's submission checker will.

Loads ``systems/<system>.json`` with its user file and the submitter (``code/common/system_description.py``), then
names every field the checker would reject or that holds a placeholder, and where to set it. Also says which
scenarios the round requires of each benchmark for the description's system_type (no --round: each benchmark's
default round there, the newest that accepts it and builds from PyPI). Exit status 0 when the
description would pass, 1 when a field is missing, and 2 for a file that cannot be read.

Usage: ``python -m scripts.check_system_json [--system_name NAME ...] [--round v6.1] [--submitter ORG]
[--systems_dir DIR]`` (default: the detected system; SUBMITTER in the environment works as --submitter)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from code.common.rounds import ROUNDS, SYSTEM_TYPES, RoundError, default_scenarios, get_round
from code.common.system_description import (
    SUBMITTER_ENV,
    DescriptionFiles,
    SystemDescriptionError,
    description_problems,
    load_description,
    shown,
    unknown_fields,
)
from code.common.systems import detect_system

BENCHMARKS = ("bert-99", "bert-99.9", "gptj-99", "gptj-99.9", "llama3.1-8b")


def default_coverage(system_type: str) -> list[str]:
    """Each benchmark's default round on this system type and what it requires there, or why none is the default."""
    lines = []
    for benchmark in BENCHMARKS:
        try:
            round_name, scenarios = default_scenarios(benchmark, system_type)
        except RoundError as error:
            lines.append(f"{benchmark}: {error}")
        else:
            lines.append(f"{benchmark}: {round_name}, {', '.join(s.value for s in scenarios)}")
    return lines


def round_coverage(system_type: str, round_name: str) -> list[str]:
    """What the round requires of each benchmark on this system type, or that it takes none."""
    try:
        round_ = get_round(round_name)
        lines = []
        for benchmark in BENCHMARKS:
            scenarios = round_.scenarios_for(system_type, benchmark)
            taken = ", ".join(s.value for s in scenarios) if scenarios else f"none on {system_type} systems"
            lines.append(f"{benchmark}: {taken}")
        return lines
    except RoundError as error:
        return [str(error)]


def check(system: str, round_name: str, submitter: str | None, systems_dir: Path | None) -> list[str]:
    """The problems of one system's description (empty: it passes), after printing its state."""
    files = DescriptionFiles.of(system, systems_dir)
    description = load_description(system, systems_dir, submitter)
    problems = description_problems(description, files)
    source = shown(files.base) + (f" + {files.user.name}" if files.user.is_file() else "")
    checker = f"the round {round_name} checker" if round_name else "the checker"
    if problems:
        print(f"[check_system_json] {system}: FAIL, {len(problems)} field(s) {checker} would reject ({source}):")
        for problem in problems:
            print(f"  {problem}")
    else:
        print(f"[check_system_json] {system}: OK, every field {checker} requires ({source})")
    for name in unknown_fields(description):
        print(f"  warning: {name} is not a field of the checker's (it warns); misspelt?")
    kind = str(description.get("system_type", ""))
    if round_name:
        required = "; ".join(round_coverage(kind, round_name))
        print(f"  round {round_name} requires, of {kind or '?'} systems: {required}")
    else:
        coverage = default_coverage(kind) if kind in SYSTEM_TYPES else [f"system_type {kind or '?'} is not one of "
                                                                        f"{', '.join(SYSTEM_TYPES)}"]
        print(f"  each benchmark's default round, and what it requires, of {kind or '?'} systems: "
              + "; ".join(coverage))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system_name", action="append", help="system to check (repeatable; default: detected)")
    parser.add_argument("--round", default="", choices=["", *ROUNDS],
                        help="default: each benchmark's default round on the system's type")
    parser.add_argument("--submitter", default=os.environ.get(SUBMITTER_ENV), help="default: $SUBMITTER")
    parser.add_argument("--systems_dir", type=Path, default=None, help="default: systems/ of the repository")
    args = parser.parse_args(argv)
    status = 0
    for system in args.system_name or [detect_system().name]:
        try:
            if check(system, args.round, args.submitter, args.systems_dir):
                status = max(status, 1)
        except SystemDescriptionError as error:
            print(f"[check_system_json] {system}: ERROR: {error}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
