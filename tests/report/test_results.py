"""`make results`: the newest result per system, benchmark, scenario, GPU count and test as a table and a CSV, and
two runs compared; read from run folders copied from one real CPU run (made with `make run LOG_DIR=...`, whose
LOG_DIR is honoured and never written into twice)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from code.common.paths import LIB_DIR, REPO_ROOT
from code.report.compare import compare_runs
from code.report.make_results import main
from code.report.results import newest_results, shown_path

pytestmark = pytest.mark.slow
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"
# A SubmissionRun of the oracle backend: an accuracy and a performance test in a few seconds, in the layout of a
# submission (<Scenario>/accuracy, <Scenario>/performance/run_1).
RUN_ARGS = ("--backend=oracle --test_mode=SubmissionRun --scenarios=offline --gpu_batch_size=4 "
            "--offline_expected_qps=4000 --oracle_batch_ms=1 --min_duration=1000 --min_query_count=1")
DAY = 86_400.0
T0 = time.mktime((2026, 1, 1, 10, 0, 0, 0, 0, -1))


def make_command(target: str, *variables: str) -> list[str]:
    """The command `make <target>` runs, as make prints it (the C++ core and venv are already built here), as the
    recipe's shell reads it (LOG_DIR is quoted), without the environment assignments before it."""
    lines = subprocess.run(["make", "-n", "--no-print-directory", target, *variables], cwd=REPO_ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    words = shlex.split([line for line in lines if "-m code." in line][-1])
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # e.g. MLPERF_PLAN_SAID=1 (code/actions/announce.py)
        words.pop(0)
    return words


class PrivateBuild:
    """A build folder of its own (the C++ core linked in) with the tiny SQuAD set preprocessed, where the command
    `make run LOG_DIR=<folder> RUN_ARGS=...` runs really run: the report tests read what a real CPU run writes."""

    def __init__(self, build: Path) -> None:
        (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
        self.build = build
        self.env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
        done = subprocess.run([sys.executable, "-m", "code.bert.preprocess_data", "--squad_json", str(FIXTURE),
                               "--preprocessed_data_dir", str(build / "preprocessed_data")], cwd=REPO_ROOT,
                              capture_output=True, text=True, env=self.env)
        assert done.returncode == 0, done.stderr

    def run_command(self, log_dir: Path, run_args: str) -> list[str]:
        command = make_command("run", f"LOG_DIR={log_dir}", f"RUN_ARGS={run_args}")
        assert f"--log_dir={log_dir}" in command
        return command

    def run(self, command: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *command[1:]], cwd=REPO_ROOT, capture_output=True, text=True,
                              env=self.env, timeout=300)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, harness_built):
    """One real CPU run, made with the command `make run LOG_DIR=<folder>` runs, in a private build folder."""
    build = PrivateBuild(tmp_path_factory.mktemp("build"))
    log_dir = build.build / "mine"
    command = build.run_command(log_dir, RUN_ARGS)
    done = build.run(command)
    assert done.returncode in (0, 3), done.stdout + done.stderr  # VALID, or INVALID on a loaded machine
    again = build.run(command)
    return log_dir, done, again


def test_make_log_dir_is_where_the_run_writes_and_a_second_run_is_refused(real_run):
    log_dir, done, again = real_run
    test_dir = log_dir / "CPU" / "bert-99" / "Offline"
    assert (test_dir / "accuracy" / "metadata.json").is_file()
    assert (test_dir / "performance" / "run_1" / "metadata.json").is_file()
    assert f"Logs: {log_dir}" in done.stdout
    assert again.returncode == 2
    assert again.stderr.strip() == (f"ERROR: --log_dir={log_dir} already holds files from an earlier run; choose a "
                                    "new folder or leave --log_dir out to get build/logs/<timestamp>")


