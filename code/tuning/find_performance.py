"""``make find_performance``: measure this system and store the settings that make its runs VALID, one LoadGen try
per child process (as every test runs); the searches are ``code/tuning/search.py``'s.

Each value is stored as soon as it is found (``code/config/tuned.py``), with its engine, so a Ctrl-C keeps what was
found before it; the stopped try is marked incomplete. A config with an engine ladder first runs its accuracy gate:
the search measures the engine that passed. ``probe_setting`` is the short probe a ``--test_run`` takes first when
no tuned value is stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.constants import ExitCode, Scenario, TestMode
from code.common.faults import describe
from code.common.loadgen_rules import offline_query_samples
from code.common.log import get_logger
from code.common.supervision import Interrupted, stop_signals_ignored, stop_signals_raise
from code.config.resolved import ResolvedConfig
from code.config.tuned import (
    TUNED_FIELDS,
    TunedStoreError,
    check_writable,
    read_tuned,
    run_settings,
    shown,
    write_tuned,
)
from code.mlperf.arguments import RunRequest
from code.mlperf.benchmarks import load_benchmark
from code.mlperf.devices import resolve_devices
from code.mlperf.run_logs import TestResult, new_run_root, read_detail_log
from code.mlperf.run_record import mark_incomplete
from code.mlperf.user_conf import TEST_RUN_MIN_DURATION_MS, loaded_samples
from code.processes.test_process import check_round, require_built_core, run_child, test_spec
from code.tuning import search
from code.tuning.plans import gate_plans, system_name

log = get_logger("find_performance")

PROBE_MS = 10_000  # how long a probe runs (at most the tries' duration)
# How long each confirming run and Server try runs unless --min_duration says otherwise: long enough for LoadGen's
# early stopping with MIN_QUERIES, short enough to search in minutes.
TRY_MS = TEST_RUN_MIN_DURATION_MS
# min_query_count of the tries unless --min_query_count says otherwise (a probe runs with 1): Offline's one query is
# sized by the rate; SingleStream's p90 and Server's p99 early-stopping estimates need these many.
MIN_QUERIES = {Scenario.Offline: 1, Scenario.SingleStream: 64, Scenario.Server: search.SERVER_MIN_QUERIES}
# A --test_run's Offline probe is repeated (at most this many in all) while its query ends before half the probe
# duration, each sized by the rate the last one measured.
PROBES = 4
# The Server search tries no rate so low that its queries would take longer than this (min_query_count / rate).
MAX_SERVER_TRY_S = 900


@dataclass
class Try:
    """One LoadGen try, as the searches read it (``search.Outcome``)."""

    label: str
    valid: bool | None
    value: float | None
    reasons: list[str]
    extra: dict[str, Any]
    log_dir: str

    @classmethod
    def of(cls, label: str, result: TestResult) -> Try:
        valid = result.valid if result.complete else None
        return cls(label, valid, result.value, list(result.invalid_reasons), dict(result.extra), result.log_dir)

    def line(self) -> str:
        verdict = {None: "FAILED", True: "VALID", False: "INVALID"}[self.valid]
        figure = "no figure" if self.value is None else f"{self.value:,.4g}"
        return f"{figure} {verdict}" + (f" ({'; '.join(self.reasons)})" if self.reasons and not self.valid else "")


@dataclass
class Found:
    """What the search of one (benchmark, scenario) ended with."""

    benchmark: str
    scenario: str
    field: str
    before: Any
    before_source: str
    value: float | int | None = None
    how: str = ""
    stored: str | None = None  # the tuned file, once written
    problem: str | None = None  # why nothing was stored
    tries: list[str] = field(default_factory=list)  # each try's log folder
    engine: str | None = None  # which engine of the config's ladder was measured, and why

    def line(self) -> str:
        head = f"  {self.benchmark:<10} {self.scenario:<13} {self.field}"
        if self.stored:
            line = f"{head} {_fmt(self.before)} -> {_fmt(self.value)}  stored in {self.stored} ({self.how})"
        else:
            line = f"{head} stays {_fmt(self.before)} [{self.before_source}]: NOT STORED: {self.problem}"
        return line + (f"\n      engine: {self.engine}" if self.engine else "")


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class Runner:
    """Runs the tries of one (benchmark, scenario) in child processes; remembers the running one so an interruption
    can mark it incomplete."""

    def __init__(self, system: str, config: ResolvedConfig, overrides: dict[str, Any], root: Path) -> None:
        self.system, self.config, self.overrides = system, config, overrides
        self.folder = root / "find_performance" / system / config.benchmark_name / config.scenario.value
        self.running: dict | None = None
        self.log_dirs: list[str] = []

    def __call__(self, label: str, fields: dict[str, Any]) -> Try:
        count = len(self.log_dirs) + 1
        log_dir = self.folder / f"{count:02d}-{label}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dirs.append(str(log_dir))
        overrides = {**self.overrides, **fields, "test_mode": TestMode.PerformanceOnly.value}
        spec = test_spec(self.system, self.config, TestMode.PerformanceOnly, overrides, log_dir)
        settings = ", ".join(f"{name}={_fmt(value)}" for name, value in fields.items())
        print(flush=True)
        log.info("%s %s %s try %d (%s): %s", self.system, self.config.benchmark_name, self.config.scenario.value,
                 count, label, settings)
        self.running = spec
        result, _ = run_child(spec, log_dir)
        self.running = None
        outcome = Try.of(label, result)
        log.info("%s %s %s: %s", self.config.benchmark_name, self.config.scenario.value, label, outcome.line())
        return outcome


def try_fields(config: ResolvedConfig, overrides: dict[str, Any], label: str, duration_ms: int,
               probe_ms: int) -> dict[str, Any]:
    """A try's durations and query counts: a probe is short with one query."""
    if label == "probe":
        return {"min_duration": probe_ms, "min_query_count": 1}
    return {"min_duration": duration_ms,
            "min_query_count": overrides.get("min_query_count", MIN_QUERIES[config.scenario])}


