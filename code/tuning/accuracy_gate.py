"""The accuracy gate: which engine of a config's engine ladder a run uses, decided by the real accuracy run.

With the real checkpoint and data set, a run first runs AccuracyOnly with the ladder's first engine that has not
missed the target on this system and checkpoint. A miss is said in one line and stored (``code/config/tuned.py``),
and the next engine is built and tried; the performance tests use the engine that passed, and metadata.json and the
summary say which and why. A miss of the last engine ends the run (exit status 3) with the fix. On synthetic inputs,
random weights or a ``--num_samples`` subset the figures mean nothing for the real model, so the gate is not
applied; an engine field given in RUN_ARGS skips ladder and gate.

The run's own accuracy test is the gate's run, in its usual folder; a run that missed, and the gate's run of a
PerformanceOnly run, go to ``<run>/gate/<engine>/<system>/<bench>/<Scenario>/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common.constants import TestMode
from code.common.log import get_logger
from code.config.fields import FIELDS
from code.config.ladder import Rung, engine_fields, engine_values, same_engine
from code.config.resolve import resolve_config
from code.config.resolved import ResolvedConfig
from code.config.tuned import (
    EngineMiss,
    TunedStoreError,
    clear_misses,
    code_version,
    misses_path,
    read_misses,
    record_miss,
    shown,
)
from code.mlperf.benchmarks import BenchmarkError, load_benchmark
from code.mlperf.devices import release_cached_gpu_memory
from code.mlperf.inputs import checkpoint_identity
from code.mlperf.run_logs import TestResult, make_test_log_dir, relocate_test
from code.mlperf.run_record import RunRecord, read_record, write_record
from code.mlperf.summary import RanTest
from code.processes.test_process import run_child, test_spec

log = get_logger("accuracy_gate")
GATE_SUBDIR = "gate"  # <run>/gate/<engine>/...: the gate's accuracy runs that are not the run's own accuracy test


def resolve_rung(config: ResolvedConfig, overrides: dict[str, Any], rung: str | None, warn_tuned: bool = False
                 ) -> ResolvedConfig:
    """``config`` resolved again with the ladder's rung ``rung``."""
    return resolve_config(config.benchmark, config.scenario, config.system, config.workload, overrides,
                          warn_tuned=warn_tuned, rung=rung)


@dataclass
class GatePlan:
    """Where a config's run starts on its ladder, and whether the accuracy gate decides its engine."""

    config: ResolvedConfig  # resolved with the engine the run starts with; its ``engine_choice`` says why
    overrides: dict[str, Any]  # the RUN_ARGS it was resolved with
    applies: bool = False  # an AccuracyOnly run decides the engine
    rungs: list[Rung] = field(default_factory=list)  # the engines left to try, the first one first
    missed_before: list[EngineMiss] = field(default_factory=list)  # stored misses on this checkpoint
    checkpoint: str = ""
    identity: Any = None  # the checkpoint's (code/mlperf/inputs.py); the misses are stored with it

    @property
    def exhausted(self) -> bool:
        return self.applies and not self.rungs

    @property
    def name(self) -> str:
        return f"{self.config.benchmark_name} {self.config.scenario.value}"


def _given(config: ResolvedConfig, overrides: dict[str, Any]) -> str:
    """The engine fields RUN_ARGS give, as flags: the ladder's, then any other, so the line names the whole engine."""
    names = [*config.engine_given,
             *(name for name in overrides if FIELDS[name].engine and name not in config.engine_given)]
    return " ".join(f"--{name}={str(config[name]).lower() if isinstance(config[name], bool) else config[name]}"
                    for name in names)


def _missed(misses: list[EngineMiss]) -> str:
    return ", ".join(f"{miss.engine} ({'; '.join(miss.failures) or 'missed'})" for miss in misses)


def _above(misses: list[EngineMiss]) -> str:
    return f"; above it {_missed(misses)} missed" if misses else ""


def _records(config: ResolvedConfig) -> str:
    return shown(misses_path(config.system, config.benchmark_name, config.scenario))


def choice(config: ResolvedConfig, gate: str, summary: str | None, **more: Any) -> dict[str, Any]:
    """What metadata.json records of the engine: rung, values, ladder, what the gate did (none, skipped, not
    applied, this run, passed, missed, exhausted) and the summary's line."""
    rung = config.rung
    return {"engine": rung.name if rung else None, "description": rung.why if rung else None,
            "ladder": [each.name for each in config.ladder], "values": engine_values(config.values), "gate": gate,
            "summary": summary, **more}


