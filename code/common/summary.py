"""The closing table of a run, in the spirit of NVIDIA's "Result summaries", also saved in the log root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from code.common.run_logs import TestResult


def _describe(result: TestResult) -> str:
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
        verdict = "PASS" if result.accuracy["passed"] else "FAIL"
    else:
        verdict = "VALID" if result.valid else "INVALID"
    reasons = f" ({'; '.join(result.invalid_reasons)})" if result.invalid_reasons else ""
    return f"{figure}  [{verdict}]{reasons}"


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
        if provenance.get("invalid_because"):
            lengths = provenance.get("input_lengths", {})
            mean = f", mean {lengths['mean']:.0f} tokens" if "mean" in lengths else ""
            notes.add(f"inputs: {provenance.get('inputs')}{mean}; weights: {provenance.get('weights')}")
    for note in sorted(notes):
        lines.append(f"  NOTE {note}")
    if notes:
        lines.append("  These figures are NOT valid MLPerf results (reasons in brackets above and in metadata.json).")
    lines += [f"  Logs: {root}", "=" * 78]
    return "\n".join(lines)


def write_summary(root: Path, text: str, results: list[tuple[str, TestResult, dict[str, Any]]]) -> None:
    (root / "summary.txt").write_text(text.strip() + "\n")
    records = [{"benchmark": name, **result.to_dict()} for name, result, _ in results]
    (root / "summary.json").write_text(json.dumps(records, indent=2) + "\n")