def durations(overrides: dict[str, Any]) -> tuple[int, int]:
    """(try, probe) durations in ms: --min_duration sets the tries' (and caps the probe's)."""
    duration_ms = int(overrides.get("min_duration") or TRY_MS)
    return duration_ms, min(PROBE_MS, duration_ms)


def find_performance(request: RunRequest) -> int:
    from code.tuning.accuracy_gate import Gate

    system = system_name(request)
    plans = list(gate_plans(request, system, clear_stale=True))
    configs = [gate_plan.config for gate_plan in plans]
    for config in configs:
        mode = TestMode.parse(config["test_mode"])
        if mode is not TestMode.PerformanceOnly:
            log.error("--find_performance measures performance, but the config of %s %s sets test_mode=%s: give "
                      "--test_mode=PerformanceOnly with --find_performance", config.benchmark_name,
                      config.scenario.value, mode.value)
            return ExitCode.BAD_INPUT
        check_round(config)
    for config in configs:
        require_built_core(config["round"])
        load_benchmark(config.benchmark).describe_inputs(config, TestMode.PerformanceOnly)
    try:
        check_writable(system)
    except TunedStoreError as error:
        print(f"ERROR: {error}", flush=True)
        return ExitCode.TEST_FAILED
    root = new_run_root(request.overrides.get("log_dir"))
    overrides = {k: v for k, v in request.overrides.items() if k != "log_dir"}
    duration_ms, probe_ms = durations(overrides)
    log.info("logs: %s; tries of %g s (probes %g s), each a LoadGen test of its own", root, duration_ms / 1000,
             probe_ms / 1000)
    found: list[Found] = []
    runner: Runner | None = None
    gate = Gate(system, root)
    try:
        with stop_signals_raise():
            for gate_plan in plans:
                config = gate_plan.config
                if gate_plan.applies:  # the engine that meets the accuracy target is the one to measure
                    outcome = gate.run(gate_plan, None)
                    if outcome.config is None:
                        name = TUNED_FIELDS[config.scenario]
                        found.append(Found(config.benchmark_name, config.scenario.value, name, config[name],
                                           config.sources[name], problem=outcome.stop or "the accuracy run of its "
                                           "engine did not finish (its ERROR is above)",
                                           tries=[result.log_dir for _, result, _ in outcome.results]))
                        if outcome.stop:
                            log.error("%s", outcome.stop)
                            break
                        continue
                    config = outcome.config
                runner = Runner(system, config, overrides, root)
                found.append(search_one(runner, config, overrides, duration_ms, probe_ms, found))
                runner = None
    except Interrupted as stop:
        with stop_signals_ignored():
            log.warning(_interrupted(stop, runner, found, configs, gate.running))
            _finish(system, root, found, configs, overrides)
        return stop.exit_status
    _finish(system, root, found, configs, overrides)
    if all(item.stored for item in found):
        return ExitCode.OK
    return ExitCode.INVALID


