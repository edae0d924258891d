"""Stage a closed-division submission tree from run logs: ``build/submission/closed/<submitter>/``.

For one system and one round, the newest finished accuracy and performance test of each benchmark and scenario becomes
``results/<system>/<bench>/<Scenario>/{accuracy, performance/run_1}`` with only the files the round's checker accepts,
plus the ``measurements/``, ``code/``, ``systems/`` and ``compliance/`` entries. Nothing is staged silently: a missing
test, or one that is not a submittable result, is named, and then the tree is written only with ``allow_incomplete``,
its README saying so. Run logs are only read.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code.common.constants import TestMode
from code.common.download import file_checksum
from code.common.paths import BUILD_DIR, COMPLIANCE_LOGS_DIR, LOGS_DIR, REPO_ROOT
from code.common.rounds import ROUNDS, SYSTEM_TYPES, get_round
from code.common.system_description import (
    DescriptionFiles,
    SystemDescriptionError,
    description_problems,
    load_description,
    system_type,
)
from code.common.systems import SystemDetectionError
from code.harness.fetch_loadgen import source_dir
from code.mlperf.audits import RUNS_SUBDIR
from code.mlperf.run_logs import new_timestamped_dir
from code.mlperf.run_record import RunRecordError, read_record
from code.submission.documents import (
    CALIBRATION_DOC,
    calibration_entry,
    harness_commit,
    host_paths,
    portable,
    repository_url,
    uses_quantization,
    write_calibration,
    write_code_readme,
    write_source,
)
from code.submission.model_info import implementation, model_info, ran_no_model
from code.submission.runs import TestRun, find_tests, newest, run_folders

SUBMISSION_DIR = BUILD_DIR / "submission"
# What staging, truncation and the checker keep beside a tree, per submitter: stage.json (round, system, problems),
# originals/ (the truncation tool's --backup) and check/ (the checker's log and CSV). Outside the tree, whose root
# the checker wants to hold division folders only.
WORK_DIR = BUILD_DIR / "submission_work"
SYSTEMS_DIR = REPO_ROOT / "systems"
DIVISION = "closed"

# What the checker accepts in each results folder (REQUIRED_ACC_FILES; REQUIRED_PERF_FILES + OPTIONAL_PERF_FILES).
# Everything else a run writes (metadata.json, stdout.txt, user.conf, predictions.json, test_spec.json, the trace)
# is a "file list mismatch" there.
ACCURACY_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "accuracy.txt", "mlperf_log_accuracy.json")
PERFORMANCE_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
STAGE_RECORD = "stage.json"
# Beside stage.json: the sha256 of each file of the tree as staging, then truncation, left it (``record_tree``).
TREE_FILES = "tree_files.json"
# A submitter names a folder that staging deletes and rebuilds: one plain name, never ".", ".." or a path.
SUBMITTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class StageError(RuntimeError):
    """Input that cannot be staged at all; the message names the fix."""


@dataclass
class Staged:
    """What stage() wrote and what stops it from being a complete, submittable tree."""

    tree: Path
    round: str
    system: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def stage(submitter: str, *, logs: list[Path] | None = None, compliance: list[Path] | None = None,
          system: str | None = None, round_name: str | None = None, allow_incomplete: bool = False,
          out_dir: Path = SUBMISSION_DIR, work_dir: Path = WORK_DIR, systems_dir: Path = SYSTEMS_DIR) -> Staged:
    """Build ``<out_dir>/closed/<submitter>/`` from the newest finished tests and audits (default: build/logs,
    build/compliance_logs)."""
    check_submitter(submitter)
    folders = logs if logs is not None else run_folders(LOGS_DIR)
    for folder in folders:
        if not folder.is_dir():
            raise StageError(f"{folder} is not a run folder (give folders under build/logs)")
    logged = find_tests(folders)
    tests = logged.tests
    if not tests:
        where = ", ".join(str(f) for f in folders) or str(LOGS_DIR)
        unreadable = "".join(f"; {path} holds a test whose record cannot be read: {why}"
                             for path, why in logged.unreadable.items())
        raise StageError(f"no finished runs in {where}{unreadable}: run the tests first, e.g. make run RUN_ARGS=\""
                         "--benchmarks=bert-99 --scenarios=offline,singlestream --test_mode=SubmissionRun\"")
    system = _one_system(tests, system)
    tests = [t for t in tests if t.system == system]
    round_name = _one_round(tests, round_name, _known_type(system, systems_dir))
    chosen = newest([t for t in tests if t.round == round_name])

    staged = Staged(out_dir / DIVISION / submitter, round_name, system)
    staged.notes += [f"a test that did not finish is left out: {path}" for path in logged.unfinished]
    staged.notes += [f"a test whose record cannot be read is left out (a newer test may hide behind it): {path}: "
                     f"{why}" for path, why in logged.unreadable.items()]
    description = _system_description(systems_dir, system, submitter, staged)
    named, kind = get_round(round_name).checker_name, description["system_type"]  # edge: llama3.1-8b-edge
    chosen = {(named(benchmark, kind), scenario, mode): test for (benchmark, scenario, mode), test in chosen.items()}
    staged.problems += _check(chosen, kind, round_name)
    audits = {(named(bench, kind), scenario, test): folder for (bench, scenario, test), folder
              in _newest_audits(compliance, system, round_name, staged).items()}
    staged.problems += _failed_audits(audits, {(benchmark, scenario) for benchmark, scenario, _ in chosen})
    commit, no_commit = harness_commit(list(chosen.values()))
    staged.problems += no_commit
    staged.problems += [problem for (_, _, mode), test in chosen.items()
                        if mode is TestMode.PerformanceOnly and uses_quantization(test.record)
                        for problem in calibration_entry(test)[1]]
    if staged.problems and not allow_incomplete:
        return staged  # reported by the caller; nothing written

    mlperf_conf = source_dir(get_round(round_name)) / "mlperf.conf"  # v4.1's checker wants it in measurements/
    if not mlperf_conf.is_file():
        raise StageError(f"no {mlperf_conf}: the measurements need the mlperf.conf of round {round_name}'s LoadGen; "
                         f"make build ROUND={round_name}")
    layout = get_round(round_name).layout
    _reset(staged.tree, work_dir / submitter, staged)
    _write_json(staged.tree / "systems" / f"{system}.json", description)
    for (benchmark, scenario, mode), test in chosen.items():
        results = staged.tree / "results" / system / benchmark / scenario
        if mode is TestMode.AccuracyOnly:
            _copy_files(test.directory, results / "accuracy", ACCURACY_FILES)
        else:
            _copy_files(test.directory, results / "performance" / "run_1", PERFORMANCE_FILES)
            _write_measurements(staged.tree / layout.measurements_dir(system, benchmark, scenario), test,
                                mlperf_conf)
    _write_code(staged, list(chosen.values()), commit)
    for (benchmark, scenario, test_name), folder in sorted(audits.items()):
        if any((benchmark, scenario, mode) in chosen for mode in TestMode):
            shutil.copytree(folder, staged.tree / layout.audit_dir(system, benchmark, scenario, test_name))
    if not audits:
        where = COMPLIANCE_LOGS_DIR if compliance is None else ", ".join(map(str, compliance)) or "no folder"
        staged.notes.append(f"no compliance audit logs for {system} in {where}: the checker will ask for "
                            "compliance/ (make run_audit_harness)")
    staged.problems += [f"{found} is a folder of this machine, in a file the submission ships (write it "
                        "relative to the checkout)"
                        for found in host_paths(staged.tree, Path(layout.source) / "source")]
    _write_tree_readme(staged, chosen)
    record_tree(staged.tree, work_dir / submitter)
    _write_json(work_dir / submitter / STAGE_RECORD, {"round": round_name, "system": system, "tree": str(staged.tree),
                                                      "problems": staged.problems, "notes": staged.notes})
    return staged


def check_submitter(submitter: str) -> None:
    """Refuse a SUBMITTER that is not one plain folder name: staging deletes ``<out_dir>/closed/<submitter>`` and
    ``<work_dir>/<submitter>`` before writing them, so ``..`` would delete the folders that hold the run logs."""
    if not SUBMITTER_NAME.fullmatch(submitter or ""):
        raise StageError(f"SUBMITTER='{submitter}' is not a folder name (letters, digits, '_', '-' and '.', starting "
                         "with a letter or digit): give your organization, e.g. make stage_results SUBMITTER=MyOrg")


def staged_round(submitter: str, work_dir: Path = WORK_DIR) -> str:
    """The round of the tree staged last for this submitter, whose tools truncate and check it."""
    check_submitter(submitter)
    record = work_dir / submitter / STAGE_RECORD
    if not record.is_file():
        raise StageError(f"nothing staged for SUBMITTER={submitter}: make stage_results SUBMITTER={submitter} first")
    return str(json.loads(record.read_text())["round"])


def _one_system(tests: list[TestRun], system: str | None) -> str:
    systems = sorted({t.system for t in tests})
    if system is None:
        if len(systems) > 1:
            raise StageError(f"the runs are of {len(systems)} systems ({', '.join(systems)}): a submission tree is "
                             "staged per system; give SYSTEM=<one of them>")
        return systems[0]
    if system not in systems:
        raise StageError(f"no runs of system {system}: the runs are of {', '.join(systems)} (give SYSTEM=<one of "
                         "them>, or the run folders of this system)")
    return system


def _known_type(system: str, systems_dir: Path) -> str | None:
    """The system's type from its description, None when it says none (staging then names the problem itself)."""
    try:
        return system_type(system, systems_dir)
    except SystemDetectionError:
        return None