def plan(config: ResolvedConfig, overrides: dict[str, Any], clear_stale: bool = False) -> GatePlan:
    """The engine a run of ``config`` starts with, and whether the gate applies. ``clear_stale`` drops misses stored
    for another checkpoint (a run does; ``make info`` and engine builds only read)."""
    ladder = config.ladder
    gate_plan = GatePlan(config, overrides)
    if not ladder:
        return _resolved(gate_plan, None, "none", None)
    names = ", ".join(rung.name for rung in ladder)
    if config.engine_given:
        engine = f"{config.rung.name}, " if config.rung else ""
        given = _given(config, overrides)
        return _resolved(gate_plan, config.rung, "skipped", f"{engine}given in RUN_ARGS ({given}): the engine ladder "
                         f"({names}) and its accuracy gate are skipped")
    first = ladder[0]
    try:
        inputs = load_benchmark(config.benchmark).describe_inputs(config, TestMode.PerformanceOnly)
    except BenchmarkError as error:  # the run refuses it itself, with this message
        return _resolved(gate_plan, first, "not applied", f"{first.name}, the ladder's first: the accuracy gate was "
                         f"not applied ({error})")
    reasons = [reason for applies, reason in (
        (inputs["synthetic_inputs"], "synthetic inputs"), (inputs["checkpoint"] == "random", "random weights"),
        (config["num_samples"] is not None, f"--num_samples={config['num_samples']}, a quick check on part of the "
         "data set")) if applies]
    if reasons:
        return _resolved(gate_plan, first, "not applied", f"{first.name}, the ladder's first ({names}): the accuracy "
                         f"gate was not applied: {', '.join(reasons)} decide nothing about accuracy")

    checkpoint = inputs["checkpoint"]
    identity: Any = checkpoint_identity(Path(checkpoint)) if Path(checkpoint).exists() else checkpoint
    stored, problem = read_misses(config.system, config.benchmark_name, config.scenario)
    if problem:
        log.warning("%s", problem)
    missed: dict[str, EngineMiss] = {}
    if stored is not None:
        if (stored.checkpoint, stored.checkpoint_identity) == (checkpoint, identity):
            missed = {miss.engine: miss for miss in stored.misses}
        elif clear_stale:
            clear_misses(config.system, config.benchmark_name, config.scenario)
            log.info("%s %s: the engines that missed were recorded for another checkpoint (%s, as it was then); this "
                     "run's is %s: record cleared, the ladder starts at %s", config.benchmark_name,
                     config.scenario.value, stored.checkpoint, checkpoint, first.name)
    gate_plan.applies, gate_plan.checkpoint, gate_plan.identity = True, checkpoint, identity
    for rung in ladder:
        miss = missed.get(rung.name)
        # a stored miss holds for the engine it measured: a rung whose engine fields changed since is tried again
        if miss is not None and same_engine(miss.values,
                                            engine_values(resolve_rung(config, overrides, rung.name).values)):
            gate_plan.missed_before.append(miss)
        else:
            gate_plan.rungs.append(rung)
    records = _records(config)
    misses = {"misses": [vars(miss) for miss in gate_plan.missed_before], "records": records}
    if not gate_plan.rungs:
        return _resolved(gate_plan, ladder[-1], "exhausted", "none: every engine of the ladder missed the accuracy "
                         f"target on this checkpoint before: {_missed(gate_plan.missed_before)}", **misses)
    start = gate_plan.rungs[0]
    below = f"; {_missed(gate_plan.missed_before)} missed it before (recorded in {records})" \
        if gate_plan.missed_before else ""
    return _resolved(gate_plan, start, "this run", f"{start.name}: its AccuracyOnly run is the accuracy gate{below}",
                     **misses)


def _resolved(gate_plan: GatePlan, rung: Rung | None, gate: str, summary: str | None, **more: Any) -> GatePlan:
    """The plan with its config resolved again for ``rung`` (with warnings: this config runs) and its engine choice."""
    gate_plan.config = resolve_rung(gate_plan.config, gate_plan.overrides, rung.name if rung else None, True)
    gate_plan.config.engine_choice = choice(gate_plan.config, gate, summary, **more)
    return gate_plan


def exhausted_line(gate_plan: GatePlan, misses: list[EngineMiss]) -> str:
    config = gate_plan.config
    records = _records(config)
    return (f"every engine of the ladder of {gate_plan.name} ({', '.join(rung.name for rung in config.ladder)}) missed "
            f"the accuracy target on {gate_plan.checkpoint}: {_missed(misses)}; recorded in {records}. The last is the "
            f"safest engine the config has, so check the checkpoint and the data set (make download_model "
            f"preprocess_data BENCHMARKS={config.benchmark.value} fetches and prepares them again), then delete "
            f"{records} to try the ladder again; or give the engine in RUN_ARGS "
            f"({' '.join(f'--{name}=...' for name in engine_fields(config.ladder))}), which runs it without the gate")


@dataclass
class GateOutcome:
    """What the gate's accuracy runs of one config ended with."""

    config: ResolvedConfig | None  # resolved with the engine that passed; None: none did
    results: list[RanTest] = field(default_factory=list)  # every accuracy run, for the summary
    stop: str | None = None  # every engine missed: why the run ends here, and the fix


