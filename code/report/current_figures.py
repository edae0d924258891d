"""The Current figures table of documentation/performance.md, generated from its records.

The records (documentation/figures/current.csv) hold one row per workload, device and GPU count, with the id of the
journal entry that tells how it was reached (documentation/notes/journal/). The table is written from them, never by
hand, so a row cannot say something its record does not. A new measurement enters by command: ``add_run`` reads a run
folder's finished performance tests and adds or replaces their rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from code.common import atomic
from code.common.cli import exits_on
from code.common.constants import TestMode
from code.common.paths import REPO_ROOT
from code.common.systems import gpu_model_and_count
from code.mlperf.run_logs import FIRST_TOKEN_METRIC
from code.report.results import csv_text, started
from code.submission.runs import TestRun, find_tests

RECORDS = REPO_ROOT / "documentation" / "figures" / "current.csv"
PAGE = REPO_ROOT / "documentation" / "performance.md"
JOURNAL = REPO_ROOT / "documentation" / "notes" / "journal"
# How a journal entry defines the id that the records and the config classes cite: a line of its own.
ID_LINE = re.compile(r"^Measurement id: `([a-z0-9][a-z0-9.-]*)`", re.MULTILINE)
HEADING = "## Current figures"
HEADER = "| workload | device | GPUs | figure | unit | verdict | date | command | measurement |"
SCENARIOS = ("Offline", "Server", "SingleStream")  # the table's order within a benchmark


class FiguresError(RuntimeError):
    """Records or a run folder that give no table or row; the message names the fix."""


@dataclass(frozen=True)
class Row:
    """One row of the table, as the records hold it: numbers as shown, without thousands separators."""

    benchmark: str  # bert-99, gptj-99.9
    scenario: str  # Offline, Server, SingleStream
    device: str  # H200, H100, "H200 as A100 40GB", CPU
    gpus: int
    figure: str  # 8488, 43.99, 1.147
    unit: str  # samples/s, scheduled samples/s, ms
    verdict: str  # LoadGen's: VALID, INVALID
    date: str  # YYYY-MM-DD, when the test started
    command: str
    measurement: str  # the journal's id of the entry that tells how the figure was reached
    note: str = ""  # what the figure is besides its number: p90, int8, "bf16, 34 slots"
    watts: str = ""  # the GPUs' mean power over the timed part, where it was read
    samples_per_joule: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What "the same row" means: a newer measurement of this key replaces the older."""
        return self.benchmark, self.scenario, self.device, self.gpus

    def cell(self) -> str:
        """The figure as the table shows it: ``8,488 (690 W: 12.3 samples/J)``, ``1.147 (p90; 272 W)``."""
        power = f"{thousands(self.watts)} W" if self.watts else ""
        if power and self.samples_per_joule:
            power += f": {self.samples_per_joule} samples/J"
        extras = "; ".join(part for part in (self.note, power) if part)
        return thousands(self.figure) + (f" ({extras})" if extras else "")

    def line(self, ids: dict[str, Path]) -> str:
        day = ids[self.measurement].name
        return (f"| {self.benchmark} {self.scenario} | {self.device} | {self.gpus} | {self.cell()} | {self.unit} | "
                f"{self.verdict} | {self.date} | `{self.command}` | [{self.measurement}](notes/journal/{day}) |")


COLUMNS = tuple(f.name for f in fields(Row))


def thousands(number: str) -> str:
    """``16821.5`` -> ``16,821.5``: separators in the integer part, the decimals kept as written."""
    whole, dot, decimals = number.partition(".")
    return f"{int(whole):,}{dot}{decimals}" if whole.lstrip("-").isdigit() else number


