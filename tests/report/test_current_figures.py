"""`make figures`: the Current figures table of documentation/performance.md is what its records generate, each row
cites a measurement id the journal defines, and a real run's logs add or replace rows by command."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from code.mlperf.arguments import parse_run_args
from code.mlperf.run_record import read_record
from code.report.current_figures import JOURNAL, PAGE, RECORDS, journal_ids, main, read_rows, shown, thousands
from tests.report.test_results import PrivateBuild

RUN_ARGS = ("--backend=oracle --scenarios=offline --test_run --gpu_batch_size=4 --offline_expected_qps=4000 "
            "--oracle_batch_ms=1 --min_duration=1000 --min_query_count=1")
NEW_ID = "cpu-oracle-test"


@pytest.fixture()
def copies(tmp_path) -> dict[str, Path]:
    """The records, the page and the journal copied, so a test writes none of the repository's."""
    journal = tmp_path / "journal"
    shutil.copytree(JOURNAL, journal)
    day = journal / "2026-11-28.md"
    day.write_text(day.read_text() + f"\n## A CPU run of the oracle backend\n\nMeasurement id: `{NEW_ID}`\n")
    records, page = tmp_path / "current.csv", tmp_path / "performance.md"
    shutil.copy(RECORDS, records)
    shutil.copy(PAGE, page)
    return {"records": records, "page": page, "journal": journal}


def args(copies: dict[str, Path], *more: str) -> list[str]:
    return [*more, *(f"--{name}={path}" for name, path in copies.items())]


def test_the_committed_table_is_what_the_records_generate(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().err


def test_every_row_cites_an_id_the_journal_defines_once():
    ids = journal_ids()
    rows = read_rows()
    assert len(rows) >= 20
    assert {row.measurement for row in rows} <= set(ids)
    for row in rows:
        assert f"[{row.measurement}](notes/journal/{ids[row.measurement].name})" in PAGE.read_text()


def test_a_hand_edit_of_the_table_fails_the_check(copies, capsys):
    page = copies["page"]
    text = page.read_text()
    page.write_text(text.replace("| 8,488 (690 W", "| 8,588 (690 W", 1))
    assert page.read_text() != text
    assert main(args(copies, "--check")) == 1
    assert capsys.readouterr().err.strip() == (f"ERROR: the Current figures table of {page} differs from "
                                               f"{copies['records']}: run make figures and commit both")
    assert main(args(copies)) == 0
    assert page.read_text() == text


def test_a_row_citing_an_undefined_id_is_refused(copies, capsys):
    records = copies["records"]
    lines = records.read_text().splitlines()
    lines[1] = lines[1].replace("any-gpu-int8-watts-2026-11-28", "nowhere-2026-01-01")
    records.write_text("\n".join(lines) + "\n")
    page_before = copies["page"].read_text()
    assert main(args(copies)) == 2
    error = capsys.readouterr().err
    assert error.startswith("ERROR: no journal entry defines measurement id(s) nowhere-2026-01-01: add a line")
    assert len(error.strip().splitlines()) == 1
    assert copies["page"].read_text() == page_before


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, harness_built) -> Path:
    """One real CPU run, made with the command `make run LOG_DIR=<folder>` runs, in a private build folder."""
    build = PrivateBuild(tmp_path_factory.mktemp("build"))
    log_dir = build.build / "logs" / "2026.11.28-15.00.00"
    done = build.run(build.run_command(log_dir, RUN_ARGS))
    assert done.returncode in (0, 3), done.stdout + done.stderr  # VALID, or INVALID on a loaded machine
    return log_dir


