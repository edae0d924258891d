"""``--action=run_harness``: run every requested LoadGen test, one child process each, then summarize.

LoadGen reads its configuration once per process (a second ``FromConfig`` logs ``error_invalid_config``, which
the submission checker rejects) and keeps global state, so each (benchmark, scenario, mode) runs in a fresh
``python -m code.actions.run_single_test``. Its output is shown and kept in the test's ``stdout.txt``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from code.actions.common import resolved_configs, system_name
from code.common.arguments import RunRequest
from code.common.benchmarks import BenchmarkError, load_benchmark
from code.common.constants import TestMode
from code.common.paths import REPO_ROOT, harness_lib_dir
from code.common.rounds import RoundError
from code.common.run_logs import TestResult, make_test_log_dir, new_run_root
from code.common.summary import exit_code, format_summary, write_summary
from code.common.verdicts import round_refusal
from code.harness.build import module_path
from configs.configuration import ResolvedConfig


def run_harness(request: RunRequest) -> int:
    """Run the tests; returns the exit status (``ExitCode``: non-zero when a test did not finish, is INVALID or
    FAILs its accuracy target)."""
    system = system_name(request)
    configs = list(resolved_configs(request, system))  # resolve all first: a config error stops before any run
    for config in configs:  # and refuse what cannot run or cannot count before anything starts
        check_round(config)
        for loadgen_mode in TestMode.parse(config["test_mode"]).loadgen_modes:
            load_benchmark(config.benchmark).describe_inputs(config, loadgen_mode)
    root = new_run_root(request.overrides.get("log_dir"))
    print(f"[run_harness] logs: {root}", flush=True)
    results: list[tuple[str, TestResult, dict]] = []
    for config in configs:
        mode = TestMode.parse(config["test_mode"])
        for loadgen_mode in mode.loadgen_modes:
            log_dir = make_test_log_dir(root, system, config.benchmark_name, config.scenario, loadgen_mode,
                                        submission_layout=mode is TestMode.SubmissionRun)
            spec = {
                "system": system,
                "benchmark": config.benchmark.value,
                "accuracy_target": config.workload.accuracy_target.value,
                "harness_type": config.workload.harness_type.value,
                "power_setting": config.workload.power_setting.value,
                "scenario": config.scenario.value,
                "mode": loadgen_mode.value,
                "overrides": request.overrides,
                "log_dir": str(log_dir),
            }
            print(f"\n[run_harness] {system} {config.benchmark_name} {config.scenario.value} {loadgen_mode.value}",
                  flush=True)
            result, metadata = _run_child(spec, log_dir)
            results.append((config.benchmark_name, result, metadata))
    summary = format_summary(system, root, results)
    write_summary(root, summary, results)
    print(summary, flush=True)
    return int(exit_code([result for _, result, _ in results]))


def check_round(config: ResolvedConfig) -> None:
    """The round's core is built, and a SubmissionRun is for a benchmark and scenario its round accepts."""
    round_name = config["round"]
    if not module_path(harness_lib_dir(round_name)).is_file():
        raise BenchmarkError(f"the C++ core of round {round_name} is not built: run `make build ROUND={round_name}`")
    if TestMode.parse(config["test_mode"]) is TestMode.SubmissionRun:
        refusal = round_refusal(config)
        if refusal:
            raise RoundError(f"refusing a SubmissionRun that round {round_name} would not accept: {refusal}")


def _run_child(spec: dict, log_dir: Path) -> tuple[TestResult, dict]:
    spec_file = log_dir / "test_spec.json"
    spec_file.write_text(json.dumps(spec, indent=2) + "\n")
    command = [sys.executable, "-m", "code.actions.run_single_test", str(spec_file)]
    with open(log_dir / "stdout.txt", "w") as transcript:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, bufsize=1)
        assert process.stdout is not None
        error_line = None
        for line in process.stdout:
            sys.stdout.write(line)
            transcript.write(line)
            if line.startswith("ERROR:"):
                error_line = line.strip()
        status = process.wait()
    metadata_file = log_dir / "metadata.json"
    if status == 0 and metadata_file.exists():
        metadata = json.loads(metadata_file.read_text())
        result = TestResult.from_dict(metadata["result"])
        return result, metadata
    reasons = [error_line] if error_line else []
    reasons.append(f"the test process failed (exit {status}); see {log_dir / 'stdout.txt'}")
    result = TestResult(spec["scenario"], spec["mode"], str(log_dir), valid=None, invalid_reasons=reasons)
    return result, {}
