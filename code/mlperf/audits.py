"""Compliance audits: which tests a round requires, where its official audit files are, which SubmissionRun an
audit is verified against, and what the official verification concluded.

An audit is a LoadGen performance run with the round's ``audit.config`` in its working directory, where LoadGen
reads it (TEST01 logs a sample of the responses, TEST05 changes the RNG seeds). The round's own
``run_verification.py`` compares it with a SubmissionRun of the same test and copies the audit's logs into the
layout the submission checker reads under ``compliance/<system>/<benchmark>/<Scenario>/<TEST>/``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from code.common.constants import Benchmark, Scenario
from code.common.paths import LOGS_DIR, OFFICIAL_TOOLS_DIR
from code.common.rounds import ROUNDS, get_round
from code.mlperf.run_record import RunRecordError, read_record

# Every audit test the official checkers know; a round requires some of them of each benchmark (rounds.py).
AUDIT_TESTS = ("TEST01", "TEST04", "TEST05", "TEST06")
# TEST01's audit.config lives in a folder per benchmark, named as the reference implementation names it.
TEST01_CONFIG_DIRS = {Benchmark.BERT: "bert", Benchmark.GPTJ: "gpt-j"}
# verify_accuracy.py --dtype: the element type of a LoadGen response (it compares the first element of each).
RESPONSE_DTYPES = {Benchmark.BERT: "float32", Benchmark.GPTJ: "int32"}
PASS_LINE = "TEST PASS"
# TEST06 writes verify_accuracy.txt only, with no PASS_LINE: the checker wants each of these checks passed.
TEST06_CHECKS = (("First token check pass: True", "First token check pass: Skipped"), ("EOS check pass: True",),
                 ("Sample length check pass: True",))
# Where a compliance run keeps each audit's own LoadGen run (its metadata.json names the round), beside the
# checker's layout: build/compliance_logs/<timestamp>/audit_runs/<system>/<bench>/<Scenario>/<TEST>/.
RUNS_SUBDIR = "audit_runs"


class AuditError(ValueError):
    """An audit that cannot run as asked (unknown test, missing tools or reference run); the message names the fix."""


def parse_audit_tests(text: str) -> list[str]:
    """``TEST01,test05`` -> ["TEST01", "TEST05"]; an unknown name gets the list."""
    tests = list(dict.fromkeys(part.strip().upper() for part in text.split(",")))
    for item in tests:
        if item not in AUDIT_TESTS:
            raise AuditError(f"unknown audit test '{item}'; valid choices: {', '.join(AUDIT_TESTS)}")
    return tests


def audit_refusal(round_name: str, benchmark_name: str, test: str, system_type: str) -> str | None:
    """Why the round's checker does not ask ``test`` of the benchmark on a system of ``system_type`` (v5.1 and
    v6.1 ask none of llama3.1-8b-edge), naming what it asks; None when it does."""
    required = get_round(round_name).audits_for(benchmark_name, system_type)
    if test in required:
        return None
    asks = f"it requires {', '.join(required)}" if required else "it requires no audit of it"
    elsewhere = [name for name, other in ROUNDS.items() if test in other.audits_for(benchmark_name, system_type)]
    rounds_do = (f"rounds {', '.join(elsewhere)} require" if len(elsewhere) > 1
                 else f"round {''.join(elsewhere)} requires")
    hint = f" ({rounds_do} it: --round={elsewhere[-1]})" if elsewhere else ""  # the newest of them
    return f"round {round_name}'s checker does not require {test} of {benchmark_name}: {asks}{hint}"


@dataclass(frozen=True)
class AuditTools:
    """The round's official files of one audit test, used as they are."""

    folder: Path  # compliance/nvidia/<TEST>/ (compliance/<TEST>/ from v6.0)
    audit_config: Path
    verification: Path  # run_verification.py


def audit_tools(round_name: str, test: str, benchmark: Benchmark, tools_dir: Path = OFFICIAL_TOOLS_DIR) -> AuditTools:
    """Where the round's clone under ``tools_dir`` keeps the audit's files; an error naming how to get them."""
    official = get_round(round_name).tools
    folder = tools_dir / official.folder / official.compliance / test
    config_dir = folder / TEST01_CONFIG_DIRS[benchmark] if test == "TEST01" else folder
    tools = AuditTools(folder, config_dir / "audit.config", folder / "run_verification.py")
    missing = [path for path in (tools.audit_config, tools.verification) if not path.is_file()]
    if missing:
        raise AuditError(
            f"the official {test} files of round {round_name} are missing ({', '.join(map(str, missing))}): run "
            f"`{official.clone_command(tools_dir)}`, or set MLPERF_INFERENCE_TOOLS to a folder holding one such clone "
            f"per round (<folder>/{official.folder}/{official.compliance}/{test}/)")
    return tools


