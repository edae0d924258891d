"""The closing table of a run, in the spirit of NVIDIA's "Result summaries", also saved in the log root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.constants import ExitCode
from code.common.run_logs import TestResult


def _describe(result: TestResult) -> str:
    """One test's figure, its verdict and the verdict's reasons."""
    if not result.complete:
        return "INCOMPLETE: " + "; ".join(result.invalid_reasons)
    if result.valid is None:
        return "FAILED: " + "; ".join(result.invalid_reasons)
    figure = "no figure" if result.value is None else f"{result.metric} = {result.value:,.3f} {result.unit}"
    tokens = result.extra.get("tokens_per_second")
    if tokens is not None:
        figure += f", {tokens:,.1f} tokens/s"
    if result.accuracy is not None:
        figure = result.accuracy["summary"]
    reasons = result.not_submittable if result.valid else result.invalid_reasons
    line = f"{figure}  [{result.verdict}]" + (f" ({'; '.join(reasons)})" if reasons else "")
    if not result.valid and result.not_submittable:
        line += f"; not submittable either: {'; '.join(result.not_submittable)}"
    return line


def exit_code(results: list[TestResult]) -> ExitCode:
    """A test that did not finish outranks one that is INVALID or FAIL; VALID and PASS runs exit 0."""
    if any(result.valid is None for result in results):
        return ExitCode.TEST_FAILED
    if any(result.valid is False for result in results):
        return ExitCode.INVALID
    return ExitCode.OK


def format_summary(system: str, root: Path, results: list[tuple[str, TestResult, dict[str, Any]]]) -> str:
    lines = ["", "=" * 30 + " Result summaries " + "=" * 30, f"{system}:"]
    current = None
    notes: set[str] = set()
    for benchmark_name, result, metadata in results:
        if benchmark_name != current:
            lines.append(f"  {benchmark_name}:")
            current = benchmark_name
        lines.append(f"    {result.scenario:<13} {result.mode:<16} {_describe(result)}")
        provenance = metadata.get("provenance", {})
        if result.not_submittable and provenance:
            lengths = provenance.get("input_lengths", {})
            mean = f", mean {lengths['mean']:.0f} tokens" if "mean" in lengths else ""
            notes.add(f"model: {provenance.get('model')}; inputs: {provenance.get('inputs')}{mean}; "
                      f"weights: {provenance.get('weights')}")
        if metadata.get("round"):
            notes.add(f"round {metadata['round']}, LoadGen {metadata.get('loadgen_version')}")
    for note in sorted(notes):
        lines.append(f"  NOTE {note}")
    if any(result.not_submittable for _, result, _ in results):
        lines.append("  'not submittable': as it stands, the figure is NOT an MLPerf result (reasons above and in "
                     "metadata.json).")
    code = exit_code([result for _, result, _ in results])
    if code is not ExitCode.OK:
        why = "a test did not finish" if code is ExitCode.TEST_FAILED else "a test is INVALID or FAIL"
        lines.append(f"  Exit status {code.value}: {why}.")
    lines += [f"  Logs: {root}", "=" * 78]
    return "\n".join(lines)


def write_summary(root: Path, text: str, results: list[tuple[str, TestResult, dict[str, Any]]]) -> None:
    """summary.txt and summary.json, each whole or not written (a full disk leaves no empty summary behind)."""
    atomic.write_text(root / "summary.txt", text.strip() + "\n")
    records = [{"benchmark": name, **result.to_dict()} for name, result, _ in results]
    atomic.write_text(root / "summary.json", json.dumps(records, indent=2) + "\n")
