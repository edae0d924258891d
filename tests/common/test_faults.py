"""Faults end cleanly: a damaged file, a full disk or a read-only folder gives one line naming the file and the fix.

Each case of issue 18 once ended in a traceback; here each is made for real (a truncated checkpoint, engine, data
file) or, where the machine cannot make it (a full disk, a read-only folder when tests run as root), injected as
the OSError the operating system raises. One run goes end to end, to see the summary quote the test's error line.
"""

import errno
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from code.bert.backends.pytorch_engine import EngineError, EngineSpec, build_engine, load_engine
from code.bert.dataset import BertFeatures
from code.bert.model import BERT_CONFIGS, random_weights
from code.bert.squad import ARRAY_FILES, EVAL_FILE, MANIFEST_FILE, MAX_SEQ_LENGTH, load_postprocess_data
from code.common.constants import ExitCode
from code.common.faults import DataFileError, describe, reading
from code.common.paths import LIB_DIR, REPO_ROOT
from code.mlperf.run_record import RunRecord
from tests.actions.test_end_to_end import build_dir, run_main  # noqa: F401 - build_dir is a fixture


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("checkpoint") / "model.pytorch"
    torch.save(random_weights(BERT_CONFIGS["tiny"], seed=3).state_dict(), path)
    return path


def test_a_truncated_checkpoint_names_the_file_and_the_download(tmp_path, tiny_checkpoint):
    broken = tmp_path / "model.pytorch"
    broken.write_bytes(tiny_checkpoint.read_bytes())
    truncate(broken)
    with pytest.raises(DataFileError) as caught:
        build_engine(EngineSpec("tiny", "fp32", str(broken)), tmp_path / "engine")
    assert str(caught.value).startswith(f"{broken} is truncated or corrupt (PytorchStreamReader failed")
    assert str(caught.value).endswith('re-download it: make download_model BENCHMARKS="bert"')


def test_a_truncated_engine_names_the_file_and_the_rebuild(tmp_path, tiny_checkpoint):
    spec = EngineSpec("tiny", "fp32", str(tiny_checkpoint))
    engine = build_engine(spec, tmp_path / "engine")
    truncate(engine / "weights.safetensors")
    with pytest.raises(EngineError) as caught:  # its size differs from the manifest's: stale, so a rebuild replaces it
        load_engine(engine, spec, run_args="--model_name=tiny")
    message = str(caught.value)
    assert message.startswith(f"engine {engine}'s weights.safetensors is ") and "(damaged or replaced)" in message
    assert message.endswith('Rebuild it: make generate_engines RUN_ARGS="--model_name=tiny"')


def test_a_truncated_gptj_checkpoint_names_it_and_the_download(tmp_path):
    from code.gptj.backends.pytorch import PytorchGptjBackend, PytorchOptions

    folder = tmp_path / "gptj"
    folder.mkdir()
    hf = {"vocab_size": 50401, "n_positions": 2048, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8}
    (folder / "config.json").write_text(json.dumps(hf))
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(DataFileError, match=f"^{folder} is truncated or corrupt .*make download_model "
                                            'BENCHMARKS="gptj"$'):
        PytorchGptjBackend(PytorchOptions(checkpoint=str(folder), precision="fp32"))


@pytest.mark.parametrize("content", [b"not gzip at all", gzip.compress(b'{"format": 1, "para')[:-8]],
                         ids=["garbage", "truncated"])