# What run_verification.py reads from a SubmissionRun folder (build/logs/<ts>/<system>/<bench>/<Scenario>/).
REFERENCE_ACCURACY_LOG = Path("accuracy") / "mlperf_log_accuracy.json"
REFERENCE_SUMMARY = Path("performance") / "run_1" / "mlperf_log_summary.txt"


def reference_problem(folder: Path, round_name: str) -> str | None:
    """Why ``folder`` cannot serve as the SubmissionRun an audit is verified against; None when it can."""
    for relative in (REFERENCE_ACCURACY_LOG, REFERENCE_SUMMARY):
        if not (folder / relative).is_file():
            return f"{folder} has no {relative} (a SubmissionRun folder has accuracy/ and performance/run_1/)"
    for test_dir in (folder / "accuracy", folder / "performance" / "run_1"):
        try:
            record = read_record(test_dir)
        except RunRecordError:
            return f"{test_dir} has no readable metadata.json: not a run of this harness"
        if not record.complete:
            return f"{test_dir} did not finish"
        if record.round != round_name:
            return f"{test_dir} is a run of round {record.round}, not {round_name}"
    return None


def find_reference_run(system: str, benchmark_name: str, scenario: Scenario, round_name: str,
                       logs_dir: Path = LOGS_DIR) -> Path:
    """The newest complete SubmissionRun of this test and round under ``logs_dir``; an error naming how to make one."""
    runs = sorted(logs_dir.glob(f"*/{system}/{benchmark_name}/{scenario.value}"), key=lambda p: p.stat().st_mtime,
                  reverse=True) if logs_dir.is_dir() else []
    for folder in runs:
        if reference_problem(folder, round_name) is None:
            return folder
    raise AuditError(
        f"no complete SubmissionRun of {benchmark_name} {scenario.value} on {system} for round {round_name} in "
        f"{logs_dir}: an audit is verified against one. Run `make run RUN_ARGS=\"--benchmarks={benchmark_name} "
        f"--scenarios={scenario.value.lower()} --test_mode=SubmissionRun --round={round_name} ...\"` first (the "
        "same settings as the audit), or name its <Scenario> folder with --audit_results_dir")


def write_baseline_log(accuracy_log: Path, compliance_log: Path, out: Path) -> Path:
    """The accuracy run's entries for the samples the audit logged: the baseline TEST01 scores when the audit's
    responses differ from the accuracy run's."""
    audited = {entry["qsl_idx"] for entry in json.loads(compliance_log.read_text())}
    entries = [entry for entry in json.loads(accuracy_log.read_text()) if entry["qsl_idx"] in audited]
    out.write_text(json.dumps(entries, indent=0) + "\n")
    return out


def accuracy_delta_limit(benchmark_name: str) -> float:
    """How far (in %) the audit's accuracy may be from the baseline's when their responses differ (the checker's)."""
    return 0.1 if benchmark_name.endswith("99.9") else 1.0


@dataclass
class AuditVerdict:
    """What the verification concluded: each check (accuracy, performance) passed or not, and why not."""

    test: str
    checks: dict[str, bool] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # what was compared, for the summary
    compared: int | None = None  # TEST01: audited responses found in the accuracy run's log

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


def read_verification(test: str, output_dir: Path, transcript: str) -> AuditVerdict:
    """Read verify_accuracy.txt (TEST01, TEST06) and verify_performance.txt as the checker does; a failure's reasons
    are the scripts' ``TEST FAIL`` lines, some of which only reach the transcript."""
    verdict = AuditVerdict(test)
    names = (["accuracy"] if test in ("TEST01", "TEST06") else []) + (["performance"] if test != "TEST06" else [])
    for name in names:
        path = output_dir / f"verify_{name}.txt"
        text = path.read_text(errors="replace") if path.is_file() else ""
        lines = [line.strip() for line in text.splitlines()]
        verdict.checks[name] = (all(any(ok in lines for ok in check) for check in TEST06_CHECKS) if test == "TEST06"
                                else any(PASS_LINE in line for line in lines))
        if name == "accuracy":
            counts = dict(re.findall(r"^(num_\w+) = (\d+)", text, flags=re.M))
            if "num_perf_log_qsl_idx_match" in counts:
                verdict.compared = int(counts["num_perf_log_qsl_idx_match"])
            if counts:
                verdict.figures.append(f"{counts.get('num_perf_log_qsl_idx_match', '?')} audited responses "
                                       f"compared, {counts.get('num_perf_log_data_mismatch', '?')} differ")
        else:
            scores = dict(re.findall(r"^(reference|test) score = (\S+)", text, flags=re.M))
            if scores:
                verdict.figures.append(f"performance {scores.get('test')} vs reference {scores.get('reference')}")
        if not path.is_file():
            verdict.reasons.append(f"{path.name} was not written")
    fails = [line.strip() for line in transcript.splitlines() if "TEST FAIL" in line or "do not match" in line]
    verdict.reasons += [line for line in dict.fromkeys(fails) if line != "TEST FAIL"]
    return verdict
