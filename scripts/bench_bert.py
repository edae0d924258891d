"""``make bench``: BERT's performance figures through the real harness, against a reference-style baseline.

Runs real LoadGen tests with ``python -m code.main`` (each test in its own child process, exactly as ``make run``
does) on synthetic SQuAD-like inputs and random BERT-large weights, with shortened durations, and measures:

- Offline samples/s and tokens/s (samples/s x the mean real length of the inputs), at SQuAD-like lengths and at a
  full 384 tokens (the worst case). ``offline_expected_qps`` must be at or above the real throughput or LoadGen's
  one query ends before the minimum duration (INVALID), so it comes from a short probe run, and a run that still
  misses the minimum duration is repeated once with its own measured throughput.
- Server: the highest ``server_target_qps`` that stays VALID (p99 <= 130 ms), searched from 0.8 x the Offline
  throughput (step up or down until bracketed, then bisect; every try and its VALID/INVALID reason is reported).
- SingleStream: LoadGen's early-stopping estimate of the p90 latency.
- Baseline: HF transformers ``BertForQuestionAnswering`` (the same architecture, random init, float32, batch 1,
  padded to 384 tokens, as the MLCommons reference runs it) on the same device; every figure gets its ratio to it.

Everything lands in a new ``build/bench/<timestamp>/``: ``bench.json``, ``bench.md`` (the closing table), and under
``runs/`` each harness invocation's logs and transcript. documentation/benchmarking.md explains the figures.

    python -m scripts.bench_bert [--benchmarks bert-99,bert-99.9] [--scenarios offline,server,singlestream]
        [--min_duration_ms MS] [--skip_baseline] [--quick] [--extra_run_args "--gpu_batch_size=512 ..."] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python3 scripts/bench_bert.py): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from code.common.constants import Scenario  # noqa: E402 - after the sys.path line above
from code.common.paths import BUILD_DIR, REPO_ROOT  # noqa: E402
from code.common.run_logs import LogDirError, new_timestamped_dir  # noqa: E402

BENCHMARKS = ("bert-99", "bert-99.9")
SCENARIO_NAMES = {Scenario.Offline: "offline", Scenario.Server: "server", Scenario.SingleStream: "singlestream"}
DEFAULT_DURATION_MS = {Scenario.Offline: 20_000, Scenario.Server: 30_000, Scenario.SingleStream: 20_000}
QUICK_DURATION_MS = 1_000
MLPERF_DURATION_MS = 600_000
SERVER_LATENCY_BOUND_MS = 130.0
# The H200 targets (one GPU), above the best published per-GPU results: throughput at least, latency at most (ms).
TARGETS: dict[tuple[str, Scenario], tuple[str, float]] = {
    ("bert-99", Scenario.Offline): (">=", 9_300.0),
    ("bert-99.9", Scenario.Offline): (">=", 8_300.0),
    ("bert-99", Scenario.Server): (">=", 7_400.0),
    ("bert-99.9", Scenario.Server): (">=", 6_700.0),
    ("bert-99", Scenario.SingleStream): ("<=", 1.5),
    ("bert-99.9", Scenario.SingleStream): ("<=", 1.5),
}
QPS_MARGIN = 1.1
"""offline_expected_qps = measured samples/s x this (LoadGen adds its own 10% slack on top)."""
SERVER_START_FRACTION = 0.8
SERVER_STEP = 1.25
SERVER_MIN_QUERIES = 1_000
"""Server min_query_count: LoadGen's early stopping at p99 needs ~500 queries even when none is late."""
SINGLE_STREAM_HINT_NS = 1_000_000
"""SingleStream expected latency: LoadGen generates 2 x min_duration / hint queries and stops issuing once the
minimum duration is met, so a low hint only generates unused queries while a high one can end the run early."""
QUICK_RUN_ARGS = ["--model_name=tiny", "--device=cpu", "--precision=fp32", "--synthetic_sample_count=256"]
QUICK_OFFLINE_MIN_QUERIES = 64
"""--quick: Offline's mlperf.conf minimum of 10,833 samples would dominate a one-second CPU run."""
# Fields the bench sets itself; given in --extra_run_args they are taken as hints or refused.
HINT_FIELDS = ("offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns")
REFUSED_FIELDS = {
    "min_duration": "use --min_duration_ms",
    "log_dir": "the bench puts every run under build/bench/<timestamp>/runs/",
    "input_data": "the bench runs synthetic inputs",
    "weights": "the bench runs random weights",
    "synthetic_lengths": "the bench runs both (dataset and max)",
    "benchmarks": "use --benchmarks",
    "scenarios": "use --scenarios",
    "action": "the bench chooses the action",
    "test_run": "use --min_duration_ms",
}