def _interrupted(stop: Interrupted, runner: Runner | None, found: list[Found], configs: list[ResolvedConfig],
                 gate_running: dict | None = None) -> str:
    def mark(spec: dict, what: str) -> None:
        mark_incomplete(Path(spec["log_dir"]), spec["scenario"], spec["mode"],
                        f"interrupted by {stop.signal_name}; {what}", {"test_spec": spec})

    line = f"{stop} during find_performance"
    if gate_running is not None:
        mark(gate_running, "the accuracy gate's run of find_performance")
        line += f" (the accuracy gate's run in {gate_running['log_dir']}, marked incomplete)"
    if runner is not None:
        line += f" ({runner.config.benchmark_name} {runner.config.scenario.value})"
        if runner.running is not None:
            mark(runner.running, "a find_performance try, not stored")
            line += f": stopped the try in {runner.running['log_dir']} (marked incomplete; nothing stored from it)"
    kept = [f"{item.benchmark} {item.scenario}" for item in found if item.stored]
    line += f"; kept what was found before: {', '.join(kept) if kept else 'nothing yet'}"
    left = len(configs) - len(found)
    if left:
        line += f"; {left} search(es) not finished or not started"
    return line


def next_run_command(found: list[Found], overrides: dict[str, Any]) -> str:
    """``make run`` of what was stored, with the flags that make the run use it: a tuned value holds only for the
    speed-changing RUN_ARGS it was measured with, and the round decides which LoadGen runs."""
    benchmarks = ",".join(dict.fromkeys(item.benchmark for item in found if item.stored))
    scenarios = ",".join(dict.fromkeys(item.scenario.lower() for item in found if item.stored))
    kept = [name for name in sorted(overrides) if name in run_settings(overrides) or name == "round"]

    def flag(name: str) -> str:
        value = overrides[name]
        if isinstance(value, bool):
            return f" --{name}" if value else f" --{name}=false"
        return f" --{name}={value}"

    flags = "".join(flag(name) for name in kept)
    return f'make run RUN_ARGS="--benchmarks={benchmarks} --scenarios={scenarios}{flags}"'


def _finish(system: str, root: Path, found: list[Found], configs: list[ResolvedConfig],
            overrides: dict[str, Any]) -> None:
    lines = ["", "=" * 30 + " Find performance " + "=" * 30, f"{system}:"]
    lines += [item.line() for item in found]
    searched = {(item.benchmark, item.scenario) for item in found}
    lines += [f"  {c.benchmark_name:<10} {c.scenario.value:<13} not searched (interrupted)" for c in configs
              if (c.benchmark_name, c.scenario.value) not in searched]
    if any(item.stored for item in found):
        lines.append(f'  Next: {next_run_command(found, overrides)} uses them; make info shows each as "tuned '
                     '(<file>)"; RUN_ARGS still win over them.')
    lines += [f"  Logs: {root}", "=" * 78]
    text = "\n".join(lines)
    print(text, flush=True)
    records = [vars(item) for item in found]
    try:
        atomic.write_text(root / "find_performance.txt", text.strip() + "\n")
        atomic.write_text(root / "find_performance.json", json.dumps(records, indent=2, default=str) + "\n")
    except OSError as error:
        message = describe(error, writing_in=root)
        if message is None:
            raise
        log.warning("the find_performance summary not saved: %s", message)


