"""Figures and reports: the closing table (value, VALID, ratio to the baseline, target) and bench.json/bench.md.

Why separate: the reports are rewritten after every step, so an interrupted bench keeps what it measured.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from code.common.constants import Scenario
from scripts.bench.runs import OfflineResult, RunOutcome
from scripts.bench.server_search import ServerSearch
from scripts.bench.settings import MLPERF_DURATION_MS, SERVER_LATENCY_BOUND_MS, TARGETS


@dataclass
class Figure:
    """One row of the closing table."""

    name: str
    value: float | None
    unit: str
    valid: bool | None
    ratio: float | None = None  # our figure vs the baseline's (higher is better)
    target: str | None = None  # e.g. ">= 9,300"
    meets: bool | None = None
    note: str = ""


def _meets(value: float | None, valid: bool | None, target: tuple[str, float] | None) -> bool | None:
    if target is None:
        return None
    if value is None:
        return False
    op, bound = target
    return bool(valid) and (value >= bound if op == ">=" else value <= bound)


def _target_text(target: tuple[str, float] | None, unit: str) -> str | None:
    return None if target is None else f"{target[0]} {target[1]:,g} {unit}"


def build_figures(
    benchmark: str,
    offline: OfflineResult | None,
    worst: OfflineResult | None,
    server: ServerSearch | None,
    single: RunOutcome | None,
    baseline: dict[str, Any] | None,
) -> list[Figure]:
    """The rows for one benchmark: throughput ratios are ours / baseline, latency's is baseline / ours."""
    base_qps = baseline["samples_per_second"] if baseline else None
    base_p90 = baseline["p90_latency_ms"] if baseline else None

    def speedup(value: float | None) -> float | None:
        return value / base_qps if value and base_qps else None

    figures: list[Figure] = []
    for result, label in ((offline, "Offline"), (worst, "Offline @384 tokens (worst case)")):
        if result is None:
            continue
        run = result.run
        target = TARGETS.get((benchmark, Scenario.Offline)) if result.lengths == "dataset" else None
        valid = run.valid if run else None
        figures.append(
            Figure(
                f"{benchmark} {label} samples/s",
                result.samples_per_second,
                "samples/s",
                valid,
                speedup(result.samples_per_second),
                _target_text(target, "samples/s"),
                _meets(result.samples_per_second, valid, target),
                "" if run and run.value is not None else "; ".join(run.reasons if run else []),
            )
        )
        mean = run.mean_length if run else None
        figures.append(
            Figure(
                f"{benchmark} {label} tokens/s",
                result.tokens_per_second,
                "tokens/s",
                valid,
                note=f"x mean {mean:.1f} real tokens" if mean else "",
            )
        )
    if server is not None:
        best = server.best_try()
        target = TARGETS.get((benchmark, Scenario.Server))
        figures.append(
            Figure(
                f"{benchmark} Server QPS (p99 <= {SERVER_LATENCY_BOUND_MS:g} ms)",
                server.best_qps,
                "QPS",
                best is not None,
                speedup(server.best_qps),
                _target_text(target, "QPS"),
                _meets(server.best_qps, best is not None, target),
                f"{len(server.tries)} tries; {server.stopped_because}",
            )
        )
    if single is not None:
        target = TARGETS.get((benchmark, Scenario.SingleStream))
        ratio = base_p90 / single.value if base_p90 and single.value else None
        figures.append(
            Figure(
                f"{benchmark} SingleStream p90 latency",
                single.value,
                "ms",
                single.valid,
                ratio,
                _target_text(target, "ms"),
                _meets(single.value, single.valid, target),
                "LoadGen early-stopping estimate",
            )
        )
    return figures


def _fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"


def format_table(figures: list[Figure], baseline: dict[str, Any] | None) -> list[list[str]]:
    """Rows of strings: header first, then one per figure, then the baseline's own row."""
    rows = [["figure", "value", "VALID", "vs baseline", "target", "meets"]]
    for f in figures:
        valid = "-" if f.valid is None else ("yes" if f.valid else "NO")
        meets = "-" if f.meets is None else ("yes" if f.meets else "NO")
        rows.append(
            [
                f.name,
                f"{_fmt_value(f.value)} {f.unit}" if f.value is not None else "-",
                valid,
                f"x{f.ratio:,.2f}" if f.ratio else "-",
                f.target or "-",
                meets,
            ]
        )
    if baseline:
        rows.append(
            [
                f"baseline: HF BertForQuestionAnswering fp32 b1 @384 ({baseline['device']})",
                f"{_fmt_value(baseline['samples_per_second'])} samples/s",
                "-",
                "x1",
                "-",
                f"p90 {baseline['p90_latency_ms']:.2f} ms",
            ]
        )
    return rows


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def render_markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def write_reports(
    bench_dir: Path, report: dict[str, Any], figures: list[Figure], out: Path | None = None
) -> tuple[Path, Path]:
    """bench.json (everything) and bench.md (the table and how it was made); copies into ``out`` if given."""
    rows = format_table(figures, report.get("baseline"))
    payload = {**report, "figures": [asdict(f) for f in figures], "table": rows}
    json_path = bench_dir / "bench.json"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md = [
        f"# BERT bench {report.get('date', '')}",
        "",
        f"- device: {report.get('device', '?')} (system {report.get('system', '?')})",
        f"- torch {report.get('versions', {}).get('torch', '?')}, "
        f"LoadGen {report.get('versions', {}).get('loadgen', '?')}, "
        f"commit {report.get('versions', {}).get('harness_commit', '?')}",
        f"- durations (shortened; MLPerf: {MLPERF_DURATION_MS:,} ms): {report.get('durations_text', '?')}",
        "- inputs: synthetic SQuAD-like lengths and random weights: NOT MLPerf results",
        "",
        render_markdown(rows),
        "",
    ]
    for name, search in report.get("server_search", {}).items():
        md += [
            f"## Server search, {name}",
            "",
            f"stopped: {search['stopped_because']}",
            "",
            "| target QPS | result | p99 ms | reasons |",
            "|---|---|---|---|",
        ]
        for t in search["tries"]:
            verdict = "FAILED" if t["valid"] is None else ("VALID" if t["valid"] else "INVALID")
            p99 = f"{t['p99_ms']:.1f}" if t["p99_ms"] is not None else "-"
            md.append(f"| {t['target_qps']:g} | {verdict} | {p99} | {'; '.join(t['reasons']) or '-'} |")
        md.append("")
    md += ["## Runs", ""]
    for run in report.get("runs", []):
        settings = run.get("settings") or {}
        shown = ", ".join(f"{k} {settings[k]}" for k in ("precision", "gpu_batch_size", "num_workers") if k in settings)
        reasons = "; ".join(r for r in run.get("reasons", []) if not r.startswith("not a valid MLPerf result"))
        md.append(
            f"- `{Path(run['log_dir']).name}`: {run['verdict']} {run['value']} {run['unit'] or ''} "
            f"({run['seconds']} s{', ' + shown if shown else ''}){' - ' + reasons if reasons else ''}\n"
            f"  `{run['command']}`"
        )
    md_path = bench_dir / "bench.md"
    md_path.write_text("\n".join(md) + "\n")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for path in (json_path, md_path):
            shutil.copy(path, out / path.name)
    return json_path, md_path
