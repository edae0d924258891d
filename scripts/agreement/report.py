"""The agreement check's verdict and report: the bars, one row per model and precision, whether each row
qualifies for an accuracy target, the exit status, and agreement.{json,md}.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from code.bert.backends import QUANTIZED
from scripts.agreement.comparison import Agreement

REFERENCE_PRECISION = "fp32"
TARGET_BARS: dict[str, float] = {"bert-99": 0.995, "bert-99.9": 0.9995}
"""The gate per accuracy target: an engine's F1 on the trained proxy over float32's. MLPerf asks 0.99 and 0.999 of
the real checkpoint's F1; the margin covers the distance between the proxy and the real model."""
EXIT_MISSED, EXIT_USAGE, EXIT_NOT_RUN = 1, 2, 3


@dataclass(frozen=True)
class Bar:
    """A required F1 ratio: ``ratio`` of float32's F1 on the trained proxy; ``name`` is the accuracy target it
    stands for (bert-99, bert-99.9) or the number as given; ``source`` says where it was asked for."""

    ratio: float
    name: str
    source: str = "--require"

    def describe(self) -> str:
        return f"{self.name} (>= {self.ratio:.2%})" if self.name in TARGET_BARS else f">= {self.ratio:.2%}"


@dataclass
class Row:
    model: str
    precision: str
    bar: Bar | None = None  # the required bar (--require); None: reported, not required
    agreement: Agreement | None = None
    not_run: str | None = None
    seconds: float = 0.0
    path: str = ""
    label: str = ""  # the --precisions item when it is a variant (fp8:fp8_fast_accum=true), else empty
    options: dict[str, str] = field(default_factory=dict)  # the variant's backend options, as written
    gated: bool = False  # a trained QA proxy: its F1 ratio means something, so bars apply to it

    @property
    def name(self) -> str:
        """What the table, the JSON and --require call the row: the --precisions item."""
        return self.label or self.precision

    @property
    def f1_ratio(self) -> float | None:
        return None if self.agreement is None else self.agreement.f1_ratio

    @property
    def ran_as_named(self) -> bool:
        """False for an fp8 or int8 row off the packed path (a CPU): its backend ran the fp16-rounded weights without
        8-bit GEMMs, so its F1 says nothing about them and the gate neither passes nor fails it."""
        return not (self.precision in QUANTIZED and not self.path.startswith("packed"))

    def qualifies(self, target: str) -> bool | None:
        """Whether this engine meets ``target``'s bar (TARGET_BARS); None where the row has no meaningful F1."""
        ratio = self.f1_ratio
        if not self.gated or ratio is None or not self.ran_as_named:
            return None
        return ratio >= TARGET_BARS[target]

    @property
    def passed(self) -> bool | None:
        """The required bar's verdict; None where nothing is required of the row, it is a random-head model, or it
        did not run its precision. A trained proxy's row without an F1 ratio (float32 scored 0) does not pass: the
        gate could not measure."""
        if not self.gated or self.bar is None or self.agreement is None or not self.ran_as_named:
            return None
        ratio = self.f1_ratio
        return ratio is not None and ratio >= self.bar.ratio

    @property
    def unmeasured(self) -> bool:
        """A required row of the trained proxy that ran, but not in its precision: the gate is owed a measurement."""
        return self.gated and self.bar is not None and self.agreement is not None and not self.ran_as_named


def qualification_text(row: Row) -> str:
    """The table's cell: which targets the engine qualifies for, or why the row is not gated."""
    if not row.gated:
        return "not gated (random head)"
    if not row.ran_as_named:
        return f"not measured ({row.path}, no {row.precision.upper()} GEMMs)"
    if row.f1_ratio is None:
        return "no F1 ratio"
    return ", ".join(f"{target} {'yes' if row.qualifies(target) else 'no'}" for target in TARGET_BARS)


def format_rows(rows: list[Row]) -> list[list[str]]:
    table = [
        [
            "model",
            "precision",
            "path",
            "features",
            "max|err|",
            "mean|err|",
            "logit std",
            "span agree",
            "answer agree",
            "F1 vs gold (ratio)",
            "qualifies",
            "required",
            "verdict",
        ]
    ]
    for row in rows:
        a = row.agreement
        required = row.bar.describe() if row.bar is not None else "-"
        if a is None:
            table.append([row.model, row.name, *["-"] * 9, required, f"NOT RUN: {row.not_run}"])
            continue
        verdict = "NOT MEASURED" if row.unmeasured else {True: "PASS", False: "FAIL", None: "-"}[row.passed]
        table.append(
            [
                row.model,
                row.name,
                row.path,
                str(a.features),
                f"{a.max_abs_error:.4g}",
                f"{a.mean_abs_error:.3g}",
                f"{a.reference_logit_std:.3g}",
                f"{a.span_agreement:.2%} ({a.spans_differ} differ)",
                f"{a.answer_agreement:.2%} ({a.answers_differ} differ)",
                _f1_text(a),
                qualification_text(row),
                required,
                verdict,
            ]
        )
    return table


