"""The reliability cases, each run for real on the CPU: the command, its exit status, the first line it prints, and
whether that is what the case expects, as one markdown table (documentation/notes/reliability_cases.md holds the last).

The tests prove each case in CI (the "test" column names where); this script shows a person what a user sees now.
It lives with the tests it checks, as a module pytest does not collect (no ``test_`` prefix), and is run by hand.
Every command runs with a private ``MLPERF_BUILD_DIR`` and log folder in one temporary folder, with the built C++
core linked in, so nothing in the real build/ or build/logs is read or written. It needs the core built
(``make build``) and takes a few minutes on a busy 2-core machine; the long ones are the interrupt cases and the
concurrent pair, which wait for LoadGen to start.

    build/venv/bin/python -m tests.reliability_cases [--only SUBSTRING] [--keep]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from code.common.paths import LIB_DIR, REPO_ROOT
from code.common.supervision import processes_mentioning

# Every harness command starts from the cheapest run that passes every check: no GPU, no data, no engine to load.
BASE = {"device": "cpu", "model_name": "tiny", "precision": "fp32", "input_data": "synthetic", "weights": "random"}
BASE_SHOWN = "$BASE"  # how the table writes BASE, spelled out above it
# A Server test that would last ten minutes: only an interrupt ends it.
LONG_SERVER = {"scenarios": "server", "gpu_batch_size": "8", "synthetic_sample_count": "64",
               "server_target_qps": "20", "min_duration": "600000"}
SQUAD_FIXTURE = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"


@dataclass
class Outcome:
    """What one case did: ``status`` is the exit status (None where several commands ran), ``message`` the line
    that tells the user what happened, ``ok`` whether it is what the issue asks for, ``why`` what failed if not."""

    status: int | None
    message: str
    ok: bool
    why: str = ""


@dataclass
class Case:
    name: str
    command: str
    expected: str
    test: str
    run: Callable[[Workspace], Outcome]


class Workspace:
    """One temporary folder for the whole script; each case takes a fresh sub-folder of it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._count = 0
        self._squad: Path | None = None

    def folder(self, name: str) -> Path:
        self._count += 1
        path = self.root / f"{self._count:02d}-{name}"
        path.mkdir()
        return path

    def build(self, folder: Path) -> Path:
        """A private build/ with the compiled core linked in, as the tests make it."""
        build = folder / "build"
        build.mkdir()
        (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
        return build

    def squad(self) -> Path:
        """The tiny SQuAD fixture, preprocessed once: a real data set of a few features."""
        if self._squad is None:
            out = self.root / "preprocessed_data"
            subprocess.run([sys.executable, "-m", "code.bert.preprocess_data", "--squad_json", str(SQUAD_FIXTURE),
                            "--preprocessed_data_dir", str(out)], cwd=REPO_ROOT, check=True, capture_output=True,
                           env=env_for(self.root / "unused-build"))
            self._squad = out / "squad_tokenized"
        return self._squad

    def shown(self, text: str) -> str:
        return text.replace(str(self.root), "$TMP").replace(str(REPO_ROOT), "$REPO")


def env_for(build: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1", **extra}


def harness_args(*settings: dict[str, str], **more: str) -> list[str]:
    """``--key=value`` for the merged settings (the harness refuses a flag given twice)."""
    merged = {k: v for s in settings for k, v in s.items()} | more
    return [f"--{key}={value}" for key, value in merged.items()]


def main_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "code.main", *args]


def run(command: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=timeout)


def first_error(done: subprocess.CompletedProcess[str]) -> str:
    """The line a user reads first: stderr's first line, else the first ERROR or FAILED line of stdout."""
    lines = done.stderr.splitlines() or [line for line in done.stdout.splitlines()
                                         if line.startswith(("ERROR", "FAILED", "  FAILED"))]
    return lines[0] if lines else (done.stdout.strip().splitlines() or [""])[-1]


def one_clean_line(done: subprocess.CompletedProcess[str], *wanted: str, status: int = 2) -> list[str]:
    """The rule for a mistake: exit ``status``, one ``ERROR:`` line that names what is wrong, no traceback."""
    problems = []
    if done.returncode != status:
        problems.append(f"exit {done.returncode}, not {status}")
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("ERROR: ")]
    if len(errors) != 1:
        problems.append(f"{len(errors)} ERROR lines")
    if "Traceback" in done.stdout + done.stderr:
        problems.append("a traceback")
    problems += [f"does not say {w!r}" for w in wanted if not any(w in line for line in errors)]
    return problems