def _one_round(tests: list[TestRun], round_name: str | None, kind: str | None = None) -> str:
    """The staged tree's round: ROUND, else the one round of the runs. Runs of several rounds are refused, naming the
    newest round that accepts all their tests from a system of type ``kind``: a tree never leaves a result out, nor
    mixes rounds, without the submitter choosing so, whatever round each test took by default."""
    rounds: dict[str, list[TestRun]] = {}
    for test in tests:
        rounds.setdefault(test.round, []).append(test)
    if round_name is not None:
        get_round(round_name)
        if round_name not in rounds:
            raise StageError(f"no runs of round {round_name}: the runs are of {', '.join(sorted(rounds))} "
                             f"(run with ROUND={round_name}, or stage ROUND=<one of them>)")
        return round_name
    if len(rounds) > 1:
        listed = "; ".join(f"{name}: {len(found)} tests, e.g. {found[-1].directory}"
                           for name, found in sorted(rounds.items()))
        raise StageError(f"the runs mix rounds ({listed}); a submission is for one round, judged by its checker: "
                         f"give ROUND=<round>, or the run folders of one round{_round_for_all(tests, kind)}")
    (only,) = rounds
    get_round(only)  # a run from before rounds were recorded: no round's checker would accept it
    return only


def _round_for_all(tests: list[TestRun], kind: str | None) -> str:
    """The newest round that accepts every (benchmark, scenario) of ``tests`` from a system of type ``kind``, as the
    hint of a refusal of mixed rounds; empty without a known type."""
    if kind not in SYSTEM_TYPES:
        return ""
    tests_run = {(test.benchmark, test.scenario) for test in tests}
    for round_ in reversed(ROUNDS.values()):
        if all(scenario in {each.value for each in round_.accepted_for(kind, benchmark)}
               for benchmark, scenario in tests_run):
            return (f" (the newest round that accepts all of them from {kind} systems is {round_.name}: run the "
                    f"tests it lacks with ROUND={round_.name}, then make stage_results ROUND={round_.name})")
    return f" (no one round accepts all of them from {kind} systems)"


