"""Which data set and weights a run uses (code/mlperf/inputs.py), where the real ones are there but unusable: a
folder without its manifest, another benchmark's set, a scratch link that leads nowhere. A performance run falls
back to synthetic inputs or random weights and says why, naming the fix; an accuracy run, or a set named with
--input_data, is refused before an engine is built or a test starts, with the same reason.

Every case runs ``python -m code.main`` in a private build folder on sets preprocessed from the test fixtures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.paths import LIB_DIR, REPO_ROOT
from code.gptj.prompt import TOKENIZED_SUBDIR

FIXTURES = REPO_ROOT / "tests" / "fixtures"
SHORT = ["--benchmarks=bert", "--scenarios=offline", "--model_name=tiny", "--device=cpu"]


def _python(build: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MLPERF_BUILD_DIR": str(build)})


@pytest.fixture
def build(tmp_path: Path) -> Path:
    """A private build folder with the real (tiny) SQuAD set in place, and the checkout's built core."""
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    done = _python(folder, "-m", "code.bert.preprocess_data", f"--squad_json={FIXTURES / 'squad_tiny.json'}")
    assert done.returncode == 0, done.stderr
    return folder


def _main(build: Path, *args: str) -> subprocess.CompletedProcess:
    return _python(build, "-m", "code.main", *SHORT, *args)


def _warnings(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("[inputs]")]


def test_a_set_without_its_manifest_is_not_synthetic_without_a_word(build: Path, tmp_path: Path) -> None:
    squad = build / "preprocessed_data" / "squad_tokenized"
    (squad / "manifest.json").rename(tmp_path / "manifest.json")
    why = (f"{squad} holds no manifest.json, which a finished preprocessing writes last (it was stopped, or the file "
           'was moved); run make download_data download_model preprocess_data BENCHMARKS="bert"')
    info = _main(build, "--action=info")
    assert info.returncode == 0, info.stderr
    assert _warnings(info) == [f"[inputs] synthetic inputs, not the SQuAD v1.1 set: {why}"]
    accuracy = _main(build, "--action=run", "--test_mode=AccuracyOnly", f"--log_dir={tmp_path / 'logs'}")
    assert accuracy.returncode == 2, accuracy.stdout + accuracy.stderr
    assert accuracy.stderr == f"ERROR: an accuracy run needs the real SQuAD v1.1 data set: {why}\n"
    assert _warnings(accuracy) == [] and not (tmp_path / "logs").exists()


def test_another_benchmarks_set_is_named_before_an_engine_is_built(build: Path, tmp_path: Path) -> None:
    done = _python(build, "-m", "code.gptj.preprocess_data", f"--eval_json={FIXTURES / 'cnn_tiny.json'}",
                   f"--preprocessed_data_dir={tmp_path / 'gptj'}")
    assert done.returncode == 0, done.stderr
    gptj = tmp_path / "gptj" / TOKENIZED_SUBDIR
    run = _main(build, "--action=run", f"--input_data={gptj}", "--min_duration=1000", "--min_query_count=1",
                f"--log_dir={tmp_path / 'logs'}")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr == (f"ERROR: --input_data={gptj}: {gptj} holds a preprocessed CNN/DailyMail 3.0.0 validation "
                          "set (its manifest.json), not SQuAD v1.1; give a SQuAD v1.1 set (the one make download_data "
                          'download_model preprocess_data BENCHMARKS="bert" writes to '
                          f"{build / 'preprocessed_data' / 'squad_tokenized'}), or leave --input_data out\n")
    assert not (build / "engines").exists() and not (tmp_path / "logs").exists()


def test_a_scratch_link_that_leads_nowhere_is_named(build: Path, tmp_path: Path) -> None:
    """make link_dirs made build/preprocessed_data and build/models links into a scratch folder that has since
    gone (moved, unmounted)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (build / "preprocessed_data").rename(scratch / "preprocessed_data")
    for name in ("preprocessed_data", "models"):
        (build / name).symlink_to(scratch / name, target_is_directory=True)
    scratch.rename(tmp_path / "scratch.away")

    def why(name: str) -> str:
        return (f"{build / name} links to {scratch / name}, which does not exist (the scratch folder was moved, "
                "renamed or is not mounted): mount or restore it, or point the links at another with "
                "MLPERF_SCRATCH_PATH=<folder> make link_dirs")

    info = _main(build, "--action=info")
    assert info.returncode == 0, info.stderr
    assert _warnings(info) == [f"[inputs] synthetic inputs, not the SQuAD v1.1 set: {why('preprocessed_data')}",
                               f"[inputs] random weights, not the MLCommons BERT checkpoint: {why('models')}"]
    accuracy = _main(build, "--action=run", "--test_mode=AccuracyOnly", "--weights=random",
                     f"--log_dir={tmp_path / 'logs'}")
    assert accuracy.returncode == 2, accuracy.stdout + accuracy.stderr
    assert accuracy.stderr == f"ERROR: an accuracy run needs the real SQuAD v1.1 data set: {why('preprocessed_data')}\n"
    (tmp_path / "scratch.away").rename(scratch)  # the data is back; build/models still leads nowhere
    weights = _main(build, "--action=run", "--test_mode=AccuracyOnly", f"--log_dir={tmp_path / 'logs'}")
    assert weights.returncode == 2, weights.stdout + weights.stderr
    assert weights.stderr.startswith("ERROR: an accuracy run needs the MLCommons BERT checkpoint, which is not at "
                                     f"{build / 'models'}/")
    assert weights.stderr.endswith(f"; {why('models')}\n")
    assert not (tmp_path / "logs").exists()