def outcome(ws: Workspace, done: subprocess.CompletedProcess[str], problems: list[str],
            message: str | None = None) -> Outcome:
    return Outcome(done.returncode, ws.shown(message if message is not None else first_error(done)),
                   not problems, "; ".join(problems))


# --- Mistakes refused before anything runs -------------------------------------------------------------------

def refused(*flags: str, names: str, base: dict[str, str] = BASE) -> Callable[[Workspace], Outcome]:
    """Exit 2, one line naming the field, no build folder and no log folder made."""

    def case(ws: Workspace) -> Outcome:
        folder = ws.folder(names)
        build, logs = folder / "build", folder / "logs"
        settings = dict(base)
        for flag in (word for flags_text in flags for word in flags_text.split()):
            key, _, value = flag.removeprefix("--").partition("=")
            settings[key] = value
        done = run(main_command(["--action=run", *harness_args(settings, log_dir=str(logs))]), env_for(build))
        problems = one_clean_line(done, names)
        problems += [f"wrote {p.name}/" for p in (build, logs) if p.exists()]
        return outcome(ws, done, problems)

    return case


def refused_case(flag: str, test: str, names: str | None = None, base: dict[str, str] = BASE,
                 shown_base: str = BASE_SHOWN) -> Case:
    name = names or flag.removeprefix("--").partition("=")[0]
    return Case(flag, f"`code.main --action=run {shown_base} {flag}`", "exit 2, one line naming the field, "
                "nothing written", test, refused(flag, names=name, base=base))


# --- Interrupts: the test process never outlives the harness ---------------------------------------------------


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def interrupted(how: str) -> Callable[[Workspace], Outcome]:
    """Start the long Server test in its own process group, wait until LoadGen runs, then stop it ``how``:
    SIGINT to the group (Ctrl-C), SIGTERM or SIGKILL to the parent alone (a timeout, a job scheduler)."""

    def case(ws: Workspace) -> Outcome:
        folder = ws.folder(f"interrupt-{how}")
        logs, out_path = folder / "logs", folder / "harness.out"
        test_dir = logs / "CPU" / "bert-99" / "Server"
        with open(out_path, "w") as out:
            harness = subprocess.Popen(
                main_command(["--action=run", *harness_args(BASE, LONG_SERVER, log_dir=str(logs))]),
                cwd=REPO_ROOT, env=env_for(ws.build(folder)), stdout=out, stderr=subprocess.STDOUT, process_group=0)
        try:
            started = wait_until(lambda: "starting LoadGen" in out_path.read_text() or harness.poll() is not None,
                                 300)
            if not started or harness.poll() is not None:
                return Outcome(harness.poll(), "LoadGen never started", False, out_path.read_text()[-300:])
            children = processes_mentioning(str(test_dir / "test_spec.json"))
            signalled = time.monotonic()
            {"SIGINT": lambda: os.killpg(harness.pid, signal.SIGINT), "SIGTERM": harness.terminate,
             "SIGKILL": harness.kill}[how]()
            status = harness.wait(timeout=30)
            gone = wait_until(lambda: not processes_mentioning(str(test_dir)), 5)
            stop_s = time.monotonic() - signalled
        finally:
            if harness.poll() is None:
                harness.kill()
        problems = [] if len(children) == 1 else [f"{len(children)} test processes before the signal"]
        if not gone:
            problems.append("the test process still runs 5 s later")
        want = -signal.SIGKILL if how == "SIGKILL" else 128 + getattr(signal, how)
        if status != want:
            problems.append(f"exit {status}, not {want}")
        output = out_path.read_text()
        if "Traceback" in output:
            problems.append("a traceback")
        result = json.loads((test_dir / "metadata.json").read_text())["result"]
        if result["complete"] is not False:
            problems.append("metadata.json does not say incomplete")
        stopped = [line for line in output.splitlines() if "interrupted by" in line]
        message = stopped[0] if stopped else f"(no output: killed) metadata.json: {result['invalid_reasons'][0]}"
        message += f" [all processes gone {stop_s:.1f} s after the signal]"
        if how != "SIGKILL" and not stopped:
            problems.append("no line saying what was stopped")
        return Outcome(status, ws.shown(message), not problems, "; ".join(problems))

    return case