class Gate:
    """Runs the gates' accuracy runs, one child process each; remembers the running one, so an interruption can mark
    it incomplete."""

    def __init__(self, system: str, root: Path) -> None:
        self.system, self.root = system, root
        self.running: dict | None = None

    def folder(self, config: ResolvedConfig, rung: Rung) -> Path:
        return self.root / GATE_SUBDIR / rung.name / self.system / config.benchmark_name / config.scenario.value

    def run(self, gate_plan: GatePlan, own: TestMode | None) -> GateOutcome:
        """Try the plan's engines in order until one passes. ``own``: the run's own test mode when it has an accuracy
        test, whose folder the gate's runs take."""
        outcome = GateOutcome(None)
        misses = list(gate_plan.missed_before)
        for index, rung in enumerate(gate_plan.rungs):
            config = gate_plan.config if index == 0 else self.next_engine(gate_plan, rung)
            done = self.try_engine(config, rung, own, misses, gate_plan.overrides)
            outcome.results.append(done)
            _, result, record = done
            if result.valid is None or not result.complete:
                return outcome  # it did not finish: not a miss, and nothing to go on with (its ERROR is shown)
            accuracy = (result.accuracy or {}).get("summary", "")
            if result.valid:
                config.engine_choice = choice(config, "passed", f"{rung.name}: passed the accuracy gate, {accuracy}"
                                              f"{_above(misses)}", accuracy_run=result.log_dir,
                                              misses=[vars(m) for m in misses], records=_records(config))
                outcome.config = config
                return outcome
            misses.append(self.record(gate_plan, config, rung, result, record,
                                      gate_plan.rungs[index + 1] if index + 1 < len(gate_plan.rungs) else None))
        outcome.stop = exhausted_line(gate_plan, misses)
        return outcome

    def next_engine(self, gate_plan: GatePlan, rung: Rung) -> ResolvedConfig:
        """The next engine's config, its engine built (as make generate_engines would)."""
        config = resolve_rung(gate_plan.config, gate_plan.overrides, rung.name, warn_tuned=True)
        print(flush=True)
        report = load_benchmark(config.benchmark).generate_engine(config)
        release_cached_gpu_memory()  # the accuracy run is another process, on the same GPUs
        log.info("%s: the next engine, %s: %s", gate_plan.name, rung.name,
                 ", ".join(f"{key}: {value}" for key, value in report.items()))
        return config

    def try_engine(self, config: ResolvedConfig, rung: Rung, own: TestMode | None, misses: list[EngineMiss],
                   overrides: dict[str, Any]) -> RanTest:
        config.engine_choice = choice(config, "this run", f"{rung.name}: this AccuracyOnly run is its accuracy gate"
                                      f"{_above(misses)}")
        if own is not None:
            log_dir = make_test_log_dir(self.root, self.system, config.benchmark_name, config.scenario,
                                        TestMode.AccuracyOnly, submission_layout=own is TestMode.SubmissionRun)
        else:
            log_dir = self.folder(config, rung)
            log_dir.mkdir(parents=True)
        spec = test_spec(self.system, config, TestMode.AccuracyOnly, overrides, log_dir)
        print(flush=True)
        log.info("%s %s %s: accuracy gate of engine %s (%s)", self.system, config.benchmark_name,
                 config.scenario.value, rung.name, rung.why)
        self.running = spec
        result, record = run_child(spec, log_dir)
        self.running = None
        return config.benchmark_name, result, record

    def record(self, gate_plan: GatePlan, config: ResolvedConfig, rung: Rung, result: TestResult, record: RunRecord,
               following: Rung | None) -> EngineMiss:
        """Store a miss, say it in one line, and move its run out of the folder the next engine's run takes."""
        accuracy = result.accuracy or {}
        log_dir = Path(result.log_dir)
        gate_dir = self.folder(config, rung)
        if log_dir != gate_dir:
            log_dir = relocate_test(log_dir, gate_dir)
            result.log_dir = str(log_dir)
            record.data = read_record(log_dir).data  # its paths, moved
        miss = EngineMiss(rung.name, engine_values(config.values), accuracy.get("summary", ""),
                          list(accuracy.get("failures") or result.invalid_reasons), str(log_dir),
                          time.strftime("%Y-%m-%dT%H:%M:%S%z"), code_version())
        try:
            path = shown(record_miss(config.system, config.benchmark_name, config.scenario, gate_plan.checkpoint,
                                     gate_plan.identity, miss))
        except TunedStoreError as error:  # the ladder goes on; only the next run's head start is lost
            path = f"nowhere ({error})"
        then = f"; building and trying {following.name}" if following else "; it was the ladder's last engine"
        log.warning("%s: engine %s missed the accuracy target: %s; recorded in %s%s", gate_plan.name, rung.name,
                    "; ".join(miss.failures) or miss.score or "no score", path, then)
        record.update_engine(gate="missed", next=following.name if following else None, records=path,
                             summary=f"{rung.name}: MISSED the accuracy target ({'; '.join(miss.failures)}); "
                                     f"recorded in {path}" + (f"; {following.name} next" if following else ""))
        write_record(log_dir, record)
        return miss