def search_one(runner: Runner, config: ResolvedConfig, overrides: dict[str, Any], duration_ms: int, probe_ms: int,
               earlier: list[Found]) -> Found:
    scenario = config.scenario
    name = TUNED_FIELDS[scenario]
    item = Found(config.benchmark_name, scenario.value, name, config[name], config.sources[name],
                 engine=config.engine_choice.get("summary"))

    def run(label: str, fields: dict[str, Any]) -> Try:
        return runner(label, {**try_fields(config, overrides, label, duration_ms, probe_ms), **fields})

    hint = overrides.get(name)  # a value given with the flag: start there instead of probing
    if scenario is Scenario.Server:
        start = search.round_qps(float(hint) if hint is not None else server_start(config, earlier))
        result = search.search_server_qps(lambda qps: search.judge_server_try(qps, run(f"qps{qps:g}", {name: qps})),
                                          start, search.SERVER_MAX_TRIES, search.SERVER_TOLERANCE,
                                          down_step=search.SERVER_DOWN_STEP, floor_qps=server_floor(overrides))
        if result.best_qps is None:
            item.problem = (result.nothing_valid() + "; the latency bound cannot be held at these rates: see "
                            "documentation/performance_tuning_guide.md (Server knobs: gpu_batch_size, "
                            "batch_timeout_us, num_workers), or start lower with --server_target_qps=<rate>")
        else:
            item.value = result.best_qps
            item.how = (f"highest VALID of {len(result.tries)} Server tries of {duration_ms / 1000:g} s from "
                        f"{start:g} QPS, {result.stopped_because} (tolerance {result.tolerance:.0%})")
    else:
        measure = search.measure_offline if scenario is Scenario.Offline else search.measure_singlestream
        measured = measure(run, probe_ms, duration_ms, hint)
        if measured.valid:
            item.value = measured.value
            probe = ""
            if measured.probe_value is not None:
                probe = (f"probe {measured.probe_value:.4g} samples/s over {probe_ms / 1000:g} s, "
                         if scenario is Scenario.Offline else
                         f"probe mean latency {measured.probe_value / 1e6:.4g} ms over {probe_ms / 1000:g} s, ")
            item.how = f"{probe}VALID at {name}={_fmt(measured.value)} over {duration_ms / 1000:g} s"
        else:
            item.problem = measured.why_not()
    item.tries = list(runner.log_dirs)
    if item.value is not None:
        try:
            path = write_tuned(runner.system, config.benchmark_name, scenario, item.value, item.how,
                               run_settings(overrides), engine=config.rung.name if config.rung else "")
            item.stored = shown(path)
        except TunedStoreError as error:
            item.problem = f"{error}; give it by hand meanwhile: --{name}={_fmt(item.value)}"
    return item


def server_floor(overrides: dict[str, Any]) -> float:
    """The lowest rate worth a Server try: one whose queries take at most ``MAX_SERVER_TRY_S``."""
    return int(overrides.get("min_query_count", MIN_QUERIES[Scenario.Server])) / MAX_SERVER_TRY_S


def server_start(config: ResolvedConfig, earlier: list[Found]) -> float:
    """0.8 x the Offline rate found just now, else 0.8 x the stored Offline one, else the config's target."""
    offline = next((f for f in earlier if f.benchmark == config.benchmark_name and f.scenario == "Offline"
                    and f.value is not None), None)
    if offline is not None:
        return search.SERVER_START_FRACTION * float(offline.value) / search.QPS_MARGIN
    given = {name: config.values[name] for name, source in config.sources.items() if source == "RUN_ARGS"}
    stored, _ = read_tuned(config.system, config.benchmark_name, Scenario.Offline, run_settings(given),
                           config.rung.name if config.rung else "")
    if stored is not None:
        return search.SERVER_START_FRACTION * float(stored.value) / search.QPS_MARGIN
    return float(config["server_target_qps"])


@dataclass
class Probe:
    """What a --test_run's probe found: the field to override and the summary's note; neither when it measured
    nothing; ``failed`` when its process failed (the test would fail the same way, so it is not run)."""

    fields: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    failed: TestResult | None = None


