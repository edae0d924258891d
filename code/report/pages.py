"""``report.md`` for one test (beside its logs) and for a whole invocation (at its log root)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common.atomic import write_text
from code.common.constants import SERVER_LATENCY_BOUND_NS, Benchmark
from code.harness.core import SAMPLE_TIMES_FILE, SampleTimes
from code.mlperf.beside_published import beside_published
from code.mlperf.run_logs import read_detail_log, run_test_parts
from code.mlperf.run_record import RunRecordError, read_record, record_path
from code.mlperf.summary import figure_notes
from code.report.figures import PERCENTILES, SampleStats, draw_latency, draw_timeline, sample_stats

REPORT_FILE = "report.md"
LATENCY_PNG = "latency.png"
TIMELINE_PNG = "timeline.png"


class ReportError(RuntimeError):
    """A folder that holds no test to report on; the message names what is missing."""


@dataclass(frozen=True)
class TestReport:
    folder: Path
    title: str
    verdict: str
    figure: str  # the test's metric as the summary states it
    stats: SampleStats | None  # None: no sample_times.npz (a run from before the core kept it)
    published: str = "-"  # the figure beside the best published one per GPU (``Beside.cell``)


def latency_bound_ms(benchmark: str, scenario: str) -> float | None:
    """Server's bound; the other scenarios have none (SingleStream's figure is its p90, not a bound), nor has
    llama3.1-8b's Server (its limits are per token)."""
    bound_ns = SERVER_LATENCY_BOUND_NS.get(Benchmark.parse(benchmark)[0]) if scenario == "Server" else None
    return None if bound_ns is None else bound_ns / 1e6


def _figure(result: dict[str, Any]) -> str:
    value = result.get("value")
    if value is None:
        return "no figure"
    return f"{result.get('metric', 'value')} = {value:,.4g} {result.get('unit', '')}".rstrip()


def write_test_report(folder: Path, draw: bool = True) -> TestReport:
    """Write ``report.md`` in a test's folder, with its plots (kept if they exist and not ``draw``)."""
    if not record_path(folder).is_file():
        raise ReportError(f"{folder} holds no metadata.json: not a test folder of a run (build/logs/<ts>/...)")
    try:
        record = read_record(folder)
    except RunRecordError as error:
        raise ReportError(f"{error}; the run did not finish writing it") from None
    result = record.result_dict
    benchmark = record.benchmark or "?"
    scenario, mode = result.get("scenario", "?"), result.get("mode", "?")
    title = f"{record.system_name or '?'} {benchmark} {scenario} {mode}"
    if record.role:  # a --test_run's probe: the test's query was sized from it, its figure is not the test's
        title += f" ({record.role})"
    verdict = result.get("verdict") or ("VALID" if result.get("valid") else "INVALID")
    reasons = result.get("invalid_reasons", [])
    lines = [f"# {title}", "", f"- verdict: **{verdict}**" + (f" ({'; '.join(reasons)})" if reasons else ""),
             f"- {_figure(result)}"]
    lines += [f"- {note}" for note in figure_notes(record, host=True)]
    if not_submittable := result.get("not_submittable"):
        lines.append(f"- not submittable: {'; '.join(not_submittable)}")
    provenance = record.provenance
    lines += [f"- model: {provenance.get('model', '?')}; inputs: {provenance.get('inputs', '?')}",
              f"- round {record.round or '?'}, LoadGen {record.loadgen_version or '?'}", ""]
    stats = None
    times_path = folder / SAMPLE_TIMES_FILE
    if times_path.is_file():
        times = SampleTimes.load(times_path)
        stats = sample_stats(times)
        bound = latency_bound_ms(benchmark, scenario)
        drawn = (folder / LATENCY_PNG).is_file() and (folder / TIMELINE_PNG).is_file()
        if stats.samples and (draw or not drawn):
            draw_latency(times, stats, bound, title, folder / LATENCY_PNG)
            draw_timeline(times, scenario, bound, title, folder / TIMELINE_PNG)
        lines += _stats_table(stats, read_detail_log(folder), bound) + _device_table(times.per_device())
    else:
        lines.append(f"No {SAMPLE_TIMES_FILE} in this folder (the run predates it): LoadGen's figures only.")
    lines += _power_table(record.power)
    if stats and stats.samples:
        lines += ["", f"![latency]({LATENCY_PNG})", "", f"![timeline]({TIMELINE_PNG})"]
    write_text(folder / REPORT_FILE, "\n".join(lines) + "\n")
    beside = beside_published(record)
    return TestReport(folder, title, verdict, _figure(result), stats, beside.cell() if beside else "-")


def _stats_table(stats: SampleStats, detail: dict[str, Any], bound_ms: float | None) -> list[str]:
    """The core's figures beside LoadGen's own (they should agree: both time the same samples)."""
    rows = ["| | harness record | LoadGen |", "| --- | --- | --- |",
            f"| samples | {stats.samples:,} | {detail.get('result_query_count', '-')} queries |",
            f"| duration | {stats.duration_s:,.1f} s | |",
            f"| samples/s | {stats.samples_per_s:,.2f} | |",
            f"| mean latency | {stats.mean_ms:,.2f} ms | {_ms(detail.get('result_mean_latency_ns'))} |"]
    for p in PERCENTILES:
        rows.append(f"| p{p:g} latency | {stats.percentiles_ms[p]:,.2f} ms | "
                    f"{_ms(detail.get(f'result_{p:.2f}_percentile_latency_ns'))} |")
    rows.append(f"| batches (completion calls) | {stats.batches:,}, mean {stats.mean_batch:,.1f} samples | |")
    if bound_ms is not None:
        rows.append(f"| latency bound | {bound_ms:,.0f} ms | |")
    return rows


