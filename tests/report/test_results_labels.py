"""`make results` says which model a figure is from and what kind of run made it, and sets it beside the best
published figure per GPU (bad input y13: a tiny model's quick run took the place of the last BERT-large figure, with
no word of the model).

The tiny run is real: the command `make run` runs for ``--model_name=tiny --input_data=synthetic`` with a short
min_duration, in a private build folder. The earlier BERT-large --test_run is that run's folder copied, its record
edited to what a BERT-large --test_run records (a BERT-large run on this CPU would take many minutes); so are the
copies on an H200 system.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.paths import LIB_DIR, REPO_ROOT
from code.report.make_results import main
from tests.report.test_results import make_command

pytestmark = pytest.mark.slow
TINY_RUN = ("--benchmarks=bert --scenarios=offline --model_name=tiny --input_data=synthetic --min_duration=1000 "
            "--min_query_count=1 --offline_expected_qps=200")
TEST = Path("CPU/bert-99/Offline")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, harness_built) -> Path:
    """The tiny model's run, made with the command `make run LOG_DIR=<folder>` runs."""
    build = tmp_path_factory.mktemp("build")
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    log_dir = build / "logs" / "2026.01.02-10.00.00"
    command = make_command("run", f"LOG_DIR={log_dir}", f"RUN_ARGS={TINY_RUN}")
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, *command[1:]], cwd=REPO_ROOT, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode in (0, 3), done.stdout + done.stderr  # VALID, or INVALID on a loaded machine
    return log_dir


def copy_as(run: Path, to: Path, system: str, devices: list[str], started: float, **changes: object) -> None:
    """``run`` copied to ``to`` as a run on ``system``: its test's record changed by ``changes`` (sections of
    metadata.json, merged one level deep), started at ``started``."""
    shutil.copytree(run, to)
    test = to / TEST
    if system != "CPU":
        test = to / system / TEST.relative_to("CPU")
        (to / "CPU").rename(to / system)
    metadata = json.loads((test / "metadata.json").read_text())
    metadata["system_name"], metadata["devices"]["used"] = system, devices
    for section, values in changes.items():
        metadata[section] = {**metadata[section], **values} if isinstance(values, dict) else values
    (test / "metadata.json").write_text(json.dumps(metadata))
    (test / "test_spec.json").write_text(json.dumps({**json.loads((test / "test_spec.json").read_text()),
                                                      "started": started}))


def bert_large(value: float, fields: dict) -> dict:
    """What a BERT-large --test_run on the real checkpoint and data set records, with ``value`` as its figure."""
    return {"provenance": {"model": "BERT-large", "weights": "build/models/bert/model.pytorch",
                           "inputs": "build/preprocessed_data/squad_tokenized", "synthetic_inputs": False,
                           "invalid_because": []},
            "config": {"fields": {**fields, "model_name": "large", "test_run": True}},
            "result": {"value": value, "not_submittable": ["test run (--test_run)"]}}


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_each_figure_says_its_model_its_caveats_and_how_it_compares(tiny_run, capsys):
    logs = tiny_run.parent
    record = json.loads((tiny_run / TEST / "metadata.json").read_text())
    fields = record["config"]["fields"]
    # y13: a BERT-large --test_run first, then the tiny run: both rows are shown, each with its model.
    copy_as(tiny_run, logs / "2026.01.01-10.00.00", "CPU", ["cpu"], 1.0, **bert_large(41.5, fields))
    # The same two on one H200: BERT-large beside the best published per H200; the tiny model not comparable.
    copy_as(tiny_run, logs / "2026.01.03-10.00.00", "H200_SXM_141GBx1", ["cuda:0"], 3.0,
            **bert_large(8264.0, fields))
    copy_as(tiny_run, logs / "2026.01.04-10.00.00", "H200_SXM_141GBx1", ["cuda:0"], 4.0)

    assert main(["--build_dir", str(logs.parent)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = cells(lines[0])
    rows = [dict(zip(header, cells(line), strict=True)) for line in lines[2:6]]
    shown = [(row["system"], row["model"], row["caveats"], row["vs best published"]) for row in rows]
    assert shown == [
        ("CPU", "BERT-large", "shortened", "-"),
        ("CPU", "BERT-tiny", "small model, synthetic, shortened", "-"),
        ("H200_SXM_141GBx1", "BERT-large", "shortened", "90% of Dell v4.1"),
        ("H200_SXM_141GBx1", "BERT-tiny", "small model, synthetic, shortened", "not comparable"),
    ]
    assert rows[1]["figure"] == f"{record['result']['value']:,.6g}" and rows[0]["figure"] == "41.5"