def _check(chosen: dict[tuple[str, str, TestMode], TestRun], system_type: str, round_name: str) -> list[str]:
    """Every reason the chosen tests are not a complete, submittable set for the round, by name."""
    problems: list[str] = []
    for benchmark in sorted({benchmark for benchmark, _, _ in chosen}):
        round_ = get_round(round_name)
        required = [s.value for s in round_.scenarios_for(system_type, benchmark)]
        accepted = [s.value for s in round_.accepted_for(system_type, benchmark)]
        for scenario in sorted(set(required) | {scenario for b, scenario, _ in chosen if b == benchmark}):
            if scenario not in accepted:
                problems.append(f"{benchmark} {scenario}: round {round_name} does not take it from a {system_type} "
                                "system (its folder would be ignored or rejected)")
                continue
            for mode, what in ((TestMode.AccuracyOnly, "accuracy"), (TestMode.PerformanceOnly, "performance")):
                if (benchmark, scenario, mode) not in chosen:
                    problems.append(f"{benchmark} {scenario}: no finished {what} run (run it: make run ROUND="
                                    f"{round_name} RUN_ARGS=\"--benchmarks={get_round(round_name).run_name(benchmark)} "
                                    f"--scenarios={scenario.lower()} --test_mode=SubmissionRun\")")
    problems += [f"{test.describe()} is {test.verdict}: {'; '.join(reasons)} ({test.directory})"
                 for test in chosen.values() if (reasons := test.problems())]
    return problems


