"""``--action=run_harness``: run every requested LoadGen test, one child process each, then summarize.

LoadGen reads its configuration once per process (a second ``FromConfig`` logs ``error_invalid_config``, which
the submission checker rejects) and keeps global state, so each (benchmark, scenario, mode) runs in a fresh
``python -m code.processes.run_single_test``. Its output is shown and kept in the test's ``stdout.txt``. The child
never outlives this process (code/common/supervision.py): a stop signal ends the running test, marks its folder
incomplete, skips the rest and still writes the summary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from code.common.constants import TestMode
from code.common.log import get_logger
from code.common.supervision import Interrupted, stop_signals_ignored, stop_signals_raise
from code.mlperf.arguments import RunRequest
from code.mlperf.benchmarks import load_benchmark
from code.mlperf.run_logs import make_test_log_dir, new_run_root
from code.mlperf.run_record import RunRecord, mark_incomplete
from code.mlperf.summary import RanTest, counted, exit_code
from code.processes.test_process import check_round, finish_run, require_built_core, run_child, test_spec
from code.tuning.plans import gate_plans, system_name

log = get_logger("run_harness")


def run_harness(request: RunRequest) -> int:
    """Run the tests; returns the exit status (``ExitCode``; 128 + the signal when the run was interrupted)."""
    from code.tuning.accuracy_gate import Gate
    from code.tuning.find_performance import Probe, needs_probe, probe_setting, rerun_setting, tuned_note

    system = system_name(request)
    # Resolve and check every test first, so a config error or a test that cannot run or count (an unbuilt round, a
    # SubmissionRun the round lacks, accuracy without real data) stops the run before any test starts.
    plans = list(gate_plans(request, system, clear_stale=True))
    tests = [(gate_plan.config, loadgen_mode) for gate_plan in plans
             for loadgen_mode in TestMode.parse(gate_plan.config["test_mode"]).loadgen_modes]
    for config, _ in tests:  # every refusal before any unbuilt core: what a round refuses needs no build to say so
        check_round(config)
    for config, loadgen_mode in tests:
        require_built_core(config["round"])
        load_benchmark(config.benchmark).describe_inputs(config, loadgen_mode)
    root = new_run_root(request.overrides.get("log_dir"))
    log.info("logs: %s", root)
    results: list[RanTest] = []
    running: dict | None = None  # the spec of the test in progress
    gate = Gate(system, root)
    stopped: str | None = None  # why the run ended before its last test: every engine of a ladder missed
    try:
        with stop_signals_raise():
            for index, gate_plan in enumerate(plans):
                config = gate_plan.config
                mode = TestMode.parse(config["test_mode"])
                modes = mode.loadgen_modes
                if gate_plan.applies:  # AccuracyOnly first, down the ladder on a miss: the engine the rest runs
                    outcome = gate.run(gate_plan, mode if TestMode.AccuracyOnly in modes else None)
                    results.extend(outcome.results)
                    if outcome.stop:
                        left = sum(len(TestMode.parse(later.config["test_mode"]).loadgen_modes)
                                   for later in plans[index + 1:])
                        stopped = outcome.stop + (f"; the {left} test(s) after it were not run" if left else "")
                        log.error("%s", stopped)
                        break
                    if outcome.config is None:  # its accuracy run did not finish (its ERROR is shown above)
                        continue
                    config, modes = outcome.config, [each for each in modes if each is not TestMode.AccuracyOnly]
                for loadgen_mode in modes:
                    overrides = request.overrides
                    tuning = tuned_note(config) if loadgen_mode is TestMode.PerformanceOnly else None
                    probe = Probe()
                    probe_dir = root / "probes" / system / config.benchmark_name / config.scenario.value
                    if needs_probe(config, loadgen_mode):  # a --test_run the config's guess might leave INVALID
                        running = test_spec(system, config, loadgen_mode, overrides, probe_dir)
                        probe = probe_setting(system, config, overrides, probe_dir)
                        running = None
                        if probe.failed is not None:  # its process failed: the test's would too (its ERROR is shown)
                            results.append((config.benchmark_name, probe.failed, {}))
                            continue
                        if probe.note:
                            overrides, tuning = {**overrides, **probe.fields}, probe.note
                    log_dir = make_test_log_dir(root, system, config.benchmark_name, config.scenario, loadgen_mode,
                                                submission_layout=mode is TestMode.SubmissionRun)
                    running = test_spec(system, config, loadgen_mode, overrides, log_dir, tuning, probe.fields)
                    print(flush=True)  # a blank line before each test's output, as a separator
                    log.info("%s %s %s %s", system, config.benchmark_name, config.scenario.value, loadgen_mode.value)
                    log.debug("config: %s", json.dumps(config.as_dict(), default=str))
                    result, record = run_child(running, log_dir)
                    rerun = rerun_setting(config, probe, result)
                    if rerun is not None:  # the probed query ended before its minimum duration: once more, larger
                        log_dir.rename(probe_dir.with_name(f"{probe_dir.name}-short"))
                        log.warning("%s", rerun.note)
                        log_dir = make_test_log_dir(root, system, config.benchmark_name, config.scenario,
                                                    loadgen_mode, submission_layout=mode is TestMode.SubmissionRun)
                        running = test_spec(system, config, loadgen_mode, {**overrides, **rerun.fields}, log_dir,
                                            rerun.note, rerun.fields)
                        result, record = run_child(running, log_dir)
                    running = None
                    results.append((config.benchmark_name, result, record))
    except Interrupted as stop:
        with stop_signals_ignored():
            log.warning(_record_interruption(stop, running or gate.running, results, len(tests)))
            finish_run(system, root, results, interrupted_by=(stop.signal_name, stop.exit_status))
        return stop.exit_status
    finish_run(system, root, results, stopped=stopped)
    return int(exit_code(counted(results), stopped))


def _record_interruption(stop: Interrupted, running: dict | None, results: list[RanTest], planned: int) -> str:
    """Mark the stopped test's folder incomplete, add it to the results, and say in one line what was stopped."""
    line = f"{stop}: "
    if running is None:
        line += "no test was running"
    else:
        seconds = time.time() - running["started"]
        reason = f"interrupted by {stop.signal_name} after {seconds:.1f} s; its LoadGen logs are partial"
        result = mark_incomplete(Path(running["log_dir"]), running["scenario"], running["mode"], reason,
                                 {"test_spec": running})
        results.append((running["benchmark_name"], result, RunRecord({})))
        line += (f"stopped {running['benchmark_name']} {running['scenario']} {running['mode']} and its processes; "
                 f"{running['log_dir']} is marked incomplete")
    not_started = planned - len(results)
    if not_started:
        line += f"; {not_started} test(s) not started"
    return line