class BenchError(RuntimeError):
    """A bad option; the message names the fix."""


# ------------------------------------------------------------------------------------------------ harness runs


@dataclass
class RunOutcome:
    """One ``python -m code.main`` invocation (one LoadGen test) and what its metadata.json says."""

    label: str
    benchmark: str
    scenario: str
    command: str
    log_dir: str
    transcript: str
    returncode: int
    seconds: float
    valid: bool | None = None  # None: no result (the test crashed)
    value: float | None = None
    unit: str | None = None
    reasons: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    mean_length: float | None = None
    system: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def min_duration_missed(self) -> bool:
        return any("min duration" in reason for reason in self.reasons)

    def verdict(self) -> str:
        if self.valid is None:
            return "FAILED"
        return "VALID" if self.valid else "INVALID"

    def loadgen_reasons(self) -> list[str]:
        """INVALID reasons from LoadGen, without the standing 'not a valid MLPerf result' note of synthetic runs."""
        return [r for r in self.reasons if not r.startswith("not a valid MLPerf result")]


def read_outcome(outcome: RunOutcome) -> RunOutcome:
    """Fill ``outcome`` from the run's metadata.json (or, when the test crashed, its summary.json)."""
    log_dir = Path(outcome.log_dir)
    found = sorted(log_dir.rglob("metadata.json"))
    if found:
        metadata = json.loads(found[0].read_text())
        result = metadata.get("result", {})
        outcome.valid, outcome.value, outcome.unit = result.get("valid"), result.get("value"), result.get("unit")
        outcome.reasons = [str(r).strip() for r in result.get("invalid_reasons", [])]
        outcome.extra = dict(result.get("extra", {}))
        outcome.mean_length = metadata.get("provenance", {}).get("input_lengths", {}).get("mean")
        outcome.system = metadata.get("system_name")
        outcome.versions = metadata.get("versions", {})
        fields = metadata.get("config", {}).get("fields", {})
        outcome.settings = {
            k: fields.get(k)
            for k in (
                "precision",
                "model_name",
                "device",
                "gpu_batch_size",
                "num_workers",
                "batch_timeout_us",
                "offline_expected_qps",
                "server_target_qps",
                "single_stream_expected_latency_ns",
                "min_duration",
                "min_query_count",
                "synthetic_lengths",
            )
            if k in fields
        }
        return outcome
    summary = log_dir / "summary.json"
    if summary.is_file():
        records = json.loads(summary.read_text())
        if records:
            outcome.reasons = list(records[0].get("invalid_reasons", []))
    if not outcome.reasons:
        outcome.reasons = [f"no result (exit {outcome.returncode}); see {outcome.transcript}"]
    return outcome


