"""`make test` shows progress from the start, and a test that needs the official MLCommons tools fails, naming the
fix, when they are missing: it never skips, so a suite that judged nothing by the official tools does not pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from code.common import paths
from code.common.paths import REPO_ROOT
from code.common.rounds import ROUNDS
from tests.conftest import official_tools

FAST_FILE = "tests/common/test_lock_portable.py"
# One test per round that reads the official submission checker.
NEEDS_TOOLS = "tests/common/test_rounds.py::test_table_matches_the_official_checker"


def test_make_test_names_each_test_file_as_it_starts(tmp_path):
    """The pytest command `make test` runs, on one file, writing to a pipe as CI's log does."""
    done = subprocess.run(["make", "-n", "--no-print-directory", "test", f"PYTEST_ARGS={FAST_FILE}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    command = done.stdout.strip().splitlines()[-1]
    assert "-m pytest" in command and " -q" not in command and "--quiet" not in command
    ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    progress = next(i for i, line in enumerate(lines) if line.startswith(f"{FAST_FILE} ."))
    header = next(i for i, line in enumerate(lines) if line.startswith("official MLCommons tools: "))
    assert header < progress


def test_missing_official_tools_fail_the_tests_that_need_them_naming_the_fix(tmp_path):
    missing = tmp_path / "no-tools"
    env = {**os.environ, "MLPERF_INFERENCE_TOOLS": str(missing)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", NEEDS_TOOLS],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{len(ROUNDS)} failed" in done.stdout and "skipped" not in done.stdout
    assert (f"official MLCommons tools: {missing} (missing for {', '.join(ROUNDS)}: the tests that need them fail)"
            in done.stdout)
    assert (f"no official MLCommons tools of round v5.0 at {missing / 'v5.0' / 'tools' / 'submission'}: run `git "
            f"clone --branch v5.0 https://github.com/mlcommons/inference {missing / 'v5.0'}`, or set "
            "MLPERF_INFERENCE_TOOLS to the folder holding one such clone per round") in done.stdout


def test_official_tools_fails_rather_than_skips_and_returns_the_folder_when_present(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OFFICIAL_TOOLS_DIR", tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"no official MLCommons tools of round v5\.0 at .*compliance: run"):
        official_tools("v5.0", "compliance")
    (tmp_path / "v5.0" / "compliance").mkdir(parents=True)
    assert official_tools("v5.0", "compliance") == tmp_path / "v5.0" / "compliance"