def _device_table(rows: list[dict[str, Any]]) -> list[str]:
    """Each device's samples and rate, with several devices: the work stealing should give them even shares of
    the time, so a device far below the others is slower or was starved."""
    if len(rows) < 2:
        return []
    tokens = all("input_tokens" in row for row in rows)
    return ["", "| device | samples | samples/s | share |" + (" input tokens |" if tokens else ""),
            "| --- | --- | --- | --- |" + (" --- |" if tokens else ""),
            *(f"| {row['device']} | {row['samples']:,} | {row['samples_per_s']:,.2f} | {row['share']:.1%} |"
              + (f" {row['input_tokens']:,} |" if tokens else "") for row in rows)]


def _power_table(power: dict[str, Any] | None) -> list[str]:
    """Each GPU's power over the timed part, with several GPUs: one that draws less than the others while doing
    as much work is the more efficient, one that draws less and does less was starved."""
    gpus = (power or {}).get("gpus") or []
    if len(gpus) < 2:
        return []
    table = ["", "| GPU | mean W | max W | limit W | energy J | SM clock MHz (median) | throttled by |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for gpu in gpus:
        reasons = gpu.get("throttle_reasons")
        ranked = sorted((reasons or {}).items(), key=lambda item: -item[1])
        throttled = "-" if reasons is None else ", ".join(f"{name} {share:.0%}" for name, share in ranked)
        table.append(f"| {gpu['device']} | {gpu['mean_w']:,.0f} | {gpu['max_w']:,.0f} | {_or_dash(gpu['limit_w'])} | "
                     f"{gpu['energy_j']:,.0f} | {_or_dash(gpu['sm_clock_mhz_median'])} | {throttled or 'none'} |")
    return table


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ms(nanoseconds: Any) -> str:
    return "-" if nanoseconds is None else f"{float(nanoseconds) / 1e6:,.2f} ms"


def test_folders(root: Path) -> tuple[list[Path], list[Path]]:
    """The folders under a run root that hold a test (metadata.json and LoadGen's detail log), sorted: the run's own
    tests, and the steps that led to them (``run_test_parts``)."""
    folders = sorted(p.parent for p in root.rglob("metadata.json") if (p.parent / "mlperf_log_detail.txt").is_file())
    tests = [folder for folder in folders if run_test_parts(folder, root) is not None]
    return tests, [folder for folder in folders if folder not in tests]


STEPS_NOTE = ("Steps that led to the tests, not results of the run: a --test_run's probes (they size its query), "
              "find_performance's tries, engines the accuracy gate set aside.")


def write_run_report(root: Path, redraw: bool = True) -> Path:
    """Each test's report, then ``root/report.md``: a row per test, their plots side by side, and the steps in a
    table of their own. ``redraw`` False keeps plots a test already drew."""
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder; give a run's log folder, e.g. LOG_DIR=build/logs/<timestamp>")
    tests, steps = test_folders(root)
    if not tests and not steps:
        raise ReportError(f"no test folder under {root} (none holds metadata.json and mlperf_log_detail.txt)")
    reports = [write_test_report(folder, draw=redraw) for folder in tests]
    lines = [f"# Run report: {root.name}", ""]
    lines += _report_table(root, reports) if reports else ["No test of the run itself: only the steps below."]
    drawn = [r for r in reports if r.stats and r.stats.samples]
    if drawn:
        lines += ["", "| " + " | ".join(r.title for r in drawn) + " |", "|" + " --- |" * len(drawn)]
        for image in (LATENCY_PNG, TIMELINE_PNG):
            cells = [f"![{image}]({r.folder.relative_to(root) / image})" for r in drawn]
            lines.append("| " + " | ".join(cells) + " |")
    if steps:
        lines += ["", "## Steps", "", STEPS_NOTE, ""]
        lines += _report_table(root, [write_test_report(folder, draw=redraw) for folder in steps], by_folder=True)
    path = root / REPORT_FILE
    write_text(path, "\n".join(lines) + "\n")
    return path


def _report_table(root: Path, reports: list[TestReport], by_folder: bool = False) -> list[str]:
    """One row per report, linking it by its title (``by_folder``: by its folder, which tells the steps apart)."""
    lines = ["| test | verdict | figure | vs best published | samples | p50 / p90 / p99 (ms) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for report in reports:
        folder = report.folder.relative_to(root)
        percentiles = (" / ".join(f"{report.stats.percentiles_ms[p]:,.1f}" for p in PERCENTILES)
                       if report.stats and report.stats.samples else "-")
        samples = f"{report.stats.samples:,}" if report.stats else "-"
        label = folder.as_posix() if by_folder else report.title
        lines.append(f"| [{label}]({folder / REPORT_FILE}) | {report.verdict} | {report.figure} | {report.published} | "
                     f"{samples} | {percentiles} |")
    return lines