# --- Two runs at once ------------------------------------------------------------------------------------------

def concurrent_pair(ws: Workspace) -> Outcome:
    """Two Server runs of one system side by side with different target QPS; each records and runs its own."""
    folder = ws.folder("concurrent")
    env = env_for(ws.build(folder))
    short = {**BASE, "scenarios": "server", "gpu_batch_size": "8", "synthetic_sample_count": "64",
             "min_duration": "3000", "min_query_count": "1"}
    engines = run(main_command(["--action=generate_engines", *harness_args(short)]), env)
    if engines.returncode != 0:
        return outcome(ws, engines, ["generate_engines failed"])
    rates = {"a": 20.0, "b": 35.0}
    runs = {name: subprocess.Popen(main_command(["--action=run_harness", *harness_args(
        short, server_target_qps=str(qps), log_dir=str(folder / name))]), cwd=REPO_ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name, qps in rates.items()}
    statuses = {name: p.wait(timeout=300) for name, p in runs.items()}
    for p in runs.values():
        assert p.stdout is not None
        p.stdout.close()
    problems = [f"run {n} exit {s}" for n, s in statuses.items() if s not in (0, 3)]
    recorded = []
    for name, qps in rates.items():
        test_dir = folder / name / "CPU" / "bert-99" / "Server"
        metadata = json.loads((test_dir / "metadata.json").read_text())
        own = metadata["config"]["fields"]["server_target_qps"]
        conf = f"bert.Server.target_qps = {qps}" in (test_dir / "user.conf").read_text()
        recorded.append(f"{name}: user.conf and metadata.json say {own}")
        if own != qps or not conf:
            problems.append(f"run {name} recorded {own}, asked {qps}")
    # Exit 3 is a 3 s Server test missing early stopping on a busy machine: INVALID, not what this case is about.
    message = "; ".join(recorded) + f" (exit {statuses['a']} and {statuses['b']})"
    return Outcome(None, message, not problems, "; ".join(problems))


# --- Damaged files ---------------------------------------------------------------------------------------------

def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def tiny_checkpoint(folder: Path) -> Path:
    """A BERT-tiny checkpoint file, as make download_model leaves the real one."""
    import torch

    from code.bert.model import BERT_CONFIGS, random_weights

    checkpoint = folder / "model.pytorch"
    torch.save(random_weights(BERT_CONFIGS["tiny"], seed=3).state_dict(), checkpoint)
    return checkpoint


def truncated_checkpoint(ws: Workspace) -> Outcome:
    folder = ws.folder("checkpoint")
    checkpoint = tiny_checkpoint(folder)
    truncate(checkpoint)
    done = run(main_command(["--action=generate_engines", *harness_args(BASE, weights=str(checkpoint))]),
               env_for(folder / "build"))
    return outcome(ws, done, one_clean_line(done, str(checkpoint), "make download_model"))


def truncated_engine(ws: Workspace) -> Outcome:
    folder = ws.folder("engine")
    env = env_for(ws.build(folder))
    args = harness_args(BASE, weights=str(tiny_checkpoint(folder)), gpu_batch_size="8",
                        synthetic_sample_count="64", log_dir=str(folder / "logs"))
    engines = run(main_command(["--action=generate_engines", *args]), env)
    if engines.returncode != 0:
        return outcome(ws, engines, ["generate_engines failed"])
    weights = next((folder / "build" / "engines").rglob("weights.safetensors"))
    truncate(weights)
    done = run(main_command(["--action=run_harness", "--test_run", *args]), env)
    return outcome(ws, done, one_clean_line(done, str(weights), "make generate_engines", status=1))


def damaged_data(kind: str) -> Callable[[Workspace], Outcome]:
    """A copy of the preprocessed fixture, damaged one way, given to an accuracy run of the oracle backend
    ("eval") or of the tiny model ("tokens")."""

    def case(ws: Workspace) -> Outcome:
        import numpy as np

        folder = ws.folder(f"data-{kind}")
        data = folder / "squad_tokenized"
        shutil.copytree(ws.squad(), data)
        if kind == "eval":
            damaged = data / "squad_eval.json.gz"
            damaged.write_bytes(gzip.compress(b'{"format": 1, "para')[:-8])
            settings = {"backend": "oracle"}
            fix = "make preprocess_data"
        else:
            damaged = data / "input_ids.npy"
            np.save(damaged, np.full_like(np.load(damaged), 40000))
            settings = dict(BASE)
            fix = "make preprocess_data"
        settings |= {"input_data": str(data), "test_mode": "AccuracyOnly", "gpu_batch_size": "4",
                     "log_dir": str(folder / "logs")}
        done = run(main_command(["--action=run_harness", *harness_args(settings)]), env_for(ws.build(folder)))
        status = 1 if kind == "eval" else 2
        problems = one_clean_line(done, str(damaged), fix, status=done.returncode if done.returncode in (1, 2)
                                  else status)
        return outcome(ws, done, problems)

    return case


def full_disk(ws: Workspace) -> Outcome:
    """A 256 KiB tmpfs filled to 24 KiB free, so LoadGen's logs do not fit; needs root (mount)."""
    folder = ws.folder("full-disk")
    disk = folder / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        return Outcome(None, "not run: cannot mount a tmpfs here; tests/common/test_faults.py injects ENOSPC", True)
    try:
        free = os.statvfs(disk)
        (disk / "ballast").write_bytes(b"\0" * max(0, free.f_bavail * free.f_frsize - (24 << 10)))
        build = ws.build(folder)
        shutil.copytree(ws.squad(), build / "preprocessed_data" / "squad_tokenized")
        done = run(main_command(["--action=run_harness", "--backend=oracle", "--gpu_batch_size=4",
                                 "--min_duration=500", "--min_query_count=1", f"--log_dir={disk / 'logs'}"]),
                   env_for(build))
        problems = one_clean_line(done, "no space left writing", "free space there", status=1)
        if "Result is : VALID" in done.stdout or " VALID" in done.stdout.replace("INVALID", ""):
            problems.append("a VALID result from cut-short logs")
        return outcome(ws, done, problems)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# --- Paths and data sets ---------------------------------------------------------------------------------------

def renamed_input_data(ws: Workspace) -> Outcome:
    folder = ws.folder("renamed-data")
    data = folder / "my_squad_copy"
    shutil.copytree(ws.squad(), data)
    done = run(main_command(["--action=run", *harness_args(
        BASE, input_data=str(data), test_mode="AccuracyOnly", gpu_batch_size="4", log_dir=str(folder / "logs"))]),
        env_for(ws.build(folder)))
    accuracy = [line.strip() for line in done.stdout.splitlines() if "f1 =" in line]
    problems = [] if done.returncode in (0, 3) and "Traceback" not in done.stdout + done.stderr else [
        f"exit {done.returncode}"]
    test_dir = folder / "logs" / "CPU" / "bert-99" / "Offline"
    if not (test_dir / "accuracy.txt").exists():
        problems.append("no accuracy.txt")
    message = accuracy[0] if accuracy else first_error(done)
    return outcome(ws, done, problems, f"{message} (exit 3 is the random tiny model's F1, not the path)")


def synthetic_accuracy_with_real_data(ws: Workspace) -> Outcome:
    folder = ws.folder("synthetic-accuracy")
    build = ws.build(folder)
    shutil.copytree(ws.squad(), build / "preprocessed_data" / "squad_tokenized")
    done = run(main_command(["--action=run_harness", *harness_args(
        BASE, test_mode="AccuracyOnly", gpu_batch_size="4", log_dir=str(folder / "logs"))]), env_for(build))
    problems = one_clean_line(done, "synthetic")
    if any(word in done.stderr.lower() for word in ("missing", "not found", "no such")):
        problems.append("says the data set is missing")
    return outcome(ws, done, problems)


def make(target: str, *variables: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), target, *variables],
                          capture_output=True, text=True, timeout=120, env=env)