def edit_test(folder: Path, started: float, devices: list[str] | None = None, system: str | None = None,
              **result: object) -> None:
    """Change a copied test's start time (test_spec.json), its devices, system and fields of its result
    (metadata.json)."""
    spec = json.loads((folder / "test_spec.json").read_text())
    (folder / "test_spec.json").write_text(json.dumps({**spec, "started": started}))
    metadata = json.loads((folder / "metadata.json").read_text())
    if devices is not None:
        metadata["devices"]["used"] = devices
    if system is not None:
        metadata["system_name"] = system
    metadata["result"].update(result)
    (folder / "metadata.json").write_text(json.dumps(metadata))


def copy_run(source: Path, logs: Path, name: str, started: float, system: str = "CPU",
             devices: list[str] | None = None) -> Path:
    """A copy of the real run as another run folder: named ``name``, its tests started at ``started`` (accuracy)
    and a minute later (performance), on ``system`` with ``devices``."""
    run = logs / name
    shutil.copytree(source, run)
    if system != "CPU":
        (run / "CPU").rename(run / system)
    test = run / system / "bert-99" / "Offline"
    edit_test(test / "accuracy", started, devices=devices, system=system)
    edit_test(test / "performance" / "run_1", started + 60, devices=devices, system=system)
    return run


@pytest.fixture()
def logs(real_run, tmp_path):
    """Four runs copied from the real one: an older and a newer CPU run, a two-GPU system, and a newest CPU run
    whose performance test failed; the newer CPU run also holds a --test_run probe."""
    source = real_run[0]
    logs = tmp_path / "logs"
    old = copy_run(source, logs, "2026.01.01-10.00.00", T0)
    edit_test(old / "CPU/bert-99/Offline/performance/run_1", T0 + 60, value=100.0, valid=False, verdict="INVALID")
    new = copy_run(source, logs, "2026.01.02-10.00.00", T0 + DAY)
    performance = new / "CPU/bert-99/Offline/performance/run_1"
    edit_test(performance, T0 + DAY + 60, value=250.0, valid=True, verdict="VALID but not submittable")
    probe = new / "probes" / "CPU" / "bert-99" / "Offline"
    shutil.copytree(performance, probe)
    edit_test(probe, T0 + DAY + 1, value=999.0)  # a step of the run, not its result: never shown
    gpus = copy_run(source, logs, "2026.01.03-10.00.00", T0 + 2 * DAY, system="H100_SXM_80GBx2",
                    devices=["cuda:0", "cuda:1"])
    edit_test(gpus / "H100_SXM_80GBx2/bert-99/Offline/performance/run_1", T0 + 2 * DAY + 60, value=20_000.0,
              valid=True, verdict="VALID")
    failed = copy_run(source, logs, "2026.01.04-10.00.00", T0 + 3 * DAY)
    shutil.rmtree(failed / "CPU/bert-99/Offline/accuracy")
    edit_test(failed / "CPU/bert-99/Offline/performance/run_1", T0 + 3 * DAY + 60, valid=None, value=None,
              verdict="FAILED")
    return logs


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_newest_result_per_system_benchmark_scenario_gpus_and_test(logs):
    newest = newest_results(logs)
    assert [(r.system, r.gpus, r.test, r.metric, r.figure, r.unit, r.verdict, r.folder.relative_to(logs).parts[0])
            for r in newest.results] == [
        ("CPU", 0, "accuracy", "f1", 100.0, "%", "PASS but not submittable", "2026.01.02-10.00.00"),
        ("CPU", 0, "performance", "samples_per_second", 250.0, "samples/s", "VALID but not submittable",
         "2026.01.02-10.00.00"),  # not the FAILED one of the 4th, nor the probe
        ("H100_SXM_80GBx2", 2, "accuracy", "f1", 100.0, "%", "PASS but not submittable", "2026.01.03-10.00.00"),
        ("H100_SXM_80GBx2", 2, "performance", "samples_per_second", 20_000.0, "samples/s", "VALID",
         "2026.01.03-10.00.00"),
    ]
    assert newest.unfinished == 1 and newest.unreadable == {}