def _system_description(systems_dir: Path, system: str, submitter: str, staged: Staged) -> dict[str, Any]:
    """The system's JSON, its user file and SUBMITTER merged; what the checker would reject is a problem."""
    try:
        description = load_description(system, systems_dir, submitter)
    except SystemDescriptionError as error:
        raise StageError(str(error)) from None
    if description.get("system_type") is None:
        raise StageError(f"systems/{system}.json has no system_type: set it to datacenter, edge or datacenter,edge "
                         "(the round's required scenarios depend on it)")
    if description.get("division") != DIVISION:
        raise StageError(f"systems/{system}.json says division '{description.get('division')}'; this harness "
                         f"stages the {DIVISION} division: set \"division\": \"{DIVISION}\"")
    if problems := description_problems(description, DescriptionFiles.of(system, systems_dir)):
        staged.problems.append(f"the description of {system} would fail the checker (make check_system_json): "
                               + "; ".join(problems))
    return description


def _newest_audits(compliance: list[Path] | None, system: str, round_name: str,
                   staged: Staged) -> dict[tuple[str, str, str], Path]:
    """Per (benchmark, scenario, TEST), the newest audit folder ``<ts>/<system>/<bench>/<Scenario>/<TEST>/``, so
    that audits run one invocation at a time all count; one that its run recorded as another round's is left out
    with a note (the round's checker judges the tree, and another round's audit is not what it asks for)."""
    folders = compliance if compliance is not None else run_folders(COMPLIANCE_LOGS_DIR)
    found: dict[tuple[str, str, str], Path] = {}
    for folder in folders:  # oldest first: a later folder replaces an earlier one
        for test in sorted(path for path in (folder / system).glob("*/*/TEST*") if path.is_dir()):
            try:  # the round the audit's LoadGen run recorded; none when it has no readable record
                recorded = read_record(folder / RUNS_SUBDIR / test.relative_to(folder)).round
            except RunRecordError:
                recorded = None
            if recorded not in (None, round_name):
                staged.notes.append(f"audit of round {recorded} left out (staging round {round_name}): {test}")
                continue
            found[(test.parents[1].name, test.parent.name, test.name)] = test
    return found


