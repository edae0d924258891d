"""Submission commands meet bad input or a failing tool: one line naming the fix, the right exit, nothing deleted.

Fast cases, without runs: each builds the few files the command reads in a private build folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.paths import REPO_ROOT
from code.submission.stage import StageError, stage, staged_round


def _submission(build: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "code.submission", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "MLPERF_BUILD_DIR": str(build), **(env or {})})


@pytest.mark.parametrize("submitter", ["..", ".", "", "a/b", "My Org", "../logs"])
def test_a_submitter_that_is_not_a_folder_name_is_refused_before_anything_is_deleted(tmp_path, submitter):
    """Staging deletes <work_dir>/<submitter> first: SUBMITTER=.. would delete the folder holding the run logs."""
    work = tmp_path / "build" / "submission_work"
    kept = tmp_path / "build" / "logs" / "run" / "metadata.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    with pytest.raises(StageError, match="is not a folder name"):
        stage(submitter, logs=[kept.parent], out_dir=tmp_path / "build" / "submission", work_dir=work)
    with pytest.raises(StageError, match="is not a folder name"):
        staged_round(submitter, work_dir=work)
    assert kept.read_text() == "{}"


def test_truncate_and_check_refuse_dot_dot_too(tmp_path):
    for action in ("truncate", "check"):
        done = _submission(tmp_path, action, "--submitter=..")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("ERROR: SUBMITTER='..' is not a folder name") and "Traceback" not in done.stderr

