"""Two runs side by side (``make results COMPARE=<a>,<b>``): each result of either run, its figure in both and the ratio
b / a, as a table and a CSV file.

Results match when system, benchmark, scenario, GPU count, test (performance, accuracy) and model are the same; within
one run the newest test of each is taken. A result only one run has shows ``-`` for the other, and no ratio; so do
figures in different units. The ratio is b's figure over a's: above 1 means b's is higher (for a throughput, faster; for
SingleStream's latency in ms, slower).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from code.common import atomic
from code.report.results import Result, ResultsError, csv_text, format_figure, format_table, run_results, shown_path

COMPARE_CSV = "results_compare.csv"
CSV_COLUMNS = ("system", "benchmark", "scenario", "gpus", "test", "model", "unit", "figure_a", "figure_b",
               "ratio_b_over_a", "verdict_a", "verdict_b")


@dataclass(frozen=True)
class Comparison:
    """One result of either run, with each run's test (None: that run has none)."""

    key: tuple[str, str, str, int, str, str]
    a: Result | None
    b: Result | None

    @property
    def unit(self) -> str:
        units = {result.unit for result in (self.a, self.b) if result is not None}
        return units.pop() if len(units) == 1 else " / ".join(sorted(units))

    @property
    def ratio(self) -> float | None:
        """b's figure over a's; None without both figures, in one unit, a's non-zero."""
        if self.a and self.b and self.a.unit == self.b.unit and self.a.figure and self.b.figure is not None:
            return self.b.figure / self.a.figure
        return None

    def verdicts(self, missing: str) -> tuple[str, str]:
        return tuple(side.verdict if side else missing for side in (self.a, self.b))  # type: ignore[return-value]


def resolve_run(name: str, logs_dir: Path) -> Path:
    """A run folder as given, or by its name under ``logs_dir`` (``2026.11.26-07.17.39``)."""
    for folder in (Path(name), logs_dir / name):
        if folder.is_dir():
            return folder
    raise ResultsError(f"no run folder {name} (nor {logs_dir / name}); give two run folders, e.g. "
                       f"COMPARE={logs_dir}/<run a>,{logs_dir}/<run b> (make results lists them)")


def parse_pair(text: str, logs_dir: Path) -> tuple[Path, Path]:
    names = [name.strip() for name in text.split(",")]
    if len(names) != 2 or not all(names):
        raise ResultsError(f"COMPARE={text}: give two run folders separated by a comma, e.g. "
                           f"COMPARE={logs_dir}/<run a>,{logs_dir}/<run b>")
    return resolve_run(names[0], logs_dir), resolve_run(names[1], logs_dir)


def compare_runs(run_a: Path, run_b: Path) -> list[Comparison]:
    """Every result of either run, sorted by key; where a key repeats in a run, the test that started last."""
    a, b = run_results(run_a), run_results(run_b)
    for folder, chosen in ((run_a, a), (run_b, b)):
        if not chosen:
            raise ResultsError(f"{folder} holds no finished test (no <system>/<benchmark>/<Scenario>/metadata.json "
                               "of a test that ended): compare two folders of runs that finished")
    return [Comparison(key, a.get(key), b.get(key)) for key in sorted(set(a) | set(b))]


def comparison_table(run_a: Path, run_b: Path, rows: list[Comparison]) -> str:
    headers = ("system", "benchmark", "model", "scenario", "GPUs", "test", "a", "b", "unit", "b / a", "verdict a",
               "verdict b")
    cells = [(system, benchmark, model, scenario, str(gpus), test,
              format_figure(row.a.figure if row.a else None), format_figure(row.b.figure if row.b else None),
              row.unit, "-" if row.ratio is None else f"{row.ratio:.3f}", *row.verdicts("-"))
             for row in rows for system, benchmark, scenario, gpus, test, model in [row.key]]
    return "\n".join([f"a: {shown_path(run_a)}", f"b: {shown_path(run_b)}",
                      format_table(headers, cells, right={4, 6, 7, 9})])


def comparison_csv(rows: list[Comparison]) -> str:
    return csv_text(CSV_COLUMNS, [
        (*row.key, row.unit, *("" if side is None or side.figure is None else side.figure for side in (row.a, row.b)),
         "" if row.ratio is None else row.ratio, *row.verdicts("")) for row in rows])


def write_comparison(run_a: Path, run_b: Path, csv_path: Path) -> str:
    """Write the comparison's CSV and return what the terminal shows: the table and the CSV's path."""
    rows = compare_runs(run_a, run_b)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(csv_path, comparison_csv(rows))
    return f"{comparison_table(run_a, run_b, rows)}\nCSV: {csv_path}"