def _failed_audits(audits: dict[tuple[str, str, str], Path], staged_scenarios: set[tuple[str, str]]) -> list[str]:
    """Each staged audit that its compliance run's summary.json records as not PASSed, with the reason."""
    problems: list[str] = []
    for (benchmark, scenario, test_name), test in sorted(audits.items()):
        try:  # the records of its compliance run's summary.json, by TEST folder
            records = json.loads((test.parents[3] / "summary.json").read_text())
            record = {Path(entry["log_dir"]).resolve(): entry for entry in records}.get(test.resolve())
        except (OSError, ValueError, KeyError, TypeError):
            record = None
        if (benchmark, scenario) not in staged_scenarios or record is None:
            continue
        if not str(record.get("verdict", "")).startswith("PASS"):
            reasons = "; ".join(record.get("invalid_reasons") or []) or "no reason recorded"
            problems.append(f"{benchmark} {scenario} {test_name} audit is {record.get('verdict')}: {reasons} "
                            f"({test}; run it again: make run_audit_harness)")
        elif record.get("not_submittable"):  # a PASS of a run that is no result (a stand-in, a test run)
            problems.append(f"{benchmark} {scenario} {test_name} audit passed but is not submittable: "
                            f"{'; '.join(record['not_submittable'])} ({test}; run it again as the submission runs: "
                            "make run_audit_harness)")
    return problems


def tree_files(tree: Path) -> dict[str, str]:
    return {path.relative_to(tree).as_posix(): file_checksum(path, "sha256") for path in sorted(tree.rglob("*"))
            if path.is_file()}


def record_tree(tree: Path, work: Path) -> None:
    """Record what staging (then truncation) left in the tree, so that staging again can tell a hand edit."""
    _write_json(work / TREE_FILES, tree_files(tree))


def _edits(tree: Path, work: Path) -> list[str] | None:
    """The files changed, added or removed since staging and truncation left the tree; None when no record says."""
    try:
        recorded = json.loads((work / TREE_FILES).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict):  # a record edited by hand says nothing staging can trust
        return None
    current = tree_files(tree)
    return sorted(name for name in set(recorded) | set(current) if recorded.get(name) != current.get(name))


def _reset(tree: Path, work: Path, staged: Staged) -> None:
    """A fresh tree. The staged copy and what truncation kept of the last one (``originals/``) are outputs of
    staging, made again from the run logs, so an earlier tree as staging and truncation left it is replaced; one
    edited since (or of which no record says what was staged) is moved aside with its work folder, never deleted:
    an edit made there would otherwise be lost. Either is said in a note."""
    if tree.exists():
        edits = _edits(tree, work)
        if edits is None or edits:
            kept = new_timestamped_dir(work.parent, prefix=f"{work.name}.replaced-")
            shutil.move(tree, kept / "tree")  # a move, not a rename: build/submission may be on another disk
            beside = ""
            if work.exists():
                shutil.move(work, kept / "work")
                beside = f", with its truncation backup and checker logs in {kept / 'work'}"
            what = ("no record says what staging left in it" if edits is None else
                    f"{len(edits)} file(s) changed since staging: {', '.join(edits[:5])}"
                    + (f" and {len(edits) - 5} more" if len(edits) > 5 else ""))
            staged.notes.append(
                f"the earlier tree is kept, not replaced ({what}): moved to {kept / 'tree'}{beside}. A staged tree is "
                f"made again from the run logs and systems/{staged.system}.json + systems/{staged.system}.user.json: "
                "make edits there, then stage")
        else:
            backup = work / "originals"
            staged.notes.append(f"replaced the earlier tree {tree}, unchanged since staging" + (
                f" and truncation, and its truncation backup {backup} (the new tree holds the accuracy logs whole)"
                if backup.exists() else ""))
            shutil.rmtree(tree)
    if work.exists():
        shutil.rmtree(work)
    tree.mkdir(parents=True)


