"""Harness runs: one LoadGen test per ``python -m code.main`` child process, and the Offline and SingleStream
measurements built on them.

Why child processes: each test runs exactly as ``make run`` does, so the bench measures the product, not a copy.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common.constants import Scenario
from code.common.paths import REPO_ROOT
from code.mlperf.run_record import read_record
from code.tuning import search
from scripts.bench.settings import SCENARIO_NAMES, profile_of


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
    mean_length: float | None = None  # prompt (input) tokens per sample
    generated_per_sample: float | None = None  # GPT-J: new tokens per completed sample, from the engine's counters
    # GPT-J: decode steps per completed sample; beam search may run past the returned answer's length, and the
    # steps, not the returned tokens, are what the engine spent
    steps_per_sample: float | None = None
    system: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_sample(self) -> float | None:
        """The tokens a sample's figure counts: generated ones for GPT-J (LoadGen only infers them, at a fixed 69
        per sample), input ones for BERT (it reads each token once and generates none)."""
        return self.generated_per_sample if profile_of(self.benchmark).counts_generated else self.mean_length

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
        record = read_record(found[0].parent)
        result = record.result_dict
        outcome.valid, outcome.value, outcome.unit = result.get("valid"), result.get("value"), result.get("unit")
        outcome.reasons = [str(r).strip() for r in result.get("invalid_reasons", [])]
        outcome.extra = dict(result.get("extra", {}))
        outcome.mean_length = record.provenance.get("input_lengths", {}).get("mean")
        stats = record.engine_stats
        if stats.get("completed"):
            outcome.generated_per_sample = stats["generated_tokens"] / stats["completed"]
            if "decode_steps" in stats:
                outcome.steps_per_sample = stats["decode_steps"] / stats["completed"]
        outcome.system = record.system_name
        outcome.versions = record.versions
        fields = record.fields
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
                "synthetic_output_lengths",
                "synthetic_sample_count",
                "kv_cache_dtype",
                "fp8_fast_accum",
                "backend",
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


def merge_flags(*groups: Sequence[str]) -> list[str]:
    """One ``--name=value`` per name, the last group's winning: the harness refuses a flag given twice, and a
    run's flags come from its family's defaults, then --quick's, then --extra_run_args, then the bench's own."""
    merged: dict[str, str] = {}
    for token in (t for group in groups for t in group):
        merged[token.split("=", 1)[0].replace("-", "_")] = token
    return list(merged.values())


class HarnessRunner:
    """Runs one LoadGen test per call through ``python -m code.main``, each into a new folder under ``runs/``.

    The first test of a (benchmark, scenario) uses ``--action=run`` (generate_engines, then the test); later ones
    ``--action=run_harness``, which reuses that engine (GPT-J FP8: the calibrated engine; others build nothing).
    ``run_args``: the flags of every run of a benchmark family ("bert", "gptj").
    """

    def __init__(self, bench_dir: Path, run_args: dict[str, list[str]], verbose: bool = False) -> None:
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
            *merge_flags(self.run_args[profile_of(benchmark).family], flags),
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
    case: str  # an OfflineCase name: "dataset" | "max" (BERT), "forced" | "full" (GPT-J)
    run: RunOutcome | None
    probe_qps: float | None = None

    @property
    def samples_per_second(self) -> float | None:
        return self.run.value if self.run else None

    @property
    def tokens_per_second(self) -> float | None:
        if self.run is None or self.run.value is None or self.run.tokens_per_sample is None:
            return None
        return self.run.value * self.run.tokens_per_sample


def measure_offline(
    runner: HarnessRunner,
    benchmark: str,
    case: str,
    duration_ms: int,
    probe_ms: int,
    hint_qps: float | None,
    base: dict[str, Any],
) -> OfflineResult:
    """The product's probe-then-confirm (code/tuning/search.py), each run a bench run of this Offline case.

    ``case``: one of the benchmark's Offline cases (settings.PROFILES), whose run fields every run here gets.
    """
    settings = {**base, **profile_of(benchmark).case(case).fields}

    def run(label: str, fields: dict[str, Any]) -> RunOutcome:
        name = {"probe": f"{case}-probe", "confirm": case, "rerun1": f"{case}-rerun"}.get(label, f"{case}-{label}")
        return runner.run(name, benchmark, Scenario.Offline, {**settings, **fields})

    measured = search.measure_offline(run, probe_ms, duration_ms, hint_qps)
    last = measured.confirmed or (measured.tries[-1][1] if measured.tries else None)
    return OfflineResult(benchmark, case, last, measured.probe_value)


# -------------------------------------------------------------------------------------------------- SingleStream


def measure_singlestream(
    runner: HarnessRunner, benchmark: str, duration_ms: int, hint_ns: int, base: dict[str, Any]
) -> RunOutcome:
    """The product's SingleStream run (code/tuning/search.py) from a known hint: re-run at half the measured mean
    latency while the run ends early."""

    def run(label: str, fields: dict[str, Any]) -> RunOutcome:
        name = {"confirm": "p90", "rerun1": "p90-rerun"}.get(label, f"p90-{label}")
        return runner.run(name, benchmark, Scenario.SingleStream, {**base, **fields})

    measured = search.measure_singlestream(run, duration_ms, duration_ms, hint_ns)
    assert measured.confirmed is not None  # a hint skips the probe: the first run is the confirming one
    return measured.confirmed
