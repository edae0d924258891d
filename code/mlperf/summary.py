"""The closing table of a run, in the spirit of NVIDIA's "Result summaries", also saved in the log root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from code.common import atomic, loadgen_rules
from code.common.constants import ExitCode
from code.common.host_load import host_line
from code.mlperf.beside_published import published_line
from code.mlperf.noise import noise_line
from code.mlperf.power import power_note
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord

# LoadGen's advice on a query that ended early names settings a user may never have set: the summary gives the
# command to type instead (``next_command``).
LOADGEN_ADVICE = ("Increase expected QPS", "Decrease expected latency")
RanTest = tuple[str, TestResult, RunRecord]  # a test of the run: its benchmark name ("bert-99"), result and record
NEXT_MARGIN = 1.5  # the next command's offline_expected_qps over the rate just measured: its query outlasts the minimum


def next_command(benchmark_name: str, result: TestResult, record: RunRecord) -> str | None:
    """The command that makes a test VALID that ended before its minimum duration: Offline, a run with an expected
    QPS of ``NEXT_MARGIN`` x the rate it measured; else ``make find_performance``, which measures the setting."""
    if result.valid is not False or not loadgen_rules.ended_early(result.invalid_reasons):
        return None  # not an INVALID test whose query was sized for a slower machine
    scenario = result.scenario
    name = {"Offline": "offline_expected_qps", "SingleStream": "single_stream_expected_latency_ns",
            "Server": "server_target_qps"}.get(scenario, "")
    given = "".join(f" --{flag}" if value is True else f" --{flag}={value}"
                    for flag, value in record.given(name).items())
    args = f"--benchmarks={benchmark_name} --scenarios={scenario.lower()}{given}"
    if scenario == "Offline" and result.value:
        qps = result.value * NEXT_MARGIN
        shown = f"{qps:.0f}" if qps >= 100 else f"{qps:.3g}"  # 3 significant digits would print 1.1e+05
        return f'make run RUN_ARGS="{args} --offline_expected_qps={shown}"'
    return f'make find_performance RUN_ARGS="{args}", then make run RUN_ARGS="{args}"'


def _describe(result: TestResult) -> str:
    if not result.complete or result.valid is None:  # INCOMPLETE or FAILED
        return f"{result.verdict}: " + "; ".join(result.invalid_reasons)
    figure = "no figure" if result.value is None else f"{result.metric} = {result.value:,.3f} {result.unit}"
    tokens = result.extra.get("tokens_per_second")
    if tokens is not None:
        figure += f", {tokens:,.1f} tokens/s"
    if result.accuracy is not None:
        figure = result.accuracy["summary"]
    reasons = result.not_submittable if result.valid else [
        reason for reason in result.invalid_reasons if not reason.strip().startswith(LOADGEN_ADVICE)]
    line = f"{figure}  [{result.verdict}]" + (f" ({'; '.join(reasons)})" if reasons else "")
    if not result.valid and result.not_submittable:
        line += f"; not submittable either: {'; '.join(result.not_submittable)}"
    return line


def _device_lines(devices: dict[str, Any]) -> list[str]:
    """Each device's rate and share of the samples (an imbalance shows here), and how the expected QPS was scaled."""
    lines = []
    completed = devices.get("completed") or []
    if len(completed) > 1:
        lines.append("      per device: " + ", ".join(f"{row['device']} {row['samples_per_s']:,.1f}/s "
                                                      f"({row['share']:.1%})" for row in completed))
    share = devices.get("expected_qps_share", 1.0)
    if share < 1.0:
        lines.append(f"      expected QPS: the config's whole-system value x {share:.4g} ({len(devices['used'])} of "
                     "the system's GPUs)")
    return lines


def cpu_precision_note(record: RunRecord) -> str | None:
    """``CPU precision: fp32 [CPU: ...]``: on a CPU the precision decides the speed (code/config/cpu_features.py)."""
    fields, sources = record.fields, record.sources
    used = record.devices.get("used") or [fields.get("device", "")]
    if "precision" not in fields or not all(str(device).startswith("cpu") for device in used):
        return None
    return f"CPU precision: {fields['precision']} [{sources.get('precision', '?')}]"


def exit_code(results: list[TestResult], stopped: str | None = None) -> ExitCode:
    """A test that did not finish outranks one that is INVALID or FAIL. ``stopped``: every engine of a ladder missed
    its accuracy target, a FAIL whether or not a test ran."""
    if any(result.valid is None for result in results):
        return ExitCode.TEST_FAILED
    if stopped or any(result.valid is False for result in results):
        return ExitCode.INVALID
    return ExitCode.OK


def superseded(engine: dict[str, Any]) -> bool:
    """An engine's accuracy run that missed its target while the ladder had a next engine: the run's outcome is the
    next engine's, so this FAIL is shown but does not decide the exit status."""
    return engine.get("gate") == "missed" and bool(engine.get("next"))


def counted(results: list[RanTest]) -> list[TestResult]:
    """The results that decide a run's exit status: all but the superseded misses of an engine ladder."""
    return [result for _, result, record in results if not superseded(record.engine)]