class HarnessRunner:
    """Runs one LoadGen test per call through ``python -m code.main``, each into a new folder under ``runs/``.

    The first test of a (benchmark, scenario) uses ``--action=run`` (generate_engines, then the test); later ones
    ``--action=run_harness``, which reuses that engine.
    """

    def __init__(self, bench_dir: Path, run_args: list[str], verbose: bool = False) -> None:
        self.runs_dir = bench_dir / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.run_args = run_args
        self.verbose = verbose
        self.outcomes: list[RunOutcome] = []
        self._engines: set[tuple[str, Scenario]] = set()

    def command(self, benchmark: str, scenario: Scenario, settings: dict[str, Any], log_dir: Path) -> list[str]:
        action = "run_harness" if (benchmark, scenario) in self._engines else "run"
        flags = [f"--{name}={value}" for name, value in settings.items() if value is not None]
        return [
            sys.executable,
            "-m",
            "code.main",
            f"--action={action}",
            f"--benchmarks={benchmark}",
            f"--scenarios={SCENARIO_NAMES[scenario]}",
            "--input_data=synthetic",
            "--weights=random",
            *self.run_args,
            *flags,
            f"--log_dir={log_dir}",
        ]

    def run(self, label: str, benchmark: str, scenario: Scenario, settings: dict[str, Any]) -> RunOutcome:
        index = len(self.outcomes) + 1
        name = f"{index:02d}-{benchmark}-{SCENARIO_NAMES[scenario]}-{label}"
        log_dir = self.runs_dir / name
        transcript = self.runs_dir / f"{name}.log"
        command = self.command(benchmark, scenario, settings, log_dir)
        print(f"[bench] {name}: {shlex.join(command[1:])}", flush=True)
        started = time.monotonic()
        with open(transcript, "w") as log:
            process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                if self.verbose:
                    sys.stdout.write(line)
            returncode = process.wait()
        outcome = RunOutcome(
            label,
            benchmark,
            scenario.value,
            shlex.join(command),
            str(log_dir),
            str(transcript),
            returncode,
            round(time.monotonic() - started, 1),
        )
        read_outcome(outcome)
        if outcome.valid is not None:
            self._engines.add((benchmark, scenario))
        self.outcomes.append(outcome)
        figure = "no figure" if outcome.value is None else f"{outcome.value:,.3f} {outcome.unit}"
        reasons = outcome.loadgen_reasons()
        print(
            f"[bench]   -> {figure} {outcome.verdict()}{' (' + '; '.join(reasons) + ')' if reasons else ''} "
            f"in {outcome.seconds:.0f} s",
            flush=True,
        )
        return outcome


# ---------------------------------------------------------------------------------------------------- Offline


@dataclass
class OfflineResult:
    benchmark: str
    lengths: str  # "dataset" | "max"
    run: RunOutcome | None
    probe_qps: float | None = None

    @property
    def samples_per_second(self) -> float | None:
        return self.run.value if self.run else None

    @property
    def tokens_per_second(self) -> float | None:
        if self.run is None or self.run.value is None or self.run.mean_length is None:
            return None
        return self.run.value * self.run.mean_length


def measure_offline(
    runner: HarnessRunner,
    benchmark: str,
    lengths: str,
    duration_ms: int,
    probe_ms: int,
    hint_qps: float | None,
    base: dict[str, Any],
) -> OfflineResult:
    """Probe (unless a hint is known), run with expected QPS above the measured one, re-run once if still short."""
    settings = {**base, "synthetic_lengths": lengths}
    probe_qps = None
    if hint_qps is None:
        probe = runner.run(f"{lengths}-probe", benchmark, Scenario.Offline, {**settings, "min_duration": probe_ms})
        if probe.value is None:
            return OfflineResult(benchmark, lengths, probe)
        hint_qps = probe_qps = probe.value
    settings["min_duration"] = duration_ms
    run = runner.run(
        lengths, benchmark, Scenario.Offline, {**settings, "offline_expected_qps": _round_qps(hint_qps * QPS_MARGIN)}
    )
    if run.valid is False and run.min_duration_missed and run.value:
        run = runner.run(
            f"{lengths}-rerun",
            benchmark,
            Scenario.Offline,
            {**settings, "offline_expected_qps": _round_qps(run.value * QPS_MARGIN)},
        )
    return OfflineResult(benchmark, lengths, run, probe_qps)


def _round_qps(qps: float) -> float:
    """Readable QPS values for user.conf and reports: whole numbers above 100, else 3 significant digits."""
    if qps >= 100:
        return float(round(qps))
    if qps <= 0:
        return qps
    return round(qps, 2 - int(math.floor(math.log10(qps))))


# ----------------------------------------------------------------------------------------------------- Server


@dataclass
class ServerTry:
    target_qps: float
    valid: bool | None
    reasons: list[str] = field(default_factory=list)
    p99_ms: float | None = None
    scheduled_qps: float | None = None
    log_dir: str | None = None


@dataclass
class ServerSearch:
    """Every try in order, and the highest target QPS that was VALID (None if none was)."""

    tries: list[ServerTry]
    best_qps: float | None
    stopped_because: str

    def best_try(self) -> ServerTry | None:
        return next((t for t in self.tries if t.valid and t.target_qps == self.best_qps), None)


