"""``--action=run_audit``: the compliance audits a round's checker requires (TEST01; TEST05 in v4.1; TEST06 of
datacenter llama3.1-8b from v5.1), verified by the round's official ``run_verification.py``, with their logs kept
in the layout a submission ships.

Each audit is one LoadGen performance test, run like any other (a child process) but in its own working directory
holding the round's ``audit.config``, where LoadGen reads it. Its verification compares it with the newest complete
SubmissionRun of the same test in build/logs (or ``--audit_results_dir``), which it only reads (TEST06 checks the
audit's own responses). Everything goes to
a new ``build/compliance_logs/<timestamp>/``:

- ``<system>/<bench>/<Scenario>/<TEST>/``: what the submission checker reads under ``compliance/`` (verify files,
  ``accuracy/``, ``performance/run_1/``), nothing else; ``make stage_results`` copies it as it is.
- ``audit_runs/<system>/<bench>/<Scenario>/<TEST>/``: the audit's working directory (audit.config, user.conf, all
  of LoadGen's logs, stdout, metadata.json) and ``verification.txt``, the verification's transcript.
- ``summary.txt``, ``summary.json``: PASS or FAIL per audit with the verification's reasons.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from code.common.constants import TestMode
from code.common.log import get_logger
from code.common.paths import COMPLIANCE_LOGS_DIR
from code.common.rounds import RoundError, get_round
from code.common.supervision import Interrupted, stop_signals_ignored, stop_signals_raise
from code.common.system_description import system_type
from code.config.resolved import ResolvedConfig
from code.mlperf.arguments import RunRequest
from code.mlperf.audits import (
    REFERENCE_ACCURACY_LOG,
    RESPONSE_DTYPES,
    RUNS_SUBDIR,
    AuditError,
    AuditTools,
    AuditVerdict,
    accuracy_delta_limit,
    audit_refusal,
    audit_tools,
    find_reference_run,
    read_verification,
    reference_problem,
)
from code.mlperf.benchmarks import load_benchmark
from code.mlperf.run_logs import TestResult, new_timestamped_dir
from code.mlperf.run_record import RunRecord
from code.mlperf.summary import RanTest, exit_code
from code.mlperf.verdicts import round_refusal
from code.processes.test_process import check_round, finish_run, require_built_core, run_child, test_spec
from code.tuning.plans import resolved_configs, system_name

log = get_logger("run_audit")


@dataclass(frozen=True)
class Audit:
    """One audit test of one (benchmark, scenario), with everything it needs found before anything runs."""

    config: ResolvedConfig
    test: str
    tools: AuditTools
    reference: Path  # the SubmissionRun's <Scenario> folder


def run_audit(request: RunRequest) -> int:
    """Run the audits; returns the exit status (``ExitCode``: 3 when an audit FAILs, 1 when one did not finish)."""
    system = system_name(request)
    configs = list(resolved_configs(request, system))
    if request.audit_results_dir and len(configs) > 1:
        raise AuditError("--audit_results_dir names the SubmissionRun of one test: give one benchmark and one "
                         "scenario with it")
    audits = [plan_audit(config, test, request.audit_results_dir)
              for config in configs for test in request.audit_tests or _required(config)]
    root = new_timestamped_dir(COMPLIANCE_LOGS_DIR)
    log.info("compliance logs: %s", root)
    results: list[RanTest] = []
    try:
        with stop_signals_raise():
            for audit in audits:
                result, record = _run_one(audit, system, root, request.overrides)
                results.append((audit.config.benchmark_name, result, record))
    except Interrupted as stop:
        with stop_signals_ignored():
            log.warning("%s: stopped; %d audit(s) not finished", stop, len(audits) - len(results))
            finish_run(system, root, results, "run_audit", interrupted_by=(stop.signal_name, stop.exit_status))
        return stop.exit_status
    finish_run(system, root, results, "run_audit")
    return int(exit_code([result for _, result, _ in results]))


def _required(config: ResolvedConfig) -> tuple[str, ...]:
    tests = get_round(config["round"]).audits_for(config.benchmark_name, system_type(config.system))
    if not tests:
        raise RoundError(f"round {config['round']}'s checker requires no audit of {config.benchmark_name}: "
                         "nothing to run")
    return tests


def plan_audit(config: ResolvedConfig, test: str, results_dir: str | None) -> Audit:
    """Check that the audit can run and count, refusing it by name otherwise; find its tools and reference run."""
    round_name = config["round"]
    refusal = round_refusal(config) or audit_refusal(round_name, config.benchmark_name, test,
                                                     system_type(config.system))
    if refusal:  # before the built-core check: what the round refuses needs no build to say so
        raise RoundError(f"refusing a {test} audit that round {round_name} would not accept: {refusal}")
    check_round(config)
    require_built_core(round_name)
    tools = audit_tools(round_name, test, config.benchmark)
    if test == "TEST01":  # its logged responses are scored, so it runs on the real data set
        load_benchmark(config.benchmark).describe_inputs(config, TestMode.AccuracyOnly)
    load_benchmark(config.benchmark).describe_inputs(config, TestMode.PerformanceOnly)
    if results_dir:
        reference = Path(results_dir).resolve()
        problem = reference_problem(reference, round_name)
        if problem:
            raise AuditError(f"--audit_results_dir: {problem}")
    else:
        reference = find_reference_run(config.system, config.benchmark_name, config.scenario, round_name)
    return Audit(config, test, tools, reference)


def _run_one(audit: Audit, system: str, root: Path, overrides: dict) -> tuple[TestResult, RunRecord]:
    """The audit's LoadGen test in its working directory, then the official verification into the checker's
    layout; the result's verdict is the verification's, the record the LoadGen run's."""
    config, test = audit.config, audit.test
    where = Path(system) / config.benchmark_name / config.scenario.value
    work_dir = root / RUNS_SUBDIR / where / test
    work_dir.mkdir(parents=True)
    shutil.copy2(audit.tools.audit_config, work_dir / "audit.config")
    print(flush=True)  # a blank line before each audit's output, as a separator
    log.info("%s %s %s %s (verified against %s)", system, config.benchmark_name, config.scenario.value, test,
             audit.reference)
    performance = TestMode.PerformanceOnly  # audit.config sets performance mode too
    spec = test_spec(system, config, performance, {**overrides, "test_mode": performance.value}, work_dir)
    spec["audit"] = {"test": test, "reference_accuracy_log": str(audit.reference / REFERENCE_ACCURACY_LOG)}
    run, record = run_child(spec, work_dir, cwd=work_dir)
    if run.valid is None or not run.complete:
        return run, record
    output_dir = root / where
    verdict = _verify(audit, work_dir, output_dir)
    if not run.valid:  # the checker rejects an audit whose LoadGen run is INVALID or logged an error
        verdict.checks["LoadGen run"] = False
        verdict.reasons += [f"the audit's LoadGen run is INVALID: {reason}" for reason in run.invalid_reasons]
        verdict.reasons += run.loadgen_errors
    if test == "TEST01":
        ship_test01_accuracy(verdict, work_dir, output_dir / test / "accuracy", record.audit_accuracy,
                             config.benchmark_name)
    figures = "; ".join(verdict.figures) or "no figures"
    summary = f"{test}: " + ", ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in verdict.checks.items())
    result = TestResult(config.scenario.value, test, str(output_dir / test), valid=verdict.passed,
                        invalid_reasons=verdict.reasons, not_submittable=run.not_submittable,
                        accuracy={"summary": f"{summary} ({figures})", "checks": verdict.checks})
    return result, record