def test_a_corrupt_squad_eval_file_names_it_and_the_preprocess_step(tmp_path, content):
    (tmp_path / EVAL_FILE).write_bytes(content)
    with pytest.raises(DataFileError) as caught:
        load_postprocess_data(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / EVAL_FILE} is truncated or corrupt (")
    assert message.endswith("preprocess it again: make preprocess_data BENCHMARKS=bert") and "\n" not in message


def write_features(folder: Path, count: int = 4, token: int = 2000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ids = np.full((count, MAX_SEQ_LENGTH), token, dtype=np.int32)
    for name, array in zip(ARRAY_FILES, (ids, np.zeros_like(ids), np.ones_like(ids)), strict=True):
        np.save(folder / name, array)
    (folder / MANIFEST_FILE).write_text(json.dumps({"num_features": count}))
    return folder


def test_token_ids_outside_the_vocabulary_are_refused_at_load(tmp_path):
    folder = write_features(tmp_path / "squad_tokenized", token=40000)
    with pytest.raises(DataFileError, match=r"input_ids.npy holds values outside \[0, 30522\).*make preprocess_data"):
        BertFeatures.load(folder)


def test_a_truncated_data_array_names_it(tmp_path):
    folder = write_features(tmp_path / "squad_tokenized")
    truncate(folder / ARRAY_FILES[0])
    with pytest.raises(DataFileError, match=f"^{folder / ARRAY_FILES[0]} is truncated or corrupt"):
        BertFeatures.load(folder)


def test_reading_leaves_other_errors_alone(tmp_path):
    with pytest.raises(KeyError), reading(tmp_path, "fix"):
        raise KeyError("a bug, not a file")
    with pytest.raises(RuntimeError, match="size mismatch"), reading(tmp_path, "fix"):
        raise RuntimeError("size mismatch for a weight")


def test_a_full_disk_and_a_read_only_folder_are_one_line(tmp_path):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "metadata.json"))
    assert describe(full) == (f"no space left writing {tmp_path / 'metadata.json'} (No space left on device); free "
                              "space there (make clean_logs deletes old runs; MLPERF_SCRATCH_PATH moves data to a "
                              "bigger disk), then run again")
    unnamed = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a failed write() on an open file names none
    assert describe(unnamed, writing_in=tmp_path).startswith(f"no space left writing {tmp_path} (")
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))
    assert describe(read_only).startswith(f"cannot write {tmp_path} (Read-only file system): the folder is read-only")
    assert describe(ValueError("a bug")) is None and describe(OSError(errno.EIO, "I/O error")) is None


def test_the_test_process_prints_one_line_on_a_full_disk(tmp_path, monkeypatch, capsys):
    from code.processes import run_single_test

    def full_disk(spec, spec_file):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    spec = tmp_path / "test_spec.json"
    spec.write_text(json.dumps({"log_dir": str(tmp_path)}))
    monkeypatch.setattr(run_single_test, "die_with_parent", lambda: None)
    monkeypatch.setattr(run_single_test, "run_single_test", full_disk)
    monkeypatch.setattr(sys, "argv", ["run_single_test", str(spec)])
    assert run_single_test.main() == 1
    err = capsys.readouterr().err
    assert err == f"ERROR: no space left writing {tmp_path} (No space left on device); " + err.split("; ", 1)[1]
    assert err.count("\n") == 1


def test_the_harness_prints_its_summary_when_the_disk_is_full(tmp_path, monkeypatch, capsys):
    from code.processes import test_process

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "summary.txt"))

    monkeypatch.setattr(test_process, "write_summary", full_disk)
    test_process.finish_run("CPU", tmp_path, [])
    out = capsys.readouterr().out
    assert f"[run_harness] the summary not saved: no space left writing {tmp_path / 'summary.txt'}" in out
    assert "Result summaries" in out