def read_rows(path: Path = RECORDS) -> list[Row]:
    """The records; FiguresError naming the file and line of a row that does not read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise FiguresError(f"cannot read the figures' records {path} ({error.strerror})") from None
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise FiguresError(f"{path}: the header must be {','.join(COLUMNS)}")
    rows = []
    for number, record in enumerate(reader, start=2):
        try:
            rows.append(Row(**{**record, "gpus": int(record["gpus"])}))
        except (TypeError, ValueError):
            raise FiguresError(f"{path}:{number}: gpus must be a whole number, got {record.get('gpus')!r}") from None
    return rows


def ordered(rows: list[Row]) -> list[Row]:
    """The order the table is read in: devices as they first appear in the records, benchmark, scenario, GPUs."""
    devices: dict[str, int] = {}
    for row in rows:
        devices.setdefault(row.device, len(devices))
    rank = {scenario: index for index, scenario in enumerate(SCENARIOS)}
    return sorted(rows, key=lambda r: (devices[r.device], r.benchmark, rank.get(r.scenario, len(rank)), r.gpus))


def journal_ids(journal: Path = JOURNAL) -> dict[str, Path]:
    """Each measurement id the journal defines and the day's file; an id defined twice is an error (a citation leads
    to one)."""
    ids: dict[str, Path] = {}
    for day in sorted(journal.glob("*.md")):
        for name in ID_LINE.findall(day.read_text(encoding="utf-8")):
            if name in ids:
                raise FiguresError(f"measurement id {name} is defined in {ids[name].name} and {day.name}: rename one")
            ids[name] = day
    return ids


def table(rows: list[Row], ids: dict[str, Path]) -> str:
    undefined = sorted({row.measurement for row in rows} - set(ids))
    if undefined:
        raise FiguresError(f"no journal entry defines measurement id(s) {', '.join(undefined)}: add a line "
                           "'Measurement id: `<id>`' under the entry of documentation/notes/journal/ that tells how "
                           "the figure was reached")
    return "\n".join([HEADER, "| " + " | ".join("---" for _ in HEADER.strip("|").split("|")) + " |",
                      *(row.line(ids) for row in ordered(rows))])


def render(page: str, rows: list[Row], ids: dict[str, Path]) -> str:
    """``page`` with the table under its Current figures heading replaced by the one the rows make."""
    lines = page.split("\n")
    try:
        start = lines.index(HEADING)
        first = next(i for i in range(start, len(lines)) if lines[i].startswith("| workload |"))
    except (ValueError, StopIteration):
        raise FiguresError(f"the page has no table under '{HEADING}' to replace; it starts with '| workload |'") \
            from None
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join([*lines[:first], table(rows, ids), *lines[end:]])


def add_run(rows: list[Row], run_folder: Path, measurement: str, command: str | None = None,
            device: str | None = None) -> tuple[list[Row], list[Row]]:
    """The rows with the run's finished performance tests replacing the rows of their keys, and the new rows."""
    if not run_folder.is_dir():
        raise FiguresError(f"{run_folder} is not a folder: give a run's folder, e.g. build/logs/<timestamp>")
    tests = [test for test in find_tests([run_folder]).tests if test.mode is TestMode.PerformanceOnly]
    new = [row_of(test, measurement, command, device) for test in tests
           if test.record.result_dict.get("value") is not None and test.record.result.valid is not None]
    if not new:
        raise FiguresError(f"{run_folder} holds no finished performance test with a figure: run one first, e.g. "
                           'make run RUN_ARGS="--benchmarks=bert --scenarios=offline --test_run"')
    keys = {row.key for row in new}
    return ordered([*(row for row in rows if row.key not in keys), *new]), new


def row_of(test: TestRun, measurement: str, command: str | None = None, device: str | None = None) -> Row:
    """A test's row: its figure to four significant digits (whole numbers from 1,000 up), its power in whole watts
    where it was read, and the command that measures it again unless ``command`` says it."""
    record = test.record
    result = record.result_dict
    power = record.power or {}
    metric = str(result.get("metric") or "")
    return Row(benchmark=test.benchmark, scenario=test.scenario, device=device or device_label(test),
               gpus=record.gpu_count, figure=shown(float(result["value"])),
               unit="scheduled samples/s" if metric.startswith("scheduled") else str(result.get("unit") or ""),
               verdict="VALID" if result.get("valid") else "INVALID",
               date=time.strftime("%Y-%m-%d", time.localtime(started(test.directory))),
               command=command or rerun_command(test), measurement=measurement,
               note=("TTFT p90" if metric == FIRST_TOKEN_METRIC else "p90") if metric.startswith("90th") else "",
               watts=str(round(power["mean_w"])) if power.get("mean_w") else "",
               samples_per_joule=f"{power['samples_per_joule']:.3g}" if power.get("samples_per_joule") else "")