def accuracy_gate_lines(results: list[RanTest]) -> list[str]:
    """What decided accuracy in this run, per benchmark, and what decides it for a real submission: the AccuracyOnly
    run of the real checkpoint on the real data set (an engine ladder runs it first: code/tuning/accuracy_gate.py)."""
    lines = []
    for name in dict.fromkeys(name for name, _, _ in results):
        ran = [(result, record.engine) for benchmark, result, record in results if benchmark == name]
        gates = {engine.get("gate") for _, engine in ran if engine.get("ladder")}
        scenarios = ",".join(dict.fromkeys(result.scenario.lower() for result, _ in ran))
        command = f'make run RUN_ARGS="--benchmarks={name} --scenarios={scenarios} --test_mode=AccuracyOnly"'
        real = [result for result, engine in ran if result.accuracy is not None and not result.not_submittable
                and not superseded(engine)]
        passed = any(engine.get("gate") == "passed" or (engine.get("gate") == "this run" and result.valid)
                     for result, engine in ran if engine.get("ladder"))
        if passed:
            lines.append(f"  GATE {name}: the engines above ran after an AccuracyOnly run on the real checkpoint and "
                         "data set met the target with them (each engine line says which); make agreement's proxy "
                         "figures are information only.")
        elif gates & {"this run", "missed", "exhausted"}:
            lines.append(f"  GATE {name}: no engine of the ladder met the accuracy target in this run (each engine "
                         "line says its score); nothing ran with one.")
        elif "not applied" in gates:
            lines.append(f"  GATE {name}: the accuracy gate was not applied (engine lines above say why). With the "
                         "real checkpoint and data set, a run first runs AccuracyOnly with the ladder's first engine "
                         "that has not missed the target, and moves down the ladder on a miss.")
        elif real:
            verdicts = ", ".join(f"{result.scenario} {result.verdict}" for result in real)
            lines.append(f"  GATE {name}: this AccuracyOnly run on the real checkpoint is the accuracy gate of a real "
                         f"submission ({verdicts}); make agreement's proxy figures are information only.")
        else:
            skipped = " (RUN_ARGS chose the engine: the ladder's gate was skipped)" if "skipped" in gates else ""
            lines.append(f"  GATE {name}: the accuracy gate of a real submission is the AccuracyOnly run on the real "
                         f"checkpoint and data set, not this run{skipped}: {command} (with this run's other "
                         "RUN_ARGS).")
    return lines


def figure_notes(record: RunRecord, host: bool = False) -> list[str]:
    """The lines under a test's figure in the summary and report.md: beside the best published, power, the host
    (``host``), noise."""
    notes = [published_line(record), power_note(record), host_line(record.host_load) if host and record.host_load
             else None, noise_line(record)]
    return [note for note in notes if note]


def format_summary(system: str, root: Path, results: list[RanTest],
                   interrupted_by: tuple[str, int] | None = None, stopped: str | None = None) -> str:
    """The summary table; ``interrupted_by``: (signal name, exit status) of a stop signal; ``stopped``: every engine
    of a ladder missed its accuracy target."""
    lines = ["", "=" * 30 + " Result summaries " + "=" * 30, f"{system}:"]
    current = None
    notes: set[str] = set()
    for benchmark_name, result, record in results:
        if benchmark_name != current:
            lines.append(f"  {benchmark_name}:")
            current = benchmark_name
        lines.append(f"    {result.scenario:<13} {result.mode:<16} {_describe(result)}")
        lines += [f"      {note}" for note in figure_notes(record)]
        if record.engine.get("summary"):  # which engine of the config's ladder ran, and why
            lines.append(f"      engine: {record.engine['summary']}")
        lines += _device_lines(record.devices)
        if record.tuning:  # how the harness set its expected rate or latency first (find_performance)
            lines.append(f"      tuned: {record.tuning}")
        command = next_command(benchmark_name, result, record)
        if command:
            lines.append(f"      its query ended before the minimum duration; next: {command}")
        provenance = record.provenance
        if result.not_submittable and provenance:
            lengths = provenance.get("input_lengths", {})
            mean = f", mean {lengths['mean']:.0f} tokens" if "mean" in lengths else ""
            notes.add(f"model: {provenance.get('model')}; inputs: {provenance.get('inputs')}{mean}; "
                      f"weights: {provenance.get('weights')}")
        precision = cpu_precision_note(record)
        if precision:
            notes.add(precision)
        if record.round:
            notes.add(f"round {record.round}, LoadGen {record.loadgen_version}")
    for note in sorted(notes):
        lines.append(f"  NOTE {note}")
    lines += accuracy_gate_lines(results)
    if any(result.not_submittable for _, result, _ in results):
        lines.append("  'not submittable': as it stands, the figure is NOT an MLPerf result (reasons above and in "
                     "metadata.json).")
    code = exit_code(counted(results), stopped)
    if interrupted_by is not None:
        lines.append(f"  Exit status {interrupted_by[1]}: interrupted by {interrupted_by[0]}; a stopped test is "
                     "INCOMPLETE (metadata.json says \"complete\": false) and its LoadGen logs are partial.")
    elif stopped:
        lines.append(f"  Exit status {code.value}: {stopped}.")
    elif code is not ExitCode.OK:
        why = "a test did not finish" if code is ExitCode.TEST_FAILED else "a test is INVALID or FAIL"
        lines.append(f"  Exit status {code.value}: {why}.")
    lines += [f"  Logs: {root}", "=" * 78]
    return "\n".join(lines)


def write_summary(root: Path, text: str, results: list[tuple[str, TestResult, dict[str, Any]]]) -> None:
    """summary.txt and summary.json, each whole or not written (a full disk leaves no empty summary behind)."""
    atomic.write_text(root / "summary.txt", text.strip() + "\n")
    records = [{"benchmark": name, **result.to_dict()} for name, result, _ in results]
    atomic.write_text(root / "summary.json", json.dumps(records, indent=2) + "\n")