def search_server_qps(
    run_try: Callable[[float], ServerTry],
    start_qps: float,
    max_runs: int = 6,
    tolerance: float = 0.03,
    step: float = SERVER_STEP,
) -> ServerSearch:
    """Highest VALID target QPS, assuming validity falls monotonically with QPS.

    From ``start_qps``: multiply by ``step`` after a VALID try, divide after an INVALID one, until one of each
    brackets the answer; then bisect until the bracket is within ``tolerance`` (relative) or ``max_runs`` are spent.
    A crashed try (valid None) ends the search.
    """
    tries: list[ServerTry] = []
    low: float | None = None  # highest VALID
    high: float | None = None  # lowest INVALID
    qps = _round_qps(start_qps)
    while len(tries) < max_runs:
        outcome = run_try(qps)
        tries.append(outcome)
        if outcome.valid is None:
            return ServerSearch(tries, low, f"a try failed at {qps:g} QPS")
        if outcome.valid:
            low = qps if low is None else max(low, qps)
        else:
            high = qps if high is None else min(high, qps)
        if low is not None and high is not None:
            if (high - low) <= tolerance * low:
                return ServerSearch(tries, low, f"bracketed within {tolerance:.0%}")
            qps = _round_qps((low + high) / 2)
            if qps in (low, high):
                return ServerSearch(tries, low, "bracket cannot be split further")
        elif low is not None:
            qps = _round_qps(low * step)
        else:
            qps = _round_qps(high / step)
            if qps <= 0:
                return ServerSearch(tries, low, "no positive QPS left to try")
    bracket = f"; VALID at {low:g}, INVALID at {high:g}" if low is not None and high is not None else ""
    return ServerSearch(tries, low, f"used all {max_runs} runs{bracket}")


def server_try(runner: HarnessRunner, benchmark: str, duration_ms: int, base: dict[str, Any], qps: float) -> ServerTry:
    run = runner.run(
        f"qps{qps:g}", benchmark, Scenario.Server, {**base, "min_duration": duration_ms, "server_target_qps": qps}
    )
    p99 = run.extra.get("result_99.00_percentile_latency_ns")
    return ServerTry(
        qps, run.valid, run.loadgen_reasons(), None if p99 is None else float(p99) / 1e6, run.value, run.log_dir
    )


# -------------------------------------------------------------------------------------------------- SingleStream


def measure_singlestream(
    runner: HarnessRunner, benchmark: str, duration_ms: int, hint_ns: int, base: dict[str, Any]
) -> RunOutcome:
    settings = {**base, "min_duration": duration_ms}
    run = runner.run(
        "p90", benchmark, Scenario.SingleStream, {**settings, "single_stream_expected_latency_ns": hint_ns}
    )
    mean_ns = run.extra.get("result_mean_latency_ns")
    if run.valid is False and run.min_duration_missed and mean_ns:
        run = runner.run(
            "p90-rerun",
            benchmark,
            Scenario.SingleStream,
            {**settings, "single_stream_expected_latency_ns": max(1, int(float(mean_ns) / 2))},
        )
    return run


# --------------------------------------------------------------------------------------------------- baseline


