"""A performance test's figure beside the best published result per GPU of the same benchmark, scenario and GPU model
(code/common/published.py): a newcomer reading ``8,264 samples/s`` cannot tell whether it is good; ``= 90% of the best
published`` says. A run on N GPUs compares its figure / N. A latency (SingleStream's p90) compares as ours / theirs too,
which reads the other way, so the line says "lower is better". A figure from a stand-in or from no MLPerf model measures
another thing: "not comparable", no percentage. A GPU model with no published result, a CPU run, a system named without
its GPU model or an accuracy test get nothing."""

from __future__ import annotations

from dataclasses import dataclass

from code.common import published
from code.common.constants import TestMode
from code.common.gpu_models import by_name
from code.common.published import Published
from code.common.systems import gpu_model_and_count
from code.mlperf.run_record import RunRecord

# Caveats (``RunRecord.caveats``) of a figure that measures something else than the GPU running the MLPerf model.
NOT_COMPARABLE = ("stand-in for ", "no model", "small model")


@dataclass(frozen=True)
class Beside:
    """A test's figure per GPU and the best published one."""

    figure: float  # the test's, for all its GPUs
    per_gpu: float
    gpus: int
    unit: str
    gpu_model: str
    best: Published
    not_comparable: str | None  # why the two measure different things; None: they compare
    caveats: tuple[str, ...]  # RunRecord.caveats: what else to keep in mind (synthetic, shortened)

    @property
    def ratio(self) -> float:
        """Ours over the published figure (for a latency, above 1 is slower)."""
        return self.per_gpu / self.best.per_gpu

    def line(self) -> str:
        """``published: 8,264 samples/s per H200_SXM_141GB = 90% of the best published (9,224: Dell ..., v4.1)``."""
        theirs = f"{_number(self.best.per_gpu)} {self.unit}: {self.best.describe()}"
        if self.not_comparable:
            return (f"published: not comparable ({self.not_comparable}); the best published per {self.gpu_model} is "
                    f"{theirs}")
        if self.best.lower_is_better:
            line = (f"published: {_number(self.per_gpu)} {self.unit} = {self.ratio:.0%} of the best published "
                    f"{self.gpu_model} latency ({theirs}; lower is better)")
        else:
            ours = (f"{_number(self.figure)} {self.unit} over {self.gpus} GPUs = {_number(self.per_gpu)}"
                    if self.gpus > 1 else f"{_number(self.per_gpu)} {self.unit}")
            line = (f"published: {ours} per {self.gpu_model} = {self.ratio:.0%} of the best published "
                    f"({_number(self.best.per_gpu)}: {self.best.describe()})")
        return line + (f"; this run: {', '.join(self.caveats)}" if self.caveats else "")

    def cell(self) -> str:
        """``90% of Dell v4.1`` for a table."""
        if self.not_comparable:
            return "not comparable"
        kind = " latency" if self.best.lower_is_better else ""
        return f"{self.ratio:.0%} of {self.best.submitter} {self.best.round}{kind}"


def _number(value: float) -> str:
    """Thousands separators and about four significant digits: 8,264, 39.05, 2.138."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.4g}"


def beside_published(record: RunRecord) -> Beside | None:
    result = record.result_dict  # as recorded: a record of an earlier version may lack some of TestResult's keys
    value, unit, scenario = result.get("value"), result.get("unit"), str(result.get("scenario") or "")
    if result.get("mode") != TestMode.PerformanceOnly.value or value is None or not unit:
        return None
    found = gpu_model_and_count(record.system_name or "")
    model = by_name(found[0]) if found else None
    gpus = record.gpu_count
    if model is None or gpus == 0 or record.benchmark is None:
        return None
    best = published.best(record.benchmark, scenario, model.name)
    if best is None or best.unit != unit:
        return None
    caveats = record.caveats
    blocking = [caveat for caveat in caveats if caveat.startswith(NOT_COMPARABLE)]
    # A latency is one GPU's whatever the run's GPU count; a rate is the run's, shared by its GPUs.
    per_gpu = float(value) if best.lower_is_better else float(value) / gpus
    return Beside(float(value), per_gpu, gpus, str(unit), model.name, best, "; ".join(blocking) or None,
                  tuple(caveat for caveat in caveats if caveat not in blocking))


def published_line(record: RunRecord) -> str | None:
    beside = beside_published(record)
    return beside.line() if beside else None
