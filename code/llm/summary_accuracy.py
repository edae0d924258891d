"""A summarization benchmark's accuracy: LoadGen accuracy log -> token ids -> text -> ROUGE and gen_len -> verdict
and ``accuracy.txt``, as the MLCommons references score GPT-J and Llama 3.1 8B alike.

What differs between the benchmarks is data, not code: the reference model's scores and which of them the checker
holds a result to (``RougeReference``), the tokenizer's decode, and the reference summaries.

accuracy.txt: its first line is the result as a Python dict with unquoted numbers,
`{'rouge1': 42.9865, 'rouge2': 20.1235, 'rougeL': 29.9881, 'rougeLsum': 40.0, 'gen_len': 4016878, 'gen_num': 13368}`,
which the submission checker's ROUGE1/ROUGE2/ROUGEL/ROUGELSUM/GEN_LEN patterns read in every round (v4.0-v5.0
patterns want an unquoted number; later ones also take the quoted strings the references print since #1886).
Human-readable lines follow; none contains a quoted metric name, so the checker reads only the first line. The
`hash=` line the checker also wants is appended by MLCommons' `truncate_accuracy_log.py` at submission time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.llm.rouge import compute_rouge, read_accuracy_log
from code.llm.sentence_split import splitter_name
from code.mlperf.benchmarks import AccuracyReport

RESULT_KEYS = {"ROUGE1": "rouge1", "ROUGE2": "rouge2", "ROUGEL": "rougeL", "ROUGELSUM": "rougeLsum",
               "GEN_LEN": "gen_len"}
"""The checker's metric names -> keys of the result line."""


@dataclass(frozen=True)
class RougeReference:
    """The reference model's scores on a data set and the checker's rule over them: each checked ROUGE at least
    ``accuracy_target`` x its reference score, gen_len at least ``gen_len_fraction`` x the reference's."""

    rouge: dict[str, float]  # checked metric (ROUGE1, ROUGE2, ROUGEL, ROUGELSUM) -> reference score
    gen_len: int  # characters the reference generated over the whole data set
    benchmarks: dict[float, str]  # accuracy target -> the benchmark's name at it ("gptj-99", "llama3.1-8b")
    gen_len_fraction: float = 0.9

    @property
    def gen_len_target(self) -> float:
        """The checker's absolute gen_len threshold."""
        return self.gen_len * self.gen_len_fraction

    def targets(self, accuracy_target: float, gen_len_target: float | None = None) -> dict[str, float]:
        """Checker metric name -> minimum, in the checker's order, GEN_LEN last."""
        targets = {name: score * accuracy_target for name, score in self.rouge.items()}
        targets["GEN_LEN"] = self.gen_len_target if gen_len_target is None else gen_len_target
        return targets