def measure_baseline(
    model_name: str,
    device: str,
    attention: str = "sdpa",
    seconds_per_repeat: float = 2.0,
    repeats: int = 5,
    warmup: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """HF ``BertForQuestionAnswering`` as the MLCommons reference runs it: float32, batch 1, padded to 384.

    Random init of our model's architecture (``model_name``), inputs from the synthetic set padded to 384 tokens,
    each sample copied to the device and its logits back (the reference's ``.cpu()``), which also synchronises.
    Samples/s is the median over ``repeats`` timed runs of ~``seconds_per_repeat`` each, after ``warmup`` samples.
    """
    import numpy as np
    import torch
    import transformers

    from code.bert.dataset import BertFeatures
    from code.bert.model import BERT_CONFIGS

    ours = BERT_CONFIGS[model_name]
    config = transformers.BertConfig(
        vocab_size=ours.vocab_size,
        hidden_size=ours.hidden_size,
        num_hidden_layers=ours.num_layers,
        num_attention_heads=ours.num_heads,
        intermediate_size=ours.intermediate_size,
        max_position_embeddings=ours.max_position_embeddings,
        type_vocab_size=ours.type_vocab_size,
        layer_norm_eps=ours.layer_norm_eps,
        attn_implementation=attention,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.BertForQuestionAnswering(config)
    model = model.float().eval()
    features = BertFeatures.synthetic(256, seed=seed)
    cuda = torch.device(device).type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def one(index: int) -> float:
        row = index % len(features)
        started = time.perf_counter()
        ids, seg, mask = (
            torch.from_numpy(a[row : row + 1].astype(np.int64)).to(device)
            for a in (features.input_ids, features.segment_ids, features.input_mask)
        )
        output = model(input_ids=ids, token_type_ids=seg, attention_mask=mask)
        output.start_logits.cpu(), output.end_logits.cpu()
        return time.perf_counter() - started

    latencies: list[float] = []
    rates: list[float] = []
    with torch.no_grad():
        for i in range(warmup):
            one(i)
        sync()
        per_sample = statistics.median(one(i) for i in range(3))
        count = int(min(max(seconds_per_repeat / max(per_sample, 1e-6), 5), 1000))
        for _ in range(repeats):
            sync()
            started = time.perf_counter()
            latencies += [one(i) for i in range(count)]
            sync()
            rates.append(count / (time.perf_counter() - started))
    ordered = sorted(latencies)
    return {
        "what": f"HF transformers {transformers.__version__} BertForQuestionAnswering ({model_name} config, random "
        f"init), float32, batch 1, padded to 384 tokens, attention={attention}",
        "device": device,
        "samples_per_second": statistics.median(rates),
        "samples_per_second_repeats": rates,
        "p90_latency_ms": ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)] * 1e3,
        "samples_per_repeat": count,
        "repeats": repeats,
        "warmup_samples": warmup,
    }


# ------------------------------------------------------------------------------------------------------ report


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


# ---------------------------------------------------------------------------------------------------- options


def new_bench_dir(root: Path | None = None) -> Path:
    """A fresh ``build/bench/<timestamp>[-N]``: a bench never writes into an earlier one."""
    try:
        return new_timestamped_dir(root or BUILD_DIR / "bench")
    except LogDirError as error:
        raise BenchError(str(error)) from None


def split_extra_run_args(text: str) -> tuple[list[str], dict[str, str]]:
    """``--extra_run_args``: flags passed to every run, and the hint fields (see HINT_FIELDS) taken out."""
    passed, hints = [], {}
    for token in shlex.split(text or ""):
        if not token.startswith("--"):
            raise BenchError(f"--extra_run_args: expected --name=value, got '{token}'")
        name, _, value = token[2:].partition("=")
        name = name.replace("-", "_")
        if name in REFUSED_FIELDS:
            raise BenchError(f"--extra_run_args: --{name} is set by the bench ({REFUSED_FIELDS[name]})")
        if name in HINT_FIELDS:
            hints[name] = value
        else:
            passed.append(token)
    return passed, hints


def parse_list(text: str, valid: dict[str, Any], what: str) -> list[Any]:
    chosen = []
    for item in (part.strip().lower() for part in text.split(",") if part.strip()):
        if item not in valid:
            raise BenchError(f"unknown {what} '{item}'; valid: {', '.join(valid)}")
        if valid[item] not in chosen:
            chosen.append(valid[item])
    if not chosen:
        raise BenchError(f"--{what}s is empty")
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="BERT Offline/Server/SingleStream through the harness, vs an "
        "HF baseline (documentation/benchmarking.md)."
    )
    parser.add_argument("--benchmarks", default="bert-99,bert-99.9", help="comma list: bert-99, bert-99.9")
    parser.add_argument(
        "--scenarios", default="offline,server,singlestream", help="comma list: offline, server, singlestream"
    )
    parser.add_argument(
        "--min_duration_ms",
        type=int,
        default=None,
        help="LoadGen min duration of every test (default: Offline/SingleStream 20,000, Server 30,000; --quick: 1,000)",
    )
    parser.add_argument(
        "--probe_ms",
        type=int,
        default=None,
        help="Offline probe duration (default: a quarter of the Offline duration, at least 500)",
    )
    parser.add_argument(
        "--offline_lengths",
        default="dataset,max",
        help="Offline input lengths: dataset (SQuAD-like), max (all 384 tokens), or both",
    )
    parser.add_argument("--server_max_runs", type=int, default=6, help="Server tries at most")
    parser.add_argument(
        "--server_tolerance",
        type=float,
        default=0.03,
        help="stop the Server search when VALID and INVALID are this close (relative)",
    )
    parser.add_argument("--skip_baseline", action="store_true", help="do not time the HF baseline")
    parser.add_argument(
        "--baseline_attention",
        default="sdpa",
        choices=("sdpa", "eager"),
        help="HF attention implementation of the baseline (transformers' default: sdpa)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny model on CPU, 1 s tests: checks the bench itself, not the GPU"
    )
    parser.add_argument(
        "--extra_run_args",
        default="",
        help="RUN_ARGS added to every run, e.g. "
        '"--gpu_batch_size=512 --num_workers=2"; --offline_expected_qps / --server_target_qps / '
        "--single_stream_expected_latency_ns here are starting hints",
    )
    parser.add_argument("--out", type=Path, default=None, help="also copy bench.json and bench.md here")
    parser.add_argument("--verbose", action="store_true", help="stream each run's output (always in runs/*.log)")
    args = parser.parse_args(argv)
    if args.min_duration_ms is not None and args.min_duration_ms <= 0:
        raise BenchError("--min_duration_ms must be positive")
    return args