def make_clean(ws: Workspace) -> Outcome:
    build = ws.folder("clean") / "build"
    for kept_or_not in ("logs/2026.11.24-10.00.00", "harness", "engines"):
        (build / kept_or_not).mkdir(parents=True)
        (build / kept_or_not / "file").write_text("x")
    done = make("clean", f"BUILD_DIR={build}")
    problems = [] if done.returncode == 0 else [f"exit {done.returncode}"]
    if not (build / "logs" / "2026.11.24-10.00.00" / "file").exists():
        problems.append("build/logs deleted")
    if (build / "harness").exists():
        problems.append("build outputs kept")
    return outcome(ws, done, problems, done.stdout.strip().splitlines()[-1])


def make_help(ws: Workspace) -> Outcome:
    done = make("help")
    lines = [line.strip() for line in done.stdout.splitlines() if "clean" in line or "keep results" in line]
    text = " / ".join(lines)
    told = "keep results: build/logs" in text and "make clean_logs" in text
    problems = [] if told else ["help hides what clean does"]
    return outcome(ws, done, problems, text)


def relative_scratch(ws: Workspace) -> Outcome:
    """``make link_dirs`` with a relative path. IN_CONTAINER=1 and PY skip its venv check, which would install
    into build/venv; the command it runs is the same."""
    build = ws.folder("link-dirs") / "build"
    done = make("link_dirs", "IN_CONTAINER=1", f"PY={sys.executable}",
                env=env_for(build, MLPERF_SCRATCH_PATH="scratch"))
    problems = ([] if done.returncode != 0 else ["make reported success"])
    if "relative path" not in done.stderr:
        problems.append("does not name the relative path")
    if build.exists():
        problems.append("made links")
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    return outcome(ws, done, problems, errors[0] if errors else first_error(done))