def cells(line: str) -> list[str]:
    """A table line's cells: columns are two or more spaces apart, and no cell holds two spaces."""
    return re.split(r"\s{2,}", line.strip())


def test_make_results_prints_the_table_and_writes_the_csv(logs, capsys):
    before = digest(logs)
    assert main(["--build_dir", str(logs.parent)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert cells(out[0]) == ["system", "benchmark", "model", "scenario", "GPUs", "test", "metric", "figure", "unit",
                             "caveats", "vs best published", "verdict", "date", "log folder"]
    assert cells(out[3])[:12] == ["CPU", "bert-99", "none (oracle backend)", "Offline", "0", "performance",
                                  "samples_per_second", "250", "samples/s", "no model, shortened", "-",
                                  "VALID but not submittable"]
    assert cells(out[3])[12] == "2026-01-02 10:01:00"
    assert cells(out[5])[:8] == ["H100_SXM_80GBx2", "bert-99", "none (oracle backend)", "Offline", "2",
                                 "performance", "samples_per_second", "20,000"]
    assert cells(out[5])[10] == "not comparable"  # the oracle backend runs no model
    assert out[-2] == ("not shown: 1 test(s) that did not finish (FAILED or stopped: no figure; each run's "
                       "summary.txt says why)")
    csv_path = logs.parent / "results.csv"
    assert out[-1] == f"CSV: {csv_path}"
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 4
    assert rows[1] == {
        "system": "CPU", "benchmark": "bert-99", "scenario": "Offline", "gpus": "0", "test": "performance",
        "metric": "samples_per_second", "figure": "250.0", "unit": "samples/s", "samples_per_joule": "",
        "verdict": "VALID but not submittable",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(T0 + DAY + 60)),
        "log_folder": str((logs / "2026.01.02-10.00.00/CPU/bert-99/Offline/performance/run_1").resolve()),
        "model": "none (oracle backend)", "caveats": "no model; shortened", "published_per_gpu": "",
        "published_ratio": "", "published_by": "", "published_source": ""}
    assert rows[3]["published_per_gpu"] == "9109.5" and rows[3]["published_ratio"] == ""
    assert rows[3]["published_source"].endswith("/closed/Supermicro/results/SYS_421GE_TNHR2_LCC_H100_SXM_80GBx8_TRT")
    assert digest(logs) == before  # the logs are read, never written


def test_make_results_compares_two_runs(logs, capsys):
    run_a, run_b = logs / "2026.01.01-10.00.00", logs / "2026.01.03-10.00.00"
    rows = compare_runs(logs / "2026.01.01-10.00.00", logs / "2026.01.02-10.00.00")
    assert [(row.key[4], row.ratio) for row in rows] == [("accuracy", 1.0), ("performance", 2.5)]
    assert {row.key[5] for row in rows} == {"none (oracle backend)"}  # the model is part of what matches

    assert main(["--build_dir", str(logs.parent), "--compare", f"{run_a},2026.01.03-10.00.00"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"a: {run_a}", f"b: {run_b}"]
    assert cells(out[2]) == ["system", "benchmark", "model", "scenario", "GPUs", "test", "a", "b", "unit", "b / a",
                             "verdict a", "verdict b"]
    # Another system: each of its results in b only, each of a's in a only, no ratio.
    assert cells(out[5]) == ["CPU", "bert-99", "none (oracle backend)", "Offline", "0", "performance", "100", "-",
                             "samples/s", "-", "INVALID", "-"]
    assert cells(out[7])[:10] == ["H100_SXM_80GBx2", "bert-99", "none (oracle backend)", "Offline", "2",
                                  "performance", "-", "20,000", "samples/s", "-"]
    rows = list(csv.DictReader((logs.parent / "results_compare.csv").open()))
    assert {row["model"] for row in rows} == {"none (oracle backend)"}
    assert [(row["system"], row["test"], row["figure_a"], row["figure_b"], row["ratio_b_over_a"]) for row in rows] == [
        ("CPU", "accuracy", "100.0", "", ""), ("CPU", "performance", "100.0", "", ""),
        ("H100_SXM_80GBx2", "accuracy", "", "100.0", ""), ("H100_SXM_80GBx2", "performance", "", "20000.0", "")]

    assert main(["--build_dir", str(logs.parent), "--compare", "2026.01.01-10.00.00,2026.01.02-10.00.00"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert cells(out[5]) == ["CPU", "bert-99", "none (oracle backend)", "Offline", "0", "performance", "100", "250",
                             "samples/s", "2.500", "INVALID", "VALID but not submittable"]


@pytest.mark.parametrize("compare,message", [
    ("2026.01.01-10.00.00", "COMPARE=2026.01.01-10.00.00: give two run folders separated by a comma"),
    ("2026.01.01-10.00.00,nope", "no run folder nope (nor "),
])
def test_a_comparison_that_cannot_be_made_names_the_fix(logs, capsys, compare, message):
    assert main(["--build_dir", str(logs.parent), "--compare", compare]) == 2
    assert capsys.readouterr().err.startswith(f"ERROR: {message}")


def test_a_run_without_a_finished_test_cannot_be_compared(logs, capsys):
    empty = logs / "2026.01.05-10.00.00"
    empty.mkdir()
    assert main(["--build_dir", str(logs.parent), "--compare", f"2026.01.01-10.00.00,{empty}"]) == 2
    assert f"ERROR: {empty} holds no finished test" in capsys.readouterr().err


def test_no_runs_yet_says_the_first_command(tmp_path, capsys):
    assert main(["--build_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no finished test under {tmp_path / 'logs'}: run one first, e.g. make run RUN_ARGS=")
    assert (tmp_path / "results.csv").read_text().startswith("system,benchmark,scenario,gpus,test,metric,figure")


def test_make_results_passes_compare_and_the_build_folder():
    command = make_command("results", "COMPARE=a,b")
    assert command[1:] == ["-m", "code.report.make_results", f"--build_dir={REPO_ROOT / 'build'}", "--compare=a,b"]
    assert "--compare" not in " ".join(make_command("results"))


def test_make_results_compares_a_folder_with_spaces(logs, tmp_path, capsys):
    """COMPARE reaches the command as one argument, spaces and all."""
    spaced = shutil.copytree(logs / "2026.01.01-10.00.00", tmp_path / "runs with spaces" / "run a")
    command = make_command("results", f"COMPARE={spaced},2026.01.03-10.00.00")
    assert command[-1] == f"--compare={spaced},2026.01.03-10.00.00"
    assert main(["--build_dir", str(logs.parent), command[-1]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"a: {spaced}", "b: " + shown_path(logs / "2026.01.03-10.00.00")]


def test_an_unreadable_metadata_json_is_named_with_why(logs, capsys):
    """A test whose metadata.json was cut short (a full disk, an edit) is named, with why, under the table: the row
    shown for it is then an older test's."""
    cut = logs / "2026.01.02-10.00.00/CPU/bert-99/Offline/performance/run_1/metadata.json"
    cut.write_bytes(cut.read_bytes()[:300])
    assert main(["--build_dir", str(logs.parent)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert cells(out[3])[:8] + cells(out[3])[11:12] == [
        "CPU", "bert-99", "none (oracle backend)", "Offline", "0", "performance", "samples_per_second", "100",
        "INVALID"]  # the older run's, and said to be so below
    assert out[-4:-2] == [
        "not shown: 1 test(s) that did not finish (FAILED or stopped: no figure; each run's summary.txt says why)",
        "not shown: 1 test(s) whose metadata.json cannot be read (cut short or edited; a row above may be older than "
        "such a test):"]
    why = r"no readable metadata.json \(.+: line 1 column \d+ .*\)"
    assert re.fullmatch(rf"  {re.escape(shown_path(cut.parent))}: {why}", out[-2]), out[-2]
