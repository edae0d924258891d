"""Fuzz every config field with bad values through the command line: one clean line, exit 2, nothing written.

Values are drawn (fixed seed, so a failure reproduces) from what a user or a script gets wrong: wrong types,
out-of-range and non-finite numbers, huge numbers, empty strings, unknown choices and paths that do not exist.
Most cases run ``code.main.main`` in this process with ``--action=run_harness`` (every check a run makes before it
starts: parsing, ranges, combinations, device, inputs); reaching the point where the run would create its log
folder fails the test. A few cases run the real command in a subprocess.
"""

import os
import random
import subprocess
import sys

import pytest

from code import main as entry
from code.actions import run_harness
from code.common.paths import LIB_DIR, REPO_ROOT
from code.config.fields import FIELDS, Field

SEED = 18
DRAWS = 4  # bad values per field
# What every case starts from: the cheapest run that passes every check (no GPU, no data, no engine).
BASE = {"device": "cpu", "model_name": "tiny", "precision": "fp32", "input_data": "synthetic", "weights": "random"}


def bad_values(field: Field, rng: random.Random) -> list[str]:
    """Values ``field`` must refuse: the empty string (a bare ``--flag`` or ``--flag=`` means true for a bool) and
    a word, then what its type makes wrong."""
    values = ["bogus-" + str(rng.randrange(1000))] if field.type is bool else ["", "bogus-" + str(rng.randrange(1000))]
    if field.type in (int, float):
        low, high = field.range.low, field.range.high
        values += ["nan", "inf", "-inf", "1e400", "0x" + "f" * rng.randrange(1, 40), "[1]", "1,000"]
        below = low - rng.choice([1, 10 ** rng.randrange(1, 20)] + ([] if field.type is int else [0.5]))
        values.append(str(int(below) if field.type is int else below))
        values.append(str(int(high) + 1 + 10 ** rng.randrange(0, 30)))
        if field.range.above_low:
            values.append(str(low if field.type is float else int(low)))
        if field.type is int:
            values += ["1.5", "1e3"]
    elif field.type is bool:
        values += ["2", "-1", "maybe", "truee"]
    elif field.choices is not None:
        values += [rng.choice(field.choices).upper() + "x", " ".join(field.choices)]
    elif field.name in ("weights", "input_data"):
        values.append(f"/nonexistent/{rng.randrange(10**6)}")
    return values[:1] + rng.sample(values, min(DRAWS, len(values)))


def where_it_applies(field: Field) -> list[str]:
    benchmark = field.benchmarks[0].value if field.benchmarks else "bert"
    scenario = field.scenarios[0].value.lower() if field.scenarios else "offline"
    return [f"--benchmarks={benchmark}", f"--scenarios={scenario}"]


def command_line(field: Field, value: str, log_dir) -> list[str]:
    settings = {**BASE, field.name: value}
    if field.benchmarks is None or field.benchmarks[0].value == "bert":
        settings.setdefault("gpu_batch_size", "8")
    return ["--action=run_harness", *where_it_applies(field), *(f"--{k}={v}" for k, v in settings.items()),
            f"--log_dir={log_dir}"]


# log_dir is a path to create, not a value to check; its own test is below.
FUZZED = [f for f in FIELDS.values() if f.name != "log_dir"]
_rng = random.Random(SEED)
CASES = [(f, value) for f in FUZZED for value in dict.fromkeys(bad_values(f, _rng))]


def test_every_field_is_fuzzed():
    assert {f.name for f, _ in CASES} == {f.name for f in FUZZED}


@pytest.mark.parametrize(("field", "value"), CASES, ids=[f"{f.name}={v!r}" for f, v in CASES])
def test_a_bad_value_is_one_line_exit_2_and_nothing_written(field, value, tmp_path, capsys, monkeypatch,
                                                            harness_built):
    def would_start(*args):
        raise AssertionError(f"--{field.name}={value!r} was accepted: the run would start")

    monkeypatch.setattr(run_harness, "new_run_root", would_start)
    status = entry.main(command_line(field, value, tmp_path / "logs"))
    captured = capsys.readouterr()
    assert status == 2, captured.out + captured.err
    assert captured.err.startswith("ERROR: ") and captured.err.count("\n") == 1, captured.err
    assert field.name in captured.err, captured.err  # the line names the field it refuses
    assert "Traceback" not in captured.out + captured.err
    assert not (tmp_path / "logs").exists()


SUBPROCESS_CASES = random.Random(SEED).sample(CASES, 3)


@pytest.mark.parametrize(("field", "value"), SUBPROCESS_CASES, ids=[f"{f.name}={v!r}" for f, v in SUBPROCESS_CASES])
def test_the_real_command_refuses_them_too(field, value, tmp_path, harness_built):
    # A build folder that holds the built core and nothing else: every check a run makes before it writes applies.
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "code.main", *command_line(field, value, tmp_path / "logs")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MLPERF_BUILD_DIR": str(build)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("ERROR: ") and done.stderr.count("\n") == 1, done.stderr
    assert field.name in done.stderr
    assert [entry.name for entry in build.iterdir()] == ["lib"] and not (tmp_path / "logs").exists()


def test_a_log_dir_that_holds_a_file_is_refused(tmp_path, harness_built):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "code.main", *command_line(FIELDS["seed"], "1", taken)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MLPERF_BUILD_DIR": str(build)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("ERROR: ") and done.stderr.count("\n") == 1 and str(taken) in done.stderr
    assert taken.read_text() == "not a folder"