@dataclass
class SummaryAccuracyResult:
    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float
    gen_len: int
    gen_num: int
    splitter: str
    targets: dict[str, float]
    """Checker metric name (ROUGE1, ..., GEN_LEN) -> the minimum it needs."""
    passed: bool
    failures: list[str] = field(default_factory=list)
    accuracy_target: float = 0.99
    num_log_entries: int = 0
    num_references: int = 0
    dtype: str = "int32"
    benchmark: str = ""
    gen_len_required: float = 0.0  # the checker's gen_len threshold, which a test on a subset may lower
    gen_len_fraction: float = 0.9

    def metrics(self) -> dict[str, float | int]:
        """The reference's result dict, numbers as Python float/int."""
        return {"rouge1": self.rouge1, "rouge2": self.rouge2, "rougeL": self.rougeL, "rougeLsum": self.rougeLsum,
                "gen_len": self.gen_len, "gen_num": self.gen_num}

    def accuracy_report(self, note: str = "", **figures: Any) -> AccuracyReport:  # noqa: ANN401 - their own
        """What the orchestration reads of this result: rouge1 as the metric, one line with each checked metric
        and then the targets, in the checker's order (``note`` after them); ``figures``: the benchmark's own, beside
        the metrics, the targets and the sentence splitter."""
        values = self.metrics()
        shown = ", ".join(f"{RESULT_KEYS[name]} = {values[RESULT_KEYS[name]]:,}" if name == "GEN_LEN"
                          else f"{RESULT_KEYS[name]} = {values[RESULT_KEYS[name]]}" for name in self.targets)
        wanted = " / ".join(f"{target:,.0f}" if name == "GEN_LEN" else f"{target:.3f}"
                            for name, target in self.targets.items())
        return AccuracyReport(metric="rouge1", value=float(self.rouge1), unit="", passed=self.passed,
                              failures=list(self.failures), summary=f"{shown} (targets {wanted})" + note,
                              figures={**values, "targets": self.targets, **figures,
                                       "sentence_splitter": self.splitter})

    def checker_line(self) -> str:
        """`{'rouge1': 42.9865, ..., 'gen_len': 4016878, 'gen_num': 13368}`: what the checker's patterns read."""
        return repr(self.metrics())

    def summary_lines(self) -> list[str]:
        """Human-readable PASS/FAIL per checked metric, with thresholds; none of them matches a checker pattern."""
        values = self.metrics()
        lines = [f"{'PASS' if self.passed else 'FAIL'}: {self.benchmark} (targets: {self.accuracy_target} of the "
                 f"fp32 reference ROUGE, {self.gen_len_fraction} of its gen_len)"]
        for name, target in self.targets.items():
            value = values[RESULT_KEYS[name]]
            lines.append(f"  {name:<9} {value:>12} >= {_number(target):<12} {'PASS' if value >= target else 'FAIL'}")
        if self.targets["GEN_LEN"] != self.gen_len_required:
            lines.append(f"  note: GEN_LEN target overridden; the checker requires {_number(self.gen_len_required)}")
        if "ROUGELSUM" not in self.targets:
            lines.append(f"  ROUGELSUM {self.rougeLsum:>12} (reported, not checked)")
        duplicates = self.num_log_entries - self.gen_num
        lines.append(
            f"samples scored: {self.gen_num} of {self.num_references} references; log entries: "
            f"{self.num_log_entries} ({duplicates} duplicates dropped); token dtype: {self.dtype}; "
            f"sentence splitter: {self.splitter}"
        )
        if self.gen_num < self.num_references:
            lines.append(f"  note: {self.num_references - self.gen_num} references have no response in the log; "
                         "a submission needs the full data set")
        return lines


def _number(value: float) -> str:
    """A threshold as the checker's arithmetic makes it, without float noise: 42.556635, 42.9435135, 3615190.2."""
    return f"{value:.7f}".rstrip("0").rstrip(".")


def evaluate_accuracy_log(
    log_path: Path,
    references: Sequence[str],
    decode: Callable[[list[int]], str],
    reference: RougeReference,
    accuracy_target: float,
    accuracy_txt: Path,
    dtype: str = "int32",
    gen_len_target: float | None = None,
) -> SummaryAccuracyResult:
    """Score a LoadGen accuracy log against ``reference`` and write ``accuracy_txt``.

    ``references[i]`` is the reference summary of qsl_idx i; ``decode`` turns token ids into text as the benchmark's
    reference does. ``gen_len_target`` defaults to the checker's absolute threshold; only a test on a few samples
    should pass a smaller one (accuracy.txt then says it was overridden).
    """
    token_ids, num_entries = read_accuracy_log(Path(log_path), dtype)
    unknown = [i for i in token_ids if i >= len(references)]
    if unknown:
        raise ValueError(f"{log_path} has qsl_idx {sorted(unknown)[:5]} outside the {len(references)} references: "
                         "was it produced from another data set?")
    predictions = [decode(ids.tolist()) for ids in token_ids.values()]
    metrics = compute_rouge(predictions, [references[i] for i in token_ids])
    targets = reference.targets(accuracy_target, gen_len_target)
    failures = [f"{name} {metrics[RESULT_KEYS[name]]} < {_number(target)}" for name, target in targets.items()
                if not metrics[RESULT_KEYS[name]] >= target]
    result = SummaryAccuracyResult(
        rouge1=metrics["rouge1"], rouge2=metrics["rouge2"], rougeL=metrics["rougeL"], rougeLsum=metrics["rougeLsum"],
        gen_len=int(metrics["gen_len"]), gen_num=int(metrics["gen_num"]), splitter=splitter_name(), targets=targets,
        passed=not failures, failures=failures, accuracy_target=accuracy_target, num_log_entries=num_entries,
        num_references=len(references), dtype=dtype,
        benchmark=reference.benchmarks.get(accuracy_target, f"{accuracy_target}"),
        gen_len_required=reference.gen_len_target, gen_len_fraction=reference.gen_len_fraction,
    )
    accuracy_txt = Path(accuracy_txt)
    accuracy_txt.parent.mkdir(parents=True, exist_ok=True)
    accuracy_txt.write_text("\n".join([result.checker_line(), *result.summary_lines()]) + "\n")
    return result