def shown(value: float) -> str:
    """Four significant digits, and whole numbers from 1,000 up: 8488, 43.99, 1.147."""
    return str(round(value)) if abs(value) >= 1000 else f"{value:.4g}"


def device_label(test: TestRun) -> str:
    """The device as the table names it: the GPU model's first word (``H200`` of ``H200_SXM_141GBx1``), ``<GPU> as
    <model>`` for a stand-in run (``--gpu_as``), the system's name for a system without a GPU count (``CPU``)."""
    system = test.record.system_name or test.system
    parts = gpu_model_and_count(system)
    if test.record.stand_in:
        gpus = (test.record.data.get("system") or {}).get("gpus") or [{}]
        real = re.sub(r"^NVIDIA\s+", "", str(gpus[0].get("name") or "?")).split()[0]
        words = test.record.stand_in.split("_")
        return f"{real} as {words[0]} {words[-1]}"
    return parts[0].split("_")[0] if parts else system


def rerun_command(test: TestRun) -> str:
    """``make run RUN_ARGS="..."`` that measures the row's figure again: what the run's RUN_ARGS gave."""
    given = [f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
             for name, value in test.record.given().items()]
    words = [f"--benchmarks={test.benchmark}", f"--scenarios={test.scenario.lower()}", *given]
    return f'make run RUN_ARGS="{" ".join(words)}"'


@exits_on(FiguresError)
def main(argv: list[str] | None = None) -> int:
    """``make figures``: write the table from the records; ``--check`` only compares (exit 1 when the page differs);
    ``--add <run folder> --measurement <id>`` first adds or replaces the run's rows in the records."""
    parser = argparse.ArgumentParser(prog="python -m code.report.current_figures", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page's table differs from the records")
    parser.add_argument("--add", type=Path, metavar="RUN", help="a run folder whose performance tests become rows")
    parser.add_argument("--measurement", help="the journal's id of the entry that tells of the run (with --add)")
    parser.add_argument("--command", help="the row's command, when not the make run the record implies (with --add)")
    parser.add_argument("--device", help="the row's device, when not the GPU model's first word (with --add)")
    parser.add_argument("--records", type=Path, default=RECORDS, help=argparse.SUPPRESS)
    parser.add_argument("--page", type=Path, default=PAGE, help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, default=JOURNAL, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = read_rows(args.records)
    if args.add is not None:
        if not args.measurement:
            raise FiguresError("--add needs --measurement=<id>: the id a journal entry defines for this run "
                               "(make figures ADD=<run folder> MEASUREMENT=<id>)")
        # Checked before the records change: a failed add writes nothing.
        if args.measurement not in journal_ids(args.journal):
            raise FiguresError(f"no journal entry defines measurement id {args.measurement}: add a line "
                               f"'Measurement id: `{args.measurement}`' under its entry in {args.journal}")
        rows, new = add_run(rows, args.add, args.measurement, args.command, args.device)
        atomic.write_text(args.records, csv_text(COLUMNS, (astuple(row) for row in ordered(rows))))
        print("\n".join(f"[figures] {row.benchmark} {row.scenario}, {row.device} x{row.gpus}: {row.cell()} "
                        f"{row.unit} {row.verdict}" for row in new))
    page = args.page.read_text(encoding="utf-8")
    rendered = render(page, rows, journal_ids(args.journal))
    if args.check and rendered != page:
        print(f"ERROR: the Current figures table of {args.page} differs from {args.records}: run make "
              "figures and commit both", file=sys.stderr)
        return 1
    if not args.check:
        if rendered != page:
            atomic.write_text(args.page, rendered)
        print(f"[figures] {args.page}: {'table written' if rendered != page else 'table unchanged'} "
              f"({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