def _verify(audit: Audit, work_dir: Path, output_dir: Path) -> AuditVerdict:
    """The round's run_verification.py, unmodified, in the audit's working directory (it copies its verify files to
    ``output_dir/<TEST>/``). Its sub-scripts run as ``python3``: ours comes first on PATH, for this numpy."""
    command = [sys.executable, str(audit.tools.verification), "-c", str(work_dir), "-o", str(output_dir)]
    if audit.test == "TEST06":  # it reads the audit's own responses only; the benchmark names its EOS id
        command += ["-s", audit.config.scenario.value, *load_benchmark(audit.config.benchmark).TEST06_ARGS]
    else:
        command += ["-r", str(audit.reference)]
    if audit.test == "TEST01":
        command += ["--dtype", RESPONSE_DTYPES[audit.config.benchmark]]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    done = subprocess.run(command, cwd=work_dir, env=env, capture_output=True, text=True, check=False)
    transcript = done.stdout + done.stderr
    (work_dir / "verification.txt").write_text(f"$ {' '.join(command)}\n{transcript}")
    print(transcript, end="", flush=True)
    verdict = read_verification(audit.test, output_dir / audit.test, transcript)
    if done.returncode != 0:
        verdict.checks["verification"] = False
        verdict.reasons.append(f"{audit.tools.verification.name} exited {done.returncode}; see "
                               f"{work_dir / 'verification.txt'}")
    return verdict


def ship_test01_accuracy(verdict: AuditVerdict, work_dir: Path, accuracy_dir: Path, scores: dict,
                          benchmark_name: str) -> None:
    """TEST01/accuracy/ holds the score of the audit's logged responses; when they differ from the accuracy run's,
    also the two scores the checker compares, and the accuracy check passes if they are within its delta."""
    accuracy_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work_dir / "accuracy.txt", accuracy_dir / "accuracy.txt")
    if verdict.checks.get("accuracy", True):
        return
    shutil.copy2(work_dir / "baseline" / "accuracy.txt", accuracy_dir / "baseline_accuracy.txt")
    shutil.copy2(work_dir / "accuracy.txt", accuracy_dir / "compliance_accuracy.txt")
    if verdict.compared == 0:
        verdict.reasons.insert(0, "the audit logged no response to compare (LoadGen applied no accuracy log "
                                  "sampling: see audit.config's entries in its mlperf_log_detail.txt)")
        return
    audited, baseline = scores.get("audit", {}).get("value"), scores.get("baseline", {}).get("value")
    limit = accuracy_delta_limit(benchmark_name)
    if audited and baseline:
        delta = abs(1 - baseline / audited) * 100
        verdict.figures.append(f"{scores['audit']['metric']} {audited:.3f} vs baseline {baseline:.3f} "
                               f"(delta {delta:.3f} %, limit {limit} %)")
        if delta <= limit:
            verdict.checks["accuracy"] = True
            return
    verdict.reasons.insert(0, f"the audit's responses differ from the accuracy run's, and its accuracy is not "
                              f"within {limit} % of the accuracy run's on the same samples")