def query_of(log_dir: Path) -> tuple[int, float]:
    """(samples, seconds) of the Offline query a test ran, from LoadGen's detail log; (0, 0.0) when it does not say."""
    detail = read_detail_log(log_dir)
    samples = detail.get("generated_samples_per_query") or detail.get("effective_samples_per_query") or 0
    return int(samples), float(detail.get("result_max_latency_ns") or 0) / 1e9


def issued_query(samples: int, detail: dict[str, Any], loaded: int) -> tuple[int, str]:
    """The samples LoadGen issues for an Offline query planned at ``samples``, and a note when equal-issue mode (GPT-J,
    as ``detail`` says) pads it to a multiple of the ``loaded`` samples."""
    if not detail.get("effective_sample_concatenate_permutation"):
        return samples, ""
    issued = search.equal_issue_samples(samples, loaded)
    if issued == samples:
        return samples, ""
    return issued, f" ({samples} planned, padded by LoadGen to a multiple of the {loaded} loaded samples)"


def _batch(config: ResolvedConfig) -> int:
    """A batch on each of the run's devices: a probe's first query, so that it measures every device."""
    return int(config.values.get("gpu_batch_size") or 1) * len(resolve_devices(config))


# The samples a SingleStream probe loads: enough prompt lengths for a mean latency like the test's (GPT-J's follows
# its output length), and a bound on what equal-issue mode adds past the probe duration (a multiple of them).
SINGLESTREAM_PROBE_SAMPLES = 16


def probe_setting(system: str, config: ResolvedConfig, overrides: dict[str, Any], log_dir: Path) -> Probe:
    """A short PerformanceOnly probe before a ``--test_run`` whose config does not know this machine.

    Offline: the config's rate may be far off, so the first query is one batch (or the config's query, if smaller),
    and while a query ends before half the probe duration the next is sized by the rate just measured. Each probe
    loads only its query's samples, so equal-issue mode (``EQUAL_ISSUE``) cannot pad it to the whole loaded set. The
    test's query then holds the rate x its duration x ``search.PROBE_QPS_MARGIN``. SingleStream: the test expects
    0.9 x the mean latency seen."""
    scenario = config.scenario
    name = TUNED_FIELDS[scenario]
    duration_ms, probe_ms = durations(overrides)
    fields = {**try_fields(config, overrides, "probe", TRY_MS, probe_ms), "test_mode": TestMode.PerformanceOnly.value}
    log.info("%s %s: no tuned %s for this system (make find_performance stores one): probing about %g s first",
             config.benchmark_name, scenario.value, name, probe_ms / 1000)
    batch = _batch(config)
    offline = scenario is Scenario.Offline
    samples = max(1, min(batch, offline_query_samples(float(config[name]), probe_ms))) if offline else 0
    queries: list[tuple[int, float]] = []  # each Offline probe's (samples, seconds)
    for attempt in range(1, PROBES + 1):
        loads: dict[str, int] = {}
        if offline:  # the probe loads the samples of the query LoadGen plans (user_conf_entries)
            fields["offline_expected_qps"] = search.qps_for_query(samples, probe_ms)
            loads["probe_samples"] = offline_query_samples(fields["offline_expected_qps"], probe_ms)
        elif scenario is Scenario.SingleStream:
            loads["probe_samples"] = SINGLESTREAM_PROBE_SAMPLES
        folder = log_dir if attempt == 1 else log_dir.with_name(f"{log_dir.name}-{attempt}")
        folder.mkdir(parents=True, exist_ok=True)
        spec = {**test_spec(system, config, TestMode.PerformanceOnly, {**overrides, **fields}, folder),
                "role": "probe", **loads}
        result, _ = run_child(spec, folder)
        if result.valid is None:
            result.invalid_reasons.insert(0, "the probe before the test failed")
            return Probe(failed=result)
        probe = Try.of("probe", result)
        ran, seconds = query_of(folder)
        queries.append((ran, seconds))
        if not offline or not probe.value or seconds >= probe_ms / 2000 or attempt == PROBES:
            break
        samples = search.next_probe_samples(ran or samples, probe.value, batch, probe_ms)
        log.info("the probe's query of %d samples ended in %.3g s at %s samples/s: probing again with %d samples",
                 ran, seconds, _fmt(probe.value), samples)
    if offline and probe.value:
        # The rate past start-up where two probes give it (a short query's own rate reads low), else the query's.
        sustained = search.sustained_rate(queries)
        rate = max(probe.value, sustained or 0.0)
        planned = search.probed_test_samples(rate, ran, batch, duration_ms)
        value: float | int = search.qps_for_query(planned, duration_ms)
        detail = read_detail_log(folder)
        # The probe loaded only its query's samples; the test loads the data set's (user.conf's rule). Without the
        # data set's size in the log, no padding is foretold.
        total = int(detail.get("qsl_reported_total_count") or 0)
        query, padding = issued_query(planned, detail, loaded_samples(config, total)) if total else (planned, "")
        probes = ""
        if len(queries) > 1:
            probes = f"; {len(queries)} probes, {sum(s for _, s in queries):.3g} s in all"
            if rate > probe.value:
                probes += f", {rate:.4g} samples/s past start-up"
        measured = (f"{probe.value:.4g} samples/s, {ran} samples in {seconds:.3g} s{probes}; the test's query: "
                    f"{query} samples{padding}, ~{query / rate:.0f} s at {rate:.4g} samples/s")
    elif scenario is Scenario.SingleStream and probe.valid is not None and probe.extra.get("result_mean_latency_ns"):
        mean_ns = float(probe.extra["result_mean_latency_ns"])
        value = search.singlestream_expected_latency_ns(mean_ns)
        count = int(read_detail_log(folder).get("result_query_count") or 0)
        measured = f"mean latency {mean_ns / 1e6:.4g} ms over {count} queries, {count * mean_ns / 1e9:.3g} s"
    else:
        log.warning("the probe measured nothing (%s); the test keeps %s=%s", probe.line(), name, _fmt(config[name]))
        return Probe()
    note = f"{name} {_fmt(config[name])} -> {_fmt(value)} (probe: {measured})"
    log.info("%s", note)
    return Probe({name: value}, note)


