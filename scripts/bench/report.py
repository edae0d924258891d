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
from scripts.bench.settings import MLPERF_DURATION_MS, TARGETS, profile_of


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


def _baseline_for(baseline: dict[str, Any] | None, case: str) -> dict[str, Any] | None:
    """The baseline figures to compare a case with: its own when the baseline timed each case (GPT-J's output
    lengths), else the baseline's one figure (BERT's, at 384 tokens)."""
    if not baseline:
        return None
    return baseline.get("by_case", {}).get(case, baseline)


def build_figures(
    benchmark: str,
    offline: list[OfflineResult],
    server: ServerSearch | None,
    single: RunOutcome | None,
    baseline: dict[str, Any] | None,
) -> list[Figure]:
    """The rows for one benchmark: throughput ratios are ours / baseline, latency's is baseline / ours.

    The targets, Server and SingleStream belong to the benchmark's first (realistic) Offline case.
    """
    profile = profile_of(benchmark)
    realistic = profile.cases[0].name

    def speedup(value: float | None, case: str) -> float | None:
        base = _baseline_for(baseline, case)
        return value / base["samples_per_second"] if value and base and base["samples_per_second"] else None

    figures: list[Figure] = []
    for result in offline:
        run = result.run
        label = profile.case(result.case).label
        target = TARGETS.get((benchmark, Scenario.Offline)) if result.case == realistic else None
        valid = run.valid if run else None
        figures.append(
            Figure(
                f"{benchmark} {label} samples/s",
                result.samples_per_second,
                "samples/s",
                valid,
                speedup(result.samples_per_second, result.case),
                _target_text(target, "samples/s"),
                _meets(result.samples_per_second, valid, target),
                "" if run and run.value is not None else "; ".join(run.reasons if run else []),
            )
        )
        figures.append(
            Figure(
                f"{benchmark} {label} tokens/s",
                result.tokens_per_second,
                "tokens/s",
                valid,
                note=_tokens_note(profile.counts_generated, run.tokens_per_sample if run else None,
                                  run.steps_per_sample if run else None),
            )
        )
    if server is not None:
        best = server.best_try()
        target = TARGETS.get((benchmark, Scenario.Server))
        figures.append(
            Figure(
                f"{benchmark} Server QPS (p99 <= {profile.server_latency_bound_ms:g} ms)",
                server.best_qps,
                "QPS",
                best is not None,
                speedup(server.best_qps, realistic),
                _target_text(target, "QPS"),
                _meets(server.best_qps, best is not None, target),
                f"{len(server.tries)} tries; {server.stopped_because}",
            )
        )
        per_sample = best.tokens_per_sample if best else None
        figures.append(
            Figure(
                f"{benchmark} Server tokens/s",
                server.best_qps * per_sample if server.best_qps and per_sample else None,
                "tokens/s",
                best is not None,
                note=_tokens_note(profile.counts_generated, per_sample),
            )
        )
    if single is not None:
        target = TARGETS.get((benchmark, Scenario.SingleStream))
        base = _baseline_for(baseline, realistic)
        ratio = base["p90_latency_ms"] / single.value if base and base["p90_latency_ms"] and single.value else None
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


def _tokens_note(counts_generated: bool, per_sample: float | None, steps_per_sample: float | None = None) -> str:
    if per_sample is None:
        return ""
    steps = f" ({steps_per_sample:.1f} decode steps a sample)" if steps_per_sample is not None else ""
    return f"x mean {per_sample:.1f} {'generated' if counts_generated else 'real input'} tokens{steps}"


def _fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"


def format_table(figures: list[Figure], baselines: dict[str, dict[str, Any]] | None) -> list[list[str]]:
    """Rows of strings: header first, then one per figure, then each baseline's own rows (one per timed case)."""
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
    for baseline in (baselines or {}).values():
        cases = baseline.get("by_case") or {"": baseline}
        for case, timed in cases.items():
            rows.append(
                [
                    f"baseline: {baseline['label']}{f' [{case}]' if case else ''} ({baseline['device']})",
                    f"{_fmt_value(timed['samples_per_second'])} samples/s",
                    "-",
                    "x1",
                    "-",
                    f"p90 {timed['p90_latency_ms']:.2f} ms",
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
    rows = format_table(figures, report.get("baselines"))
    payload = {**report, "figures": [asdict(f) for f in figures], "table": rows}
    json_path = bench_dir / "bench.json"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md = [
        f"# {report.get('title', 'BERT')} bench {report.get('date', '')}",
        "",
        f"- device: {report.get('device', '?')} (system {report.get('system', '?')})",
        f"- torch {report.get('versions', {}).get('torch', '?')}, "
        f"LoadGen {report.get('versions', {}).get('loadgen', '?')}, "
        f"commit {report.get('versions', {}).get('harness_commit', '?')}",
        f"- durations (shortened; MLPerf: {MLPERF_DURATION_MS:,} ms): {report.get('durations_text', '?')}",
        *(f"- {title} inputs: {inputs}: NOT MLPerf results" for title, inputs in report.get("inputs", {}).items()),
        *(f"- baseline: {b['what']}" for b in report.get("baselines", {}).values()),
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