def test_the_summary_quotes_the_test_process_error_line(tmp_path, harness_built):
    """End to end: the test process meets a damaged data file; one ERROR line, quoted by the summary, exit 1."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    data = write_features(tmp_path / "squad_tokenized")
    truncate(data / "input_ids.npy")
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run_harness", "--backend=oracle",
                           "--gpu_batch_size=8", f"--input_data={data}", f"--log_dir={tmp_path / 'logs'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    error = f"{data / 'input_ids.npy'} is truncated or corrupt ("
    assert output.count(f"ERROR: {error}") == 1
    assert f"FAILED: {error}" in done.stdout
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary[0]["invalid_reasons"][0].startswith(error)


def test_the_audits_print_their_summary_when_the_disk_is_full(tmp_path, monkeypatch, capsys):
    """run_audit ends as run_harness does: a summary that cannot be saved is still printed, with one line why."""
    from code.actions import run_audit
    from code.mlperf.arguments import parse_run_args
    from code.mlperf.run_logs import TestResult
    from code.processes import test_process

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "summary.txt"))

    passed = TestResult("Offline", "TEST01", str(tmp_path), valid=True, accuracy={"summary": "TEST01: all PASS"})
    monkeypatch.setattr(test_process, "write_summary", full_disk)
    monkeypatch.setattr(run_audit, "plan_audit",
                        lambda config, test, results_dir: run_audit.Audit(config, test, None, tmp_path))
    monkeypatch.setattr(run_audit, "new_timestamped_dir", lambda parent: tmp_path)
    monkeypatch.setattr(run_audit, "_run_one", lambda audit, system, root, overrides: (passed, RunRecord({})))
    status = run_audit.run_audit(parse_run_args(["--action=run_audit", "--audit_test=TEST01", "--system_name=CPU"]))
    out = capsys.readouterr().out
    assert status == 0
    assert f"[run_audit] the summary not saved: no space left writing {tmp_path / 'summary.txt'}" in out
    assert "Result summaries" in out and "TEST01: all PASS" in out


# The label of each kind of mismatch in a loader's CheckpointError, as its message quotes it.
MISMATCH_LABELS = {"wrong shapes": "wrong shape", "wrong dtype": "wrong dtype", "missing weights": "missing"}


def _bert_state(model_name: str = "tiny") -> dict[str, torch.Tensor]:
    return random_weights(BERT_CONFIGS[model_name], seed=3).state_dict()


def _damaged_bert(kind: str) -> dict[str, torch.Tensor]:
    """A BERT-tiny state dict damaged one way: what a user gives when they point --weights at the wrong file."""
    state = _bert_state()
    if kind == "wrong shapes":  # a head for three outputs, not start and end
        state["qa_outputs.weight"] = torch.zeros(3, state["qa_outputs.weight"].shape[1])
    if kind == "wrong dtype":  # integer weights: a quantized export, not the fp32 reference
        state["qa_outputs.weight"] = state["qa_outputs.weight"].to(torch.int8)
    if kind == "missing weights":
        del state["qa_outputs.weight"], state["qa_outputs.bias"]
    return state


@pytest.mark.parametrize("kind", ["wrong shapes", "wrong dtype", "missing weights"])
def test_a_bert_checkpoint_that_does_not_fit_is_one_paragraph(tmp_path, kind):
    path = tmp_path / "model.pytorch"
    torch.save(_damaged_bert(kind), path)
    with pytest.raises(DataFileError) as caught:
        build_engine(EngineSpec("tiny", "fp32", str(path)), tmp_path / "engine")
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path} does not match BERT config") and "\n" not in message
    assert f"{MISMATCH_LABELS[kind]}: " in message.split("BertConfig(", 1)[1], message
    assert message.endswith('re-download it: make download_model BENCHMARKS="bert"')
    assert not (tmp_path / "engine" / "engine.json").exists()


def test_generate_engines_with_a_bad_bert_checkpoint_is_one_line_and_exit_2(tmp_path):
    """What a user sees: ``make generate_engines RUN_ARGS="--weights=..."`` with another model's checkpoint."""
    path = tmp_path / "model.pytorch"
    torch.save(_bert_state("minilm-l6"), path)  # another BERT's checkpoint
    env = {**os.environ, "MLPERF_BUILD_DIR": str(tmp_path / "build")}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=generate_engines", "--benchmarks=bert",
                           "--model_name=tiny", "--device=cpu", "--precision=fp32", f"--weights={path}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"ERROR: checkpoint {path} does not match BERT config")
    assert "; and " in done.stderr  # dozens of mismatches, quoted as three and a count
    assert done.stderr.rstrip().endswith('re-download it: make download_model BENCHMARKS="bert"')


GPTJ_TINY_HF = {"vocab_size": 50401, "n_positions": 2048, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8}