def rerun_setting(config: ResolvedConfig, probe: Probe, result: TestResult) -> Probe | None:
    """The one re-run of a probed --test_run whose Offline query still ended early, its note saying why (None when
    the test is not such a one)."""
    if (config.scenario is not Scenario.Offline or not probe.fields or result.valid is not False
            or not search.ended_early(result.invalid_reasons)):
        return None
    samples, seconds = query_of(Path(result.log_dir))
    detail = read_detail_log(Path(result.log_dir))
    duration_ms = int(detail.get("effective_min_duration_ms") or 0)
    if not samples or not seconds or not duration_ms:
        return None
    planned = search.rerun_query_samples(samples, seconds, _batch(config), duration_ms)
    value = search.qps_for_query(planned, duration_ms)
    query, padding = issued_query(planned, detail, int(detail.get("effective_performance_sample_count") or 0))
    note = (f"{probe.note}; re-ran once at offline_expected_qps {_fmt(value)}: the first query, {samples} samples, "
            f"ended after {seconds:.3g} s, short of the {duration_ms / 1000:g} s minimum; this one holds "
            f"{query}{padding}")
    return Probe({"offline_expected_qps": value}, note)


def needs_probe(config: ResolvedConfig, mode: TestMode) -> bool:
    """A --test_run of Offline or SingleStream whose rate or latency neither RUN_ARGS nor a tuned file gives: the
    config's guess may void it on a machine of another speed (Server's rate needs a search)."""
    name = TUNED_FIELDS.get(config.scenario)
    return (mode is TestMode.PerformanceOnly and bool(config["test_run"]) and config.scenario is not Scenario.Server
            and name is not None and config.sources.get(name) != "RUN_ARGS" and name not in config.replaced)


def tuned_note(config: ResolvedConfig) -> str | None:
    """``offline_expected_qps 6 -> 11.2 (tuned (build/tuned/...); was ...)`` when a stored value replaced one."""
    name = TUNED_FIELDS.get(config.scenario)
    if name is None or name not in config.replaced:
        return None
    before, source = config.replaced[name]
    return f"{name} {_fmt(before)} -> {_fmt(config[name])} ({config.sources[name]}; was {source})"