@pytest.mark.slow
def test_a_run_adds_its_row_and_a_later_run_replaces_it(cpu_run, copies, capsys):
    before = read_rows(copies["records"])
    assert main(args(copies, f"--add={cpu_run}", f"--measurement={NEW_ID}")) == 0
    record = read_record(cpu_run / "CPU" / "bert-99" / "Offline")
    verdict = "VALID" if record.result.valid else "INVALID"
    assert capsys.readouterr().out.splitlines()[0] == (
        f"[figures] bert-99 Offline, CPU x0: {thousands(shown(record.result.value))} samples/s {verdict}")
    rows = read_rows(copies["records"])
    assert len(rows) == len(before) + 1
    row = next(row for row in rows if row.device == "CPU")
    assert (row.benchmark, row.scenario, row.gpus, row.unit, row.measurement) == (
        "bert-99", "Offline", 0, "samples/s", NEW_ID)
    assert float(row.figure) == pytest.approx(record.result.value, rel=1e-3)
    # The command measures the same test again: the run's RUN_ARGS, without its log folder.
    run_args = row.command.removeprefix('make run RUN_ARGS="').removesuffix('"')
    assert "--log_dir" not in run_args and "--backend=oracle" in run_args and "--test_run=true" in run_args
    again = parse_run_args(run_args.split())
    assert again.overrides["min_duration"] == 1000 and again.overrides["backend"] == "oracle"
    assert row.line(journal_ids(copies["journal"])) in copies["page"].read_text()
    # The same key again (a later run of this test) replaces the row, with the command given.
    assert main(args(copies, f"--add={cpu_run}", f"--measurement={NEW_ID}", "--command=make run")) == 0
    rows = read_rows(copies["records"])
    assert len(rows) == len(before) + 1
    assert [row.command for row in rows if row.device == "CPU"] == ["make run"]
    with copies["records"].open() as file:
        assert sum(1 for _ in csv.reader(file)) == len(before) + 2  # the header and the rows


@pytest.mark.slow
def test_a_folder_without_a_finished_test_or_an_id_changes_nothing(cpu_run, copies, tmp_path, capsys):
    records = copies["records"].read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(args(copies, f"--add={empty}", f"--measurement={NEW_ID}")) == 2
    assert capsys.readouterr().err.strip() == (
        f"ERROR: {empty} holds no finished performance test with a figure: run one first, e.g. make run "
        'RUN_ARGS="--benchmarks=bert --scenarios=offline --test_run"')
    assert main(args(copies, f"--add={cpu_run}")) == 2
    assert "--add needs --measurement=<id>" in capsys.readouterr().err
    assert main(args(copies, f"--add={cpu_run}", "--measurement=not-in-the-journal")) == 2
    assert "no journal entry defines measurement id not-in-the-journal" in capsys.readouterr().err
    assert copies["records"].read_text() == records


@pytest.mark.slow
def test_a_stand_in_run_on_a_gpu_is_named_by_both_gpus_with_its_power(cpu_run, copies, tmp_path):
    """The CPU run's record edited to what a --gpu_as run on one H200 records: its system, GPU, power."""
    run = tmp_path / "2026.11.28-16.00.00"
    shutil.copytree(cpu_run, run)
    (run / "CPU").rename(run / "A100_SXM4_40GBx1")
    metadata = run / "A100_SXM4_40GBx1" / "bert-99" / "Offline" / "metadata.json"
    record = json.loads(metadata.read_text())
    record["system_name"] = "A100_SXM4_40GBx1"
    record["devices"]["used"] = ["cuda:0"]
    record["system"]["gpus"] = [{"name": "NVIDIA H200", "memory_gib": 139.8}]
    record["config"]["fields"]["gpu_as"] = "A100_SXM4_40GB"
    record["power"] = {"mean_w": 669.2, "samples_per_joule": 0.034712}
    record["result"]["value"] = 23.1867
    metadata.write_text(json.dumps(record))
    assert main(args(copies, f"--add={run}", f"--measurement={NEW_ID}")) == 0
    row = next(row for row in read_rows(copies["records"]) if row.measurement == NEW_ID)
    assert (row.device, row.gpus, row.figure, row.watts, row.samples_per_joule) == (
        "H200 as A100 40GB", 1, "23.19", "669", "0.0347")
    assert row.cell() == "23.19 (669 W: 0.0347 samples/J)"
