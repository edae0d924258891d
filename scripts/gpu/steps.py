"""The step loop and summary the GPU check scripts share: GPU time is scarce, so one failing step must not lose
the figures of the others."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any


def run_steps(
    steps: list[tuple[str, Callable[[], None]]],
    skip: set[str],
    details: dict[str, Any],
    rows: list[str],
    save: Callable[[], None],
) -> None:
    """Run each named step not in ``skip``; time it into ``details["step_s"]``; a failure is printed with its
    traceback and noted in ``rows`` (the short table printed last); ``save`` writes the results after every step."""
    for name, step in steps:
        if name in skip:
            continue
        started = time.perf_counter()
        try:
            step()
        except Exception as error:  # keep going: the other steps' numbers still matter
            traceback.print_exc()
            rows.append(f"{name}: FAILED {type(error).__name__}: {str(error)[:300]}")
        details.setdefault("step_s", {})[name] = round(time.perf_counter() - started, 1)
        save()


def print_summary(script: str, details: dict[str, Any], rows: list[str], extra: str) -> None:
    """Print the run's heading (script, date, GPU, torch, ``extra``, each step's seconds), then ``rows``: the one
    table a reader of the console log looks for, after the steps' own output."""
    print(f"\n=== {script} {details['date']} {details['device']} torch {details['torch']} {extra} "
          f"steps {details.get('step_s')}")
    print("\n".join(rows))


def result_rows(rows: list[str], results: dict[str, dict[str, Any]], width: int, row: Callable[[str, dict], str],
                cut: int = 150) -> None:
    """Append one table row per result: ``row(name, result)``, or for a failed case (an "error" entry) its name,
    FAILED and the error cut to ``cut`` characters, so one broken case reads as such beside the others' figures."""
    for name, result in results.items():
        rows.append(f"  {name:<{width}} FAILED {result['error'][:cut]}" if "error" in result else row(name, result))