def qualification_lines(rows: list[Row]) -> list[str]:
    """Per engine run on a trained proxy: its F1 ratio, whether it qualifies for each target, and the ratio's
    resolution (one question's whole F1 over float32's), which says how far a verdict near a bar can be trusted."""
    lines = []
    for row in rows:
        a = row.agreement
        if not row.gated or a is None or row.f1_ratio is None or a.reference_f1 is None or not row.ran_as_named:
            continue
        step = 100.0 / max(a.questions, 1) / a.reference_f1
        verdicts = "; ".join(
            f"{target} (>= {bar:.2%}): {'yes' if row.qualifies(target) else 'no'}"
            for target, bar in TARGET_BARS.items()
        )
        lines.append(
            f"{row.model} {row.name}: F1 {a.candidate_f1:.2f} = {row.f1_ratio:.3%} of float32's {a.reference_f1:.2f}; "
            f"{verdicts} (one question of {a.questions} moves the ratio by up to {step:.3%})"
        )
    return lines


def render(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)


def path_notes(rows: list[Row]) -> list[str]:
    """Rows whose backend did not run the precision they name (e.g. fp8 off the GPU packed path runs fp16 weights in
    float32): their figures measure weight rounding only, not the precision's arithmetic."""
    notes = []
    for row in rows:
        if row.agreement is not None and not row.ran_as_named:
            notes.append(
                f"{row.model} {row.name} ran on the {row.path} path, without {row.precision.upper()} GEMMs: it "
                f"measures the fp16 rounding of the weights only; run on a GPU for the {row.precision.upper()} path"
            )
        elif row.agreement is not None and row.path.endswith("float32") and row.precision != REFERENCE_PRECISION:
            notes.append(f"{row.model} {row.name} ran in float32 ({row.path})")
    return notes


def exit_status(rows: list[Row]) -> int:
    """1 when a required bar is missed; 3 when none is but a row could not run, a required row did not run its
    precision (fp8 on a CPU), or bars are required and no trained proxy ran to measure them (a gate that measured
    nothing does not pass); else 0."""
    if any(row.passed is False for row in rows):
        return EXIT_MISSED
    if any(row.agreement is None or row.unmeasured for row in rows):
        return EXIT_NOT_RUN
    if any(row.bar is not None for row in rows) and not any(row.gated for row in rows):
        return EXIT_NOT_RUN
    return 0


def _f1_text(a: Agreement) -> str:
    if a.candidate_f1 is None:
        return "-"
    ratio = a.f1_ratio
    return f"{a.candidate_f1:.2f}" + (f" ({ratio:.2%})" if ratio is not None else "")


def write_report(work_dir: Path, report: dict[str, Any], rows: list[Row], notes: list[str]) -> None:
    """agreement.json and agreement.md in ``work_dir``: the report's facts, the rows, the table and ``notes``."""
    table = format_rows(rows)
    payload = {
        **report,
        "rows": [
            asdict(r)
            | {
                "name": r.name,
                "passed": r.passed,
                "f1_ratio": r.f1_ratio,
                "qualifies": {target: r.qualifies(target) for target in TARGET_BARS},
            }
            for r in rows
        ],
        "target_bars": TARGET_BARS,
        "table": table,
        "qualification": qualification_lines(rows),
        "notes": notes,
    }
    (work_dir / "agreement.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    inputs = report["inputs"]
    md = [
        f"# BERT agreement with float32, {report['date']}",
        "",
        f"- device: {report['device']}; torch {report['torch']}; backend {report['backend']} "
        f"with {_options_text(report['backend_options'])} (a variant's own options on top)",
        f"- inputs: {inputs['features']} features of {inputs['examples']} questions from real English text "
        f"(scripts/agreement/text_inputs.py), real tokens mean {inputs['length_mean']}, p50 {inputs['length_p50']:g}, "
        f"p90 {inputs['length_p90']:g}; corpus sha256 {inputs['corpus_sha256'][:16]}",
        *[f"- {name}: {text}" for name, text in report["weights"].items()],
        "",
        *["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table[:1]],
        "|" + "---|" * len(table[0]),
        *["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table[1:]],
        "",
        "The gate: F1 on a trained QA proxy over float32's F1, >= "
        + ", ".join(f"{bar:.2%} for {target}" for target, bar in TARGET_BARS.items())
        + "; span and answer agreement are information. The gate of a real submission is the AccuracyOnly run on "
        "the real checkpoint (documentation/bert_gpu.md).",
        "",
        *[f"- {line}" for line in qualification_lines(rows)],
        "",
        *[f"NOTE: {note}" for note in notes],
    ]
    (work_dir / "agreement.md").write_text("\n".join(md) + "\n")


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "default options"
