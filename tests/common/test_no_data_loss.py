"""No routine command deletes results: the make clean targets, and link_dirs with a relative scratch path.

The make targets run for real on a scratch build folder (``BUILD_DIR=...`` on make's command line).
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from code.common.paths import REPO_ROOT
from scripts import link_dirs

# Every kind of result: run logs, bench measurements, staged submissions, audit runs, tuned values, device checks and
# host-share measurements. A folder no clean target names (a user's own) is kept as well.
RESULTS = ("logs/2026.11.24-10.00.00/CPU", "logs/2026.11.24-11.00.00", "bench/2026.11.24", "submission/closed",
           "submission_work/MyOrg", "compliance_logs/2026.11.24-12.00.00/CPU", "tuned/CPU",
           "check_devices/2026.11.24-13.00.00", "host_share/2026.11.24-14.00.00")
RESULT_FOLDERS = sorted({f.split("/")[0] for f in RESULTS})
UNNAMED = ("my_notes",)
OUTPUTS = ("harness", "lib", "engines/CPU")
SLOW_TO_GET = ("venv/bin", "downloads", "data/squad", "models/bert", "preprocessed_data/squad_tokenized")


def make(target: str, build) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), target, f"BUILD_DIR={build}"],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def build(tmp_path):
    root = tmp_path / "build"
    for folder in RESULTS + UNNAMED + OUTPUTS + SLOW_TO_GET:
        (root / folder).mkdir(parents=True)
        (root / folder / "file").write_text("x")
    (root / ".gitkeep").write_text("")
    return root


def test_clean_keeps_results_and_what_is_slow_to_get_and_says_so(build):
    done = make("clean", build)
    assert done.returncode == 0, done.stderr
    assert all((build / f / "file").exists() for f in RESULTS + UNNAMED + SLOW_TO_GET)
    assert not any((build / f.split("/")[0]).exists() for f in OUTPUTS)
    assert done.stdout.splitlines() == [
        f"[clean] deleted from {build}: harness lib engines",
        f"[clean] kept results: {' '.join(RESULT_FOLDERS)} (`make clean_logs` deletes build/logs)",
        "[clean] kept as well: data downloads models my_notes preprocessed_data venv"]


def test_clean_all_keeps_every_result_folder_and_says_what_it_deleted(build):
    done = make("clean_all", build)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in build.iterdir()) == sorted([".gitkeep", *RESULT_FOLDERS, *UNNAMED])
    assert all((build / f / "file").exists() for f in RESULTS + UNNAMED)
    assert done.stdout.splitlines() == [
        f"[clean_all] deleted from {build}: harness lib engines venv downloads data models preprocessed_data",
        f"[clean_all] kept results: {' '.join(RESULT_FOLDERS)} (`make clean_logs` deletes build/logs)",
        "[clean_all] kept as well: my_notes"]


def test_clean_all_deletes_only_the_links_to_a_scratch_folder(build, tmp_path):
    scratch = tmp_path / "scratch" / "data"
    scratch.mkdir(parents=True)
    (scratch / "squad.json").write_text("x")
    shutil.rmtree(build / "data")
    (build / "data").symlink_to(scratch, target_is_directory=True)
    done = make("clean_all", build)
    assert done.returncode == 0, done.stderr
    assert not (build / "data").exists() and (scratch / "squad.json").exists()


def test_the_results_make_names_are_the_ones_kept_here():
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), "-pn", "help"],
                          capture_output=True, text=True, timeout=60)
    named = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS :="))
    assert sorted(named.split(":=")[1].split()) == RESULT_FOLDERS


def test_only_clean_logs_deletes_logs_and_says_how_many(build):
    done = make("clean_logs", build)
    assert done.returncode == 0, done.stderr
    assert not (build / "logs").exists()
    assert all((build / f / "file").exists() for f in RESULTS[2:] + OUTPUTS + SLOW_TO_GET)
    assert f"[clean_logs] deleted {build / 'logs'} (2 run folders)" in done.stdout


def test_make_help_says_what_clean_keeps():
    done = make("help", REPO_ROOT / "build")
    kept = " ".join(done.stdout.split())
    assert ("both keep results: build/logs, build/bench, build/compliance_logs, build/tuned, build/submission, ...; "
            "each says what it deleted and kept") in kept
    assert re.search(r"make clean_logs +delete the logs in build/logs of runs no longer running", done.stdout)


def test_link_dirs_refuses_a_relative_scratch_path(tmp_path, monkeypatch):
    dirs = tuple(tmp_path / "build" / name for name in ("data", "models", "preprocessed_data"))
    monkeypatch.setattr(link_dirs, "LINKED", dirs)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(link_dirs.LinkDirsError, match=f"export MLPERF_SCRATCH_PATH={tmp_path / 'scratch'}"):
        link_dirs.link_dirs("scratch")
    assert not (tmp_path / "build").exists() and not (tmp_path / "scratch").exists()


def test_link_dirs_main_exits_2_naming_the_absolute_path(tmp_path):
    env = {**os.environ, "MLPERF_SCRATCH_PATH": "scratch", "MLPERF_BUILD_DIR": str(tmp_path / "build")}
    done = subprocess.run([sys.executable, "-m", "scripts.link_dirs"], cwd=REPO_ROOT, capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr == (f"ERROR: MLPERF_SCRATCH_PATH=scratch is a relative path; links need an absolute one. "
                           f"If you meant it from {REPO_ROOT}: export MLPERF_SCRATCH_PATH={REPO_ROOT / 'scratch'}\n")
    assert not (tmp_path / "build").exists()


def test_link_dirs_expands_home(tmp_path, monkeypatch):
    dirs = tuple(tmp_path / "build" / name for name in ("data", "models", "preprocessed_data"))
    monkeypatch.setattr(link_dirs, "LINKED", dirs)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    link_dirs.link_dirs("~/scratch")
    assert all(d.is_symlink() and d.resolve() == tmp_path / "home" / "scratch" / d.name for d in dirs)


def test_link_dirs_read_only_scratch_is_one_line_naming_the_fix(tmp_path):
    """/sys refuses new folders even to root (EPERM or EROFS): a real read-only scratch path."""
    env = {**os.environ, "MLPERF_SCRATCH_PATH": "/sys/mlperf_scratch", "MLPERF_BUILD_DIR": str(tmp_path / "build")}
    done = subprocess.run([sys.executable, "-m", "scripts.link_dirs"], cwd=REPO_ROOT, capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("ERROR: cannot create /sys/mlperf_scratch")
    assert ("MLPERF_SCRATCH_PATH=/sys/mlperf_scratch is read-only or not yours; make it writable (chmod u+w "
            "/sys/mlperf_scratch, or ask its owner), or export MLPERF_SCRATCH_PATH=<a writable folder>, then run "
            "`make link_dirs` again") in lines[0]
    assert not (tmp_path / "build" / "data").is_symlink()  # nothing pointed at a folder that does not exist


def test_link_dirs_read_only_build_folder_names_it(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    dirs = tuple(tmp_path / "build" / name for name in ("data", "models", "preprocessed_data"))
    monkeypatch.setattr(link_dirs, "LINKED", dirs)
    (tmp_path / "build").mkdir()

    def refuse(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "symlink_to", refuse)
    with pytest.raises(link_dirs.LinkDirsError) as error:
        link_dirs.link_dirs(str(tmp_path / "scratch"))
    assert str(error.value) == (f"cannot create {dirs[0]} (Permission denied): {tmp_path / 'build'} is read-only "
                                "or not yours; make it writable (chmod u+w), then run `make link_dirs` again")
    assert (tmp_path / "scratch" / "data").is_dir()  # the scratch side is kept for the rerun