def _gptj_folder(folder: Path, kind: str) -> Path:
    """A GPT-J checkpoint folder (config.json + model.safetensors) damaged one way."""
    from safetensors.torch import save_file

    from code.gptj.model import GptjConfig
    from code.gptj.model import random_weights as gptj_random_weights

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPTJ_TINY_HF))
    state = {name: tensor.contiguous() for name, tensor in
             gptj_random_weights(GptjConfig.from_hf(GPTJ_TINY_HF), seed=1).state_dict().items()}
    name = next(n for n in state if n.endswith("weight") and state[n].dim() == 2)
    if kind == "wrong shapes":
        state[name] = state[name][:, :8].contiguous()
    elif kind == "wrong dtype":
        state[name] = state[name].to(torch.int32)
    elif kind == "missing weights":
        del state[name]
    elif kind == "missing file":
        return folder
    save_file(state, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("backend", ["pytorch", "inflight"])
@pytest.mark.parametrize("kind", ["wrong shapes", "wrong dtype", "missing weights", "missing file"])
def test_a_gptj_checkpoint_that_does_not_fit_is_one_paragraph(tmp_path, kind, backend):
    from code.gptj.backends.inflight import InflightGptjBackend, InflightOptions
    from code.gptj.backends.pytorch import PytorchGptjBackend, PytorchOptions

    folder = _gptj_folder(tmp_path / "gptj", kind)
    make, options = (PytorchGptjBackend, PytorchOptions) if backend == "pytorch" else (InflightGptjBackend,
                                                                                       InflightOptions)
    with pytest.raises(DataFileError) as caught:
        make(options(checkpoint=str(folder), precision="fp32"))
    message = str(caught.value)
    assert str(folder) in message and "\n" not in message, message
    assert message.endswith('make download_model BENCHMARKS="gptj"'), message
    if kind == "missing file":
        assert message.startswith(f"{folder}: no checkpoint (looked for"), message
    else:
        assert message.startswith(f"checkpoint {folder} does not match GPT-J config"), message
        assert message.split("): ", 1)[1].startswith(f"{MISMATCH_LABELS[kind]}: "), message


def test_a_gptj_run_with_a_checkpoint_that_does_not_fit_ends_in_its_error_line(tmp_path, harness_built):
    """End to end: the test process loads the checkpoint, refuses it in one line, and the summary quotes it."""
    folder = _gptj_folder(tmp_path / "gptj", "wrong shapes")
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run_harness", "--benchmarks=gptj",
                           "--device=cpu", "--precision=fp32", "--input_data=synthetic", f"--weights={folder}",
                           "--synthetic_sample_count=4", "--gpu_batch_size=4", "--min_query_count=1",
                           f"--log_dir={tmp_path / 'logs'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    error = f"checkpoint {folder} does not match GPT-J config"
    assert output.count(f"ERROR: {error}") == 1 and f"FAILED: {error}" in done.stdout
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary[0]["verdict"] == "FAILED" and summary[0]["invalid_reasons"][0].startswith(error)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB file system of its own (tmpfs) to fill for real; the test is skipped where one cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root; the full-disk cases above inject the OSError instead")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def _fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` up to ``leave`` bytes, so the run's first small files fit and LoadGen's logs do not."""
    free = os.statvfs(disk)
    (disk / "ballast").write_bytes(b"\0" * max(0, free.f_bavail * free.f_frsize - leave))


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "leave"), [("AccuracyOnly", 128 << 10), ("PerformanceOnly", 24 << 10)])
def test_a_disk_that_fills_under_loadgen_fails_the_test_in_one_line(small_disk, build_dir, mode,  # noqa: F811
                                                                     leave):
    """LoadGen drops what it cannot write without a word: the test must not be read from its cut-short logs.
    One ERROR line naming the log, the test FAILED in the printed summary, exit 1, no traceback, nothing VALID."""
    _fill(small_disk, leave)
    logs = small_disk / "logs"
    done = run_main(build_dir, "--action=run_harness", "--backend=oracle", f"--test_mode={mode}",
                    "--gpu_batch_size=4", "--min_duration=500", "--min_query_count=1", f"--log_dir={logs}")
    output = done.stdout + done.stderr
    assert done.returncode == ExitCode.TEST_FAILED, output
    assert "Traceback" not in output
    test_dir = logs / "CPU" / "bert-99" / "Offline"
    errors = [line for line in output.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: no space left writing {test_dir}/mlperf_log_"), output
    assert "free space there" in errors[0]
    assert "FAILED: no space left writing" in done.stdout and "Exit status 1: a test did not finish." in done.stdout
    assert re.search(r"(?<!IN)VALID|PASS", done.stdout) is None, done.stdout
    metadata = json.loads((test_dir / "metadata.json").read_text())  # whole: the earlier record, if no newer one
    assert metadata["result"]["verdict"] in ("INCOMPLETE", "FAILED")
    for name in ("summary.txt", "summary.json"):  # whole or absent, never an empty file
        assert not (logs / name).exists() or (logs / name).stat().st_size > 0


def test_a_folder_at_a_lock_path_names_it_and_the_fix(tmp_path):
    """A folder where a lock file belongs (a stray mkdir): one line naming the path and saying to remove it."""
    from code.common.benchmark_errors import BenchmarkError
    from code.common.file_lock import hold_for_life, holding

    lock = tmp_path / ".tiny-bf16-random-s0.lock"
    lock.mkdir()
    for take in (lambda: holding(lock).__enter__(), lambda: holding(lock, shared=True).__enter__(),
                 lambda: hold_for_life(lock)):
        with pytest.raises(BenchmarkError) as caught:
            take()
        assert str(caught.value).startswith(f"{lock} is a folder, where the lock file")
        assert f"remove it (rmdir {lock}" in str(caught.value)


def test_a_read_only_build_folder_is_one_line_from_make_build(tmp_path, monkeypatch, capsys):
    """``make build`` (and so ``make run``) on a read-only build/: the build lock names the folder and the fix."""
    from code.common import file_lock
    from code.harness import build as builder

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(builder, "harness_build_dir", lambda round_name: tmp_path / "harness" / round_name)
    monkeypatch.setattr(builder, "_find_compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(file_lock.os, "open", read_only)
    assert builder.main(["--round=v6.1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"code.harness.build: error: cannot write {tmp_path / 'harness' / 'v6.1'} "
                          "(Read-only file system): make build compiles the C++ core there")
    assert err.count("\n") == 1
    assert "MLPERF_BUILD_DIR" in err and "Traceback" not in err


FREED = {"cpu": "the CPU's memory", "cuda:1": "the GPU (nvidia-smi shows what else holds it)"}


@pytest.mark.parametrize("device", ["cpu", "cuda:1"])
def test_a_batch_that_runs_out_of_memory_names_the_batch_size(device, monkeypatch):
    """Bad input x27: --gpu_batch_size=65536 on the CPU asked the allocator for 6.5 GB in one batch; the run stops
    in one line naming --gpu_batch_size and a smaller value, not the allocator's traceback."""
    from code.common.benchmark_errors import BenchmarkError
    from code.mlperf import devices

    class Hungry:
        def run_batch(self, sample_indices):
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 6488064000 bytes. Error code 12 (Cannot allocate memory)")

    class Buggy:
        def run_batch(self, sample_indices):
            raise RuntimeError("size mismatch")

    monkeypatch.setattr(devices, "current_device", lambda device: __import__("contextlib").nullcontext())
    with pytest.raises(BenchmarkError) as caught:
        devices.on_device(Hungry(), device).run_batch(np.arange(22_000))
    assert str(caught.value) == (f"{device} ran out of memory running a batch of 22,000 samples (DefaultCPUAllocator: "
                                 "can't allocate memory: you tried to allocate 6488064000 bytes. Error code 12 (Cannot "
                                 "allocate memory)); lower --gpu_batch_size below 22,000 (try --gpu_batch_size=11000), "
                                 f"or free {FREED[device]}")
    with pytest.raises(RuntimeError, match="^size mismatch$"):  # any other error is a bug: its traceback stays
        devices.on_device(Buggy(), device).run_batch(np.arange(4))


def _no_engine_left(engine: Path) -> bool:
    from code.common.atomic import leftovers

    return not engine.exists() and not leftovers(engine)


def test_a_full_disk_while_an_engine_is_written_names_the_folder_and_leaves_nothing(tmp_path, tiny_checkpoint,
                                                                                      monkeypatch):
    """Bad input y50: safetensors' writer raises its own SafetensorError on a full disk; the build stops in one
    line naming the engines folder, the weights' size and the fix, and no half-written engine is left."""
    import safetensors.torch

    from code.common.faults import NoSpaceError

    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 1000)  # what was written before the disk filled
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    engine = tmp_path / "engines" / "tiny-fp32-model"
    with pytest.raises(NoSpaceError) as caught:
        build_engine(EngineSpec("tiny", "fp32", str(tiny_checkpoint)), engine)
    message = str(caught.value)
    assert message.startswith(f"no space left writing the engine's weights in {engine.parent}; it needs about ")
    assert "MiB there; free space there" in message and message.endswith("(nothing half-written was left)")
    assert _no_engine_left(engine)


def test_a_real_full_disk_while_an_engine_is_written_is_one_line(small_disk, tiny_checkpoint):
    from code.common.faults import NoSpaceError

    engine = small_disk / "engines" / "tiny-fp32-model"
    with pytest.raises(NoSpaceError, match=f"^no space left writing the engine's weights in {engine.parent}; "):
        build_engine(EngineSpec("tiny", "fp32", str(tiny_checkpoint)), engine)
    assert _no_engine_left(engine)


def test_a_corrupt_eval_file_stops_an_accuracy_run_before_loadgen(tmp_path, harness_built):
    """Bad input c06: a damaged squad_eval.json.gz was found only after the accuracy run; it is read before LoadGen
    starts now, so the test ends in its one ERROR line with nothing run."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    data = write_features(tmp_path / "squad_tokenized")
    (data / EVAL_FILE).write_bytes(b"garbage")
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run_harness", "--backend=oracle",
                           "--test_mode=AccuracyOnly", "--gpu_batch_size=8", f"--input_data={data}",
                           f"--log_dir={tmp_path / 'logs'}"], cwd=REPO_ROOT, capture_output=True, text=True, env=env,
                          timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "starting LoadGen" not in output and "LoadGen finished" not in output
    assert output.count(f"ERROR: {data / EVAL_FILE} is truncated or corrupt (") == 1, output