# -------------------------------------------------------------------------------------------------------- main


def _device(run_args: list[str]) -> str:
    """Where the runs (and so the baseline) execute: --device from the run args, else cuda when present."""
    for token in reversed(run_args):
        if token.startswith("--device="):
            value = token.split("=", 1)[1]
            if value != "auto":
                return value
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    from code.common.systems import detect_system

    return detect_system().cpu_model or platform.processor() or "cpu"


def _server_start(benchmark: str, offline: OfflineResult | None, hints: dict[str, str], run_args: list[str]) -> float:
    """0.8 x the Offline throughput; else the --server_target_qps hint; else the config's value."""
    if "server_target_qps" in hints:
        return float(hints["server_target_qps"])
    if offline and offline.samples_per_second:
        return SERVER_START_FRACTION * offline.samples_per_second
    from code.actions.common import resolved_configs, system_name
    from code.common.arguments import parse_run_args

    request = parse_run_args(["--action=info", f"--benchmarks={benchmark}", "--scenarios=server", *run_args])
    (config,) = resolved_configs(request, system_name(request))
    return float(config["server_target_qps"])


def run_bench(args: argparse.Namespace, argv: list[str]) -> int:
    benchmarks = parse_list(
        args.benchmarks, {"bert": "bert-99", "bert-99": "bert-99", "bert-99.9": "bert-99.9"}, "benchmark"
    )
    scenarios = parse_list(args.scenarios, {name: s for s, name in SCENARIO_NAMES.items()}, "scenario")
    lengths = parse_list(args.offline_lengths, {"dataset": "dataset", "max": "max"}, "offline_length")
    run_args, hints = split_extra_run_args(args.extra_run_args)
    if args.quick:
        run_args = QUICK_RUN_ARGS + run_args
    durations = {
        s: args.min_duration_ms or (QUICK_DURATION_MS if args.quick else DEFAULT_DURATION_MS[s])
        for s in DEFAULT_DURATION_MS
    }
    probe_ms = args.probe_ms or max(500, durations[Scenario.Offline] // 4)
    device = _device(run_args)

    bench_dir = new_bench_dir()
    runner = HarnessRunner(bench_dir, run_args, args.verbose)
    durations_text = ", ".join(f"{s.value} {durations[s]:,} ms" for s in scenarios)
    if Scenario.Offline in scenarios:
        durations_text += f" (Offline probe {probe_ms:,} ms)"
    print(
        f"[bench] folder: {bench_dir}\n[bench] durations: {durations_text} (shortened; MLPerf: "
        f"{MLPERF_DURATION_MS:,} ms)\n[bench] device: {device}",
        flush=True,
    )
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "bench_dir": str(bench_dir),
        "device": _device_name(device),
        "device_kind": device,
        "quick": args.quick,
        "benchmarks": benchmarks,
        "scenarios": [s.value for s in scenarios],
        "durations_ms": {s.value: durations[s] for s in scenarios},
        "probe_ms": probe_ms,
        "durations_text": durations_text,
        "run_args": run_args,
        "hints": hints,
        "bench_command": shlex.join([sys.executable, "-m", "scripts.bench_bert", *argv]),
        "server_search": {},
        "runs": [],
    }
    parts: dict[str, dict[str, Any]] = {}

    def figures() -> list[Figure]:
        rows = []
        for benchmark, part in parts.items():
            rows += build_figures(
                benchmark,
                part.get("offline"),
                part.get("worst"),
                part.get("server"),
                part.get("single"),
                report.get("baseline"),
            )
        return rows

    def save() -> None:
        """Written after every step, so an interrupted bench keeps what it measured."""
        report["runs"] = [{**asdict(o), "verdict": o.verdict()} for o in runner.outcomes]
        first = next((o for o in runner.outcomes if o.system), None)
        if first:
            report["system"], report["versions"] = first.system, first.versions
        write_reports(bench_dir, report, figures(), args.out)

    for benchmark in benchmarks:
        part: dict[str, Any] = parts.setdefault(benchmark, {})
        base: dict[str, Any] = {}
        if Scenario.Offline in scenarios:
            offline_base = {**base, "min_query_count": QUICK_OFFLINE_MIN_QUERIES} if args.quick else base
            hint = float(hints["offline_expected_qps"]) if "offline_expected_qps" in hints else None
            if "dataset" in lengths:
                part["offline"] = measure_offline(
                    runner, benchmark, "dataset", durations[Scenario.Offline], probe_ms, hint, offline_base
                )
                save()
            if "max" in lengths:
                known = part.get("offline")
                worst_hint = None
                if known and known.samples_per_second and known.run.mean_length:
                    # Cost grows at least linearly with length: start a little above the linear estimate.
                    worst_hint = known.samples_per_second * known.run.mean_length / 384 * 1.25
                part["worst"] = measure_offline(
                    runner, benchmark, "max", durations[Scenario.Offline], probe_ms, worst_hint, offline_base
                )
                save()
        if Scenario.Server in scenarios:
            server_base = {**base, "min_query_count": SERVER_MIN_QUERIES}
            start = _server_start(benchmark, part.get("offline"), hints, run_args)
            search = search_server_qps(
                lambda qps, b=benchmark, sb=server_base: server_try(runner, b, durations[Scenario.Server], sb, qps),
                start,
                args.server_max_runs,
                args.server_tolerance,
            )
            part["server"] = search
            report["server_search"][benchmark] = {
                "start_qps": start,
                "best_qps": search.best_qps,
                "stopped_because": search.stopped_because,
                "tries": [asdict(t) for t in search.tries],
            }
            save()
        if Scenario.SingleStream in scenarios:
            hint_ns = int(hints.get("single_stream_expected_latency_ns", SINGLE_STREAM_HINT_NS))
            part["single"] = measure_singlestream(runner, benchmark, durations[Scenario.SingleStream], hint_ns, base)
            save()

    baseline = None
    if not args.skip_baseline:
        model_name = next((t.split("=", 1)[1] for t in reversed(run_args) if t.startswith("--model_name=")), "large")
        print(
            f"[bench] baseline: HF BertForQuestionAnswering ({model_name}), fp32, batch 1, 384 tokens, on {device}",
            flush=True,
        )
        baseline = measure_baseline(
            model_name, device, args.baseline_attention, seconds_per_repeat=0.5 if args.quick else 2.0
        )
        report["baseline"] = baseline
    save()

    rows = format_table(figures(), baseline)
    print("\n" + "=" * 32 + " BERT bench " + "=" * 32)
    print(
        f"device: {report['device']} (system {report.get('system', '?')}); torch "
        f"{report.get('versions', {}).get('torch', '?')}; {report['date']}"
    )
    print(f"durations: {durations_text} (shortened; MLPerf: {MLPERF_DURATION_MS:,} ms)")
    print("inputs: synthetic SQuAD-like lengths, random weights: NOT MLPerf results")
    print(render_text(rows))
    print(f"reports: {bench_dir / 'bench.md'}, {bench_dir / 'bench.json'}")
    return 1 if any(o.valid is None for o in runner.outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        return run_bench(parse_args(argv), argv)
    except BenchError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