def _copy_files(source: Path, target: Path, names: tuple[str, ...]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    accuracy_txt = target / "accuracy.txt"
    if accuracy_txt.is_file():  # its first line is the checker's; the lines after it describe the run, in words
        first, *rest = accuracy_txt.read_text().splitlines()
        accuracy_txt.write_text("\n".join([first, *(portable(line) for line in rest)]) + "\n")


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def _write_measurements(folder: Path, test: TestRun, mlperf_conf: Path) -> None:
    """mlperf.conf and user.conf as LoadGen read them, a README saying how the run was made, the model-info JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(mlperf_conf, folder / "mlperf.conf")
    shutil.copy2(test.directory / "user.conf", folder / "user.conf")
    layout = get_round(test.round).layout
    _write_json(folder / layout.model_info.format(system=test.system, implementation=implementation(test.record),
                                                  scenario=test.scenario), model_info(test.record))
    fields, provenance = test.record.fields, test.record.provenance
    code = f"{layout.source}/{test.benchmark}/{implementation(test.record)}/README.md"
    # Paths a run was given or found are written relative to the checkout (build/...): no folder of this machine.
    (folder / "README.md").write_text(portable(
        f"# {test.benchmark} {test.scenario} on {test.system}\n\n"
        f"Round {test.round}, LoadGen {test.record.loadgen_version}; backend `{fields['backend']}`, "
        f"precision `{fields['precision']}`; harness commit "
        f"`{test.record.versions.get('harness_commit')}`.\n\n"
        f"- model: {provenance.get('model')}\n- inputs: {provenance.get('inputs')}\n"
        f"- weights: {provenance.get('weights')}\n\n"
        f"Reproduce (`{code}` has the setup), with the settings this run was given on its command line:\n\n"
        f"```bash\nmake run ROUND={test.round} RUN_ARGS=\"--benchmarks={test.benchmark} "
        f"--scenarios={test.scenario.lower()} --system_name={test.system}"
        + "".join(f" --{name}={value}" for name, value in test.record.given().items()) + "\"\n```\n"))


def _write_code(staged: Staged, tests: list[TestRun], commit: str | None) -> None:
    """code/: the harness's source at the runs' commit, a README per benchmark and implementation, and
    documentation/calibration.md."""
    layout = get_round(staged.round).layout
    if commit:
        staged.problems += write_source(staged.tree, commit, Path(layout.source) / "source")
    url = repository_url()
    quantized = {test.benchmark for test in tests if uses_quantization(test.record)}
    for test in tests:
        write_code_readme(staged.tree, test, commit, url, test.benchmark in quantized)
    write_calibration(staged.tree, [test for test in tests if test.mode is TestMode.PerformanceOnly],
                      required=get_round(staged.round).calibration_doc_required)


def _write_tree_readme(staged: Staged, chosen: dict[tuple[str, str, TestMode], TestRun]) -> None:
    lines = [f"# {staged.tree.name}: closed division, round {staged.round}, system {staged.system}", "",
             "Staged by `make stage_results` from these tests:", ""]
    lines += [f"- {test.describe()}: {test.verdict} ({test.directory})" for test in
              sorted(chosen.values(), key=lambda t: (t.benchmark, t.scenario, t.mode.value))]
    layout = get_round(staged.round).layout
    documents = [(f"{layout.source}/source/", "the harness's source, at the commit the runs recorded"),
                 (f"{layout.source}/<benchmark>/<implementation>/README.md", "how to run each benchmark with it"),
                 (CALIBRATION_DOC.as_posix(), "how each FP8 engine was calibrated"),
                 (f"{layout.measurements}/<system>/<benchmark>/<Scenario>/", "mlperf.conf, user.conf, the model-info "
                                                                             "JSON and the command of each run"),
                 (f"systems/{staged.system}.json", "the system description")]
    lines += ["", "Beside the logs (results/, compliance/):", ""]
    lines += [f"- `{path}`: {what}" for path, what in documents
              if staged.tree.joinpath(path.split("<")[0]).exists()]
    if any(ran_no_model(t.record) for t in chosen.values()):
        lines += ["", "**This is a pipeline test, not a result**: the oracle backend (gold answers, no model) ran "
                  "some tests; it checks that staging, truncation and the checker work."]
    if staged.problems:
        lines += ["", "**Staged with --allow_incomplete: this tree is NOT a complete, submittable set.** Reasons:",
                  ""] + [f"- {problem}" for problem in staged.problems]
    staged.tree.joinpath("README.md").write_text(portable("\n".join(lines) + "\n"))