GPTJ = {"benchmarks": "gptj", "device": "cpu", "precision": "fp32", "input_data": "synthetic", "weights": "random"}
HAS_CUDA = shutil.which("nvidia-smi") is not None

CASES = [
    Case("Ctrl-C during a test", "`code.main --action=run $BASE $LONG_SERVER`, then SIGINT to its process group",
         "exit 130, one line saying what stopped, no test process left, test marked incomplete",
         "harness/test_supervision.py", interrupted("SIGINT")),
    Case("parent killed (SIGTERM)", "same, then SIGTERM to the parent alone (`timeout`, a scheduler)",
         "exit 143, test process gone, test marked incomplete", "harness/test_supervision.py", interrupted("SIGTERM")),
    Case("parent killed (SIGKILL)", "same, then SIGKILL to the parent alone",
         "test process gone within 5 s (parent-death signal), test marked incomplete", "harness/test_supervision.py",
         interrupted("SIGKILL")),
    refused_case("--scenarios=server --server_target_qps=0", "common/test_validation.py, common/test_fuzz_fields.py",
                 "server_target_qps"),
    refused_case("--scenarios=server --server_target_qps=nan", "common/test_validation.py, common/test_fuzz_fields.py",
                 "server_target_qps"),
    refused_case("--scenarios=server --server_target_qps=-5", "common/test_validation.py, common/test_fuzz_fields.py",
                 "server_target_qps"),
    refused_case("--min_duration=-5", "common/test_validation.py, common/test_fuzz_fields.py"),
    refused_case("--scenarios=singlestream --single_stream_expected_latency_ns=0", "common/test_fuzz_fields.py",
                 "single_stream_expected_latency_ns"),
    refused_case("--offline_expected_qps=0", "common/test_fuzz_fields.py"),
    refused_case("--gpu_batch_size=99999999999999999999", "common/test_fuzz_fields.py"),
    refused_case("--performance_sample_count_override=5", "common/test_validation.py"),
    Case("two runs at once", "two `code.main --action=run_harness $BASE --scenarios=server` with "
         "--server_target_qps=20 and =35 side by side",
         "each records and runs its own settings (exit 0, or 3 when a 3 s Server test misses early stopping)",
         "common/test_concurrent_runs.py", concurrent_pair),
    refused_case("--precision=fp8", "actions/test_honest_labels.py", "precision=fp8"),
    refused_case("--gpu_batch_size=0", "common/test_fuzz_fields.py"),
    *([] if HAS_CUDA else [refused_case("--device=cuda", "actions/test_honest_labels.py", "device=cuda")]),
    refused_case("--seed=-1", "common/test_fuzz_fields.py"),
    refused_case("--num_beams=0", "common/test_fuzz_fields.py", base=GPTJ, shown_base="$GPTJ"),
    Case("truncated checkpoint", "`code.main --action=generate_engines $BASE --weights=$TMP/model.pytorch` "
         "(cut in half)", "exit 2, one line naming the file and the download", "common/test_faults.py",
         truncated_checkpoint),
    Case("truncated engine", "`code.main --action=run_harness $BASE --weights=$TMP/model.pytorch --test_run` "
         "after cutting the engine's "
         "weights.safetensors in half", "one ERROR line naming the file and the rebuild, no traceback, exit 1",
         "common/test_faults.py", truncated_engine),
    Case("corrupt squad_eval.json.gz", "`code.main --action=run_harness --backend=oracle --test_mode=AccuracyOnly "
         "--input_data=$TMP/squad_tokenized` (eval file truncated)",
         "one ERROR line naming the file and the preprocess step, no traceback", "common/test_faults.py",
         damaged_data("eval")),
    Case("token ids out of range", "`code.main --action=run_harness $BASE --test_mode=AccuracyOnly "
         "--input_data=$TMP/squad_tokenized` (input_ids all 40000)",
         "one ERROR line naming the file and the preprocess step, no traceback", "common/test_faults.py",
         damaged_data("tokens")),
    Case("full disk", "`code.main --action=run_harness --backend=oracle --log_dir=<a full 256 KiB tmpfs>`",
         "exit 1, one ERROR line naming the log and 'free space', never VALID",
         "common/test_faults.py (real tmpfs as root, injected ENOSPC otherwise)", full_disk),
    Case("make clean", "`make clean BUILD_DIR=$TMP/build` with a run folder in build/logs",
         "build/logs kept, and said so", "common/test_no_data_loss.py", make_clean),
    Case("make help", "`make help` (its clean lines)", "says what clean keeps and which target deletes logs",
         "common/test_no_data_loss.py", make_help),
    Case("relative MLPERF_SCRATCH_PATH", "`MLPERF_SCRATCH_PATH=scratch make link_dirs`",
         "refused with the absolute path it would mean, no links", "common/test_no_data_loss.py", relative_scratch),
    Case("--input_data=<renamed copy>", "`code.main --action=run $BASE --test_mode=AccuracyOnly "
         "--input_data=$TMP/my_squad_copy`", "runs: the accuracy is scored", "actions/test_end_to_end.py",
         renamed_input_data),
    Case("synthetic accuracy, real data present", "`code.main --action=run_harness $BASE --test_mode=AccuracyOnly` "
         "with build/preprocessed_data/squad_tokenized present",
         "exit 2, one line saying synthetic inputs have no ground truth (not 'data missing')",
         "actions/test_honest_labels.py", synthetic_accuracy_with_real_data),
]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def code_span(text: str) -> str:
    """Text that holds a backtick needs a double-backtick span."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(rows: list[tuple[Case, Outcome]]) -> str:
    lines = ["| case | command | exit | what it prints (first line) | expected | matches | test |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for case, result in rows:
        verdict = "yes" if result.ok else f"**NO**: {result.why}"
        status = "-" if result.status is None else str(result.status)
        lines.append("| " + " | ".join(cell(c) for c in (case.name, case.command, status, code_span(result.message),
                                                          case.expected, verdict, case.test)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if not any(LIB_DIR.glob("*/*.so")):
        print(f"ERROR: no built C++ core in {LIB_DIR}; run `make build` first", file=sys.stderr)
        return 2
    ws = Workspace(Path(tempfile.mkdtemp(prefix="reliability-")))
    rows = []
    try:
        for case in CASES:
            if args.only and args.only not in case.name:
                continue
            start = time.monotonic()
            try:
                result = case.run(ws)
            except (OSError, subprocess.SubprocessError, KeyError, StopIteration, json.JSONDecodeError) as error:
                result = Outcome(None, f"{type(error).__name__}: {error}", False, "the script could not run it")
            print(f"[{time.monotonic() - start:5.1f} s] {case.name}: {'ok' if result.ok else 'NO ' + result.why}",
                  file=sys.stderr, flush=True)
            rows.append((case, result))
    finally:
        if not args.keep:
            shutil.rmtree(ws.root, ignore_errors=True)
    print(f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} ({os.cpu_count()} CPUs, "
          f"{'a GPU' if HAS_CUDA else 'no GPU'}): `{Path(sys.executable).name} -m tests.reliability_cases`\n")
    print(f"`$BASE` = `{' '.join(harness_args(BASE))}`; `$LONG_SERVER` = `{' '.join(harness_args(LONG_SERVER))}`; "
          f"`$GPTJ` = `{' '.join(harness_args(GPTJ))}`; `$TMP` is the script's temporary folder, `$REPO` the "
          "checkout; each command runs with `MLPERF_BUILD_DIR=$TMP/<case>/build`.\n")
    print(table(rows))
    failed = [case.name for case, result in rows if not result.ok]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} cases behave as expected"
          + (f"; not yet: {', '.join(failed)}" if failed else "."))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
