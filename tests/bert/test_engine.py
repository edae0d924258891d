"""Engines round-trip, refuse to load when stale, and feed the pytorch backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from code.bert.backends import BACKENDS, DECLARATIONS, create_backend
from code.bert.backends.pytorch import PytorchOptions
from code.bert.backends.pytorch_engine import (
    FORMAT_VERSION,
    MANIFEST,
    WEIGHTS,
    EngineError,
    EngineSpec,
    build_engine,
    check_engine,
    engine_key,
    load_engine,
)
from code.bert.model import BERT_CONFIGS, load_checkpoint, random_weights
from code.common.paths import REPO_ROOT

TINY = BERT_CONFIGS["tiny"]


def inputs(lengths: list[int], seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, TINY.vocab_size, (len(lengths), seq_len), dtype=np.int32)
    seg = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        seg[row, n // 2:n] = 1
        mask[row, :n] = 1
    return ids, seg, mask


def torch_inputs(lengths: list[int], seq_len: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(a) for a in inputs(lengths, seq_len))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A tiny HF-format checkpoint, as the MLCommons model.pytorch is: torch.save of a QA model's state dict."""
    torch.manual_seed(0)
    hf = transformers.BertForQuestionAnswering(transformers.BertConfig(
        vocab_size=TINY.vocab_size, hidden_size=TINY.hidden_size, num_hidden_layers=TINY.num_layers,
        num_attention_heads=TINY.num_heads, intermediate_size=TINY.intermediate_size))
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    path = tmp_path_factory.mktemp("ckpt") / "model.pytorch"
    torch.save(hf.state_dict(), path)
    return str(path)


@torch.no_grad()
def test_random_round_trip(tmp_path):
    spec = EngineSpec("tiny", "fp32", "random", seed=7)
    assert build_engine(spec, tmp_path / "e") == tmp_path / "e"
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == [MANIFEST]  # weights re-drawn from the seed
    manifest = json.loads((tmp_path / "e" / MANIFEST).read_text())
    assert manifest["format_version"] == FORMAT_VERSION and manifest["torch_version"] == torch.__version__
    assert manifest["engine_key"] == engine_key(spec) == "tiny-fp32-random-s7"
    model = load_engine(tmp_path / "e", spec, "cpu")
    assert not model.training
    x = torch_inputs([12, 5], 12)
    torch.testing.assert_close(model(*x), random_weights(TINY, 7)(*x), atol=0, rtol=0)


@torch.no_grad()
def test_checkpoint_round_trip(tmp_path, checkpoint):
    spec = EngineSpec("tiny", "fp32", checkpoint)
    build_engine(spec, tmp_path / "e")
    assert (tmp_path / "e" / WEIGHTS).is_file()
    x = torch_inputs([16, 9, 2], 16)
    expected = load_checkpoint(checkpoint, TINY)(*x)
    torch.testing.assert_close(load_engine(tmp_path / "e", spec, "cpu")(*x), expected, atol=0, rtol=0)
    assert engine_key(spec).startswith("tiny-fp32-model-")


@torch.no_grad()
def test_bf16_engine(tmp_path, checkpoint):
    spec = EngineSpec("tiny", "bf16", checkpoint)
    build_engine(spec, tmp_path / "e")
    model = load_engine(tmp_path / "e", spec, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    x = torch_inputs([10, 4], 10)
    got = model(*x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), load_checkpoint(checkpoint, TINY)(*x), atol=0.1, rtol=0.05)


def test_mismatched_spec_lists_fields(tmp_path):
    build_engine(EngineSpec("tiny", "fp32", "random", seed=0), tmp_path / "e")
    with pytest.raises(EngineError, match=r"(?s)precision: engine has 'fp32', run expects 'bf16'.*seed.*"
                                          r"make generate_engines"):
        load_engine(tmp_path / "e", EngineSpec("tiny", "bf16", "random", seed=1), "cpu")


def test_old_format_is_refused(tmp_path):
    spec = EngineSpec("tiny")
    build_engine(spec, tmp_path / "e")
    manifest_path = tmp_path / "e" / MANIFEST
    manifest = json.loads(manifest_path.read_text()) | {"format_version": FORMAT_VERSION - 1}
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(EngineError, match="format version"):
        load_engine(tmp_path / "e", spec, "cpu")


def test_changed_checkpoint_is_refused(tmp_path, checkpoint):
    ckpt = tmp_path / "model.pytorch"
    ckpt.write_bytes(open(checkpoint, "rb").read())
    spec = EngineSpec("tiny", "fp32", str(ckpt))
    build_engine(spec, tmp_path / "e")
    st = ckpt.stat()
    os.utime(ckpt, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same bytes: still current
    load_engine(tmp_path / "e", spec, "cpu")
    sd = torch.load(ckpt, weights_only=True)
    sd["qa_outputs.bias"] += 1.0
    torch.save(sd, ckpt)
    with pytest.raises(EngineError, match=r"changed since engine .* was built.*make generate_engines"):
        load_engine(tmp_path / "e", spec, "cpu")


def test_missing_engine_names_make_target(tmp_path):
    with pytest.raises(EngineError, match=r'make generate_engines RUN_ARGS="--benchmarks=bert"'):
        load_engine(tmp_path / "nothing", EngineSpec("tiny"), "cpu", run_args="--benchmarks=bert")
    with pytest.raises(EngineError, match="make generate_engines"):
        load_engine(tmp_path / "nothing", EngineSpec("tiny"), "cpu")


def test_spec_validation():
    with pytest.raises(ValueError, match="large.*minilm-l6.*tiny"):
        EngineSpec("base")
    with pytest.raises(ValueError, match="fp32, fp16, bf16"):
        EngineSpec("tiny", "int4")


@torch.no_grad()
def test_pytorch_backend_run_batch(tmp_path, checkpoint):
    spec = EngineSpec("tiny", "fp32", checkpoint)
    build_engine(spec, tmp_path / "e")
    backend = create_backend("pytorch", PytorchOptions(device="cpu", engine_dir=tmp_path / "e", engine_spec=spec))
    ids, seg, mask = inputs([24, 13, 24], 24)
    out = backend.run_batch(np.arange(3, dtype=np.int64), ids, seg, mask)
    assert out.dtype == np.float32 and out.shape == (3, 24, 2)
    expected = load_checkpoint(checkpoint, TINY)(*(torch.from_numpy(a) for a in (ids, seg, mask))).numpy()
    np.testing.assert_array_equal(out, expected)


def test_pytorch_backend_bf16_returns_float32(tmp_path):
    spec = EngineSpec("tiny", "bf16")
    build_engine(spec, tmp_path / "e")
    backend = create_backend("pytorch", PytorchOptions(engine_dir=tmp_path / "e", engine_spec=spec))
    out = backend.run_batch(np.arange(2), *inputs([8, 3], 8))
    assert out.dtype == np.float32 and out.shape == (2, 8, 2) and np.isfinite(out).all()


def test_unknown_backend_lists_names():
    assert set(BACKENDS) >= {"pytorch", "oracle"}
    with pytest.raises(ValueError, match="oracle, pytorch"):
        create_backend("tensorrt", None)


def test_pytorch_declaration_names_the_engine_precisions():
    """The configuration accepts the precisions the declaration lists; the engine must know each of them."""
    from code.bert.backends.pytorch_engine import PRECISIONS

    (pytorch,) = [declared for declared in DECLARATIONS if declared.name == "pytorch"]
    assert set(pytorch.precisions) == set(PRECISIONS)


# A build that is killed while it writes the weights: save_file writes half a file, says so, and waits to be killed.
KILLED_BUILD = """
import sys, time
from pathlib import Path
import safetensors.torch
from code.bert.backends.pytorch_engine import EngineSpec, build_engine

real_save_file = safetensors.torch.save_file

def save_half_then_hang(tensors, filename, metadata=None):
    real_save_file(tensors, filename, metadata=metadata)
    data = Path(filename).read_bytes()
    Path(filename).write_bytes(data[: len(data) // 2])
    print("half written", flush=True)
    time.sleep(600)

safetensors.torch.save_file = save_half_then_hang
build_engine(EngineSpec("tiny", "fp32", sys.argv[1]), Path(sys.argv[2]))
"""


def test_a_killed_rebuild_leaves_the_earlier_engine_whole(tmp_path, checkpoint):
    """``make generate_engines`` killed mid-write: the engine's files are whole or absent, never half written;
    the earlier engine stays in place and loads, and the next build removes the half-built folder and succeeds."""
    import signal

    spec = EngineSpec("tiny", "fp32", checkpoint)
    engine = build_engine(spec, tmp_path / "e")  # an earlier, complete engine that the rebuild replaces
    earlier = (engine / WEIGHTS).read_bytes()
    build = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, checkpoint, str(engine)], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert build.stdout is not None and build.stdout.readline() == "half written\n"
    finally:
        build.send_signal(signal.SIGKILL)
        build.wait()
    assert sorted(p.name for p in engine.iterdir()) == [MANIFEST, WEIGHTS]
    assert (engine / WEIGHTS).read_bytes() == earlier
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the half, in a folder beside it
    load_engine(engine, spec)
    build_engine(spec, engine)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".e.lock", "e"]
    load_engine(engine, spec)


def test_an_interrupted_manifest_write_leaves_no_engine(tmp_path, monkeypatch):
    """Ctrl-C while the manifest is written: no engine folder (whole or none) and no temporary one."""
    from code.common import atomic

    spec = EngineSpec("tiny", "fp32", "random")

    def interrupted(self, text, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_engine(spec, tmp_path / "e")
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == [".e.lock"]


def test_pytorch_option_defaults_are_the_fields():
    """A switch has one default, its field's: the options' own defaults (for tests and tools) must agree."""
    import dataclasses

    from code.bert.backends.pytorch import PackedKernels
    from code.config.fields import FIELDS

    options = [*dataclasses.fields(PytorchOptions), *dataclasses.fields(PackedKernels)]
    # device: the context's, made concrete; precision: a packed spec's, and the packed path runs no fp32
    shared = [option for option in options if option.name in FIELDS and option.name not in ("device", "precision")]
    assert {option.name for option in shared} >= {"fast_path", "cuda_graphs", "fp8_gemms", "gelu_in_gemm"}
    for option in shared:
        assert option.default == FIELDS[option.name].default, option.name


# Rebuilds the tiny engine, builds it unless current ("ensure") or loads it, ROUNDS times (0: until a file "stop"
# appears beside the engine); prints one line per round ("built", "reused", "loaded" or the error) and exits 1 on the
# first error.
ENGINE_WORKER = """
import itertools
import sys
import time
from pathlib import Path
from code.bert.backends.pytorch_engine import EngineSpec, build_engine, ensure_engine, load_engine
from code.mlperf.engine_manifest import EngineError

role, engine, rounds, checkpoint = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = EngineSpec("tiny", "fp32", checkpoint)
for _ in range(rounds) if rounds else itertools.count():
    if (engine.parent / "stop").exists():
        break
    try:
        if role == "build":
            build_engine(spec, engine)
            print("built", flush=True)
            time.sleep(0.05)  # flock is not fair: a pause lets a waiting loader in on a busy machine
        elif role == "ensure":
            print("built" if ensure_engine(spec, engine) else "reused", flush=True)
        else:
            load_engine(engine, spec)
            print("loaded", flush=True)
    except EngineError as error:
        print(f"error: {error}", flush=True)
        sys.exit(1)
"""


def start_engine_worker(role: str, engine: Path, rounds: int, checkpoint: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ENGINE_WORKER, role, str(engine), str(rounds), checkpoint],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_rebuild_never_takes_the_engine_from_a_run_that_loads_it(tmp_path, checkpoint):
    """A loader beside a builder that rebuilds the same engine again and again always finds a whole engine."""
    engine = tmp_path / "engines" / "tiny-fp32-model"
    assert start_engine_worker("build", engine, 1, checkpoint).wait(timeout=120) == 0
    builder = start_engine_worker("build", engine, 0, checkpoint)
    assert builder.stdout is not None and builder.stdout.readline() == "built\n"  # rebuilding from now on
    loaded = start_engine_worker("load", engine, 40, checkpoint).communicate(timeout=300)[0]
    (engine.parent / "stop").touch()
    built = builder.communicate(timeout=300)[0]
    assert loaded.split() == ["loaded"] * 40, loaded
    assert builder.returncode == 0 and set(built.split()) == {"built"}, built
    (engine.parent / "stop").unlink()
    assert sorted(p.name for p in engine.iterdir()) == [MANIFEST, WEIGHTS]  # no temporary left inside
    assert [p.name for p in engine.parent.iterdir() if p.name != engine.name] == [f".{engine.name}.lock"]


def test_a_truncated_weights_file_makes_the_engine_stale(tmp_path, checkpoint):
    """The documented fix for a damaged engine (make generate_engines) rebuilds it instead of reusing it."""
    from code.bert.backends.pytorch_engine import ensure_engine

    spec, engine = EngineSpec("tiny", "fp32", checkpoint), tmp_path / "e"
    assert ensure_engine(spec, engine) is True
    weights = engine / WEIGHTS
    whole = weights.stat().st_size
    with open(weights, "r+b") as file:
        file.truncate(whole // 2)
    with pytest.raises(EngineError, match="bytes, not the"):
        check_engine(engine, spec)
    assert ensure_engine(spec, engine) is True and weights.stat().st_size == whole
    assert ensure_engine(spec, engine) is False
    load_engine(engine, spec, "cpu")


def test_two_builds_of_one_engine_build_it_once(tmp_path, checkpoint):
    """Two ``make run``s starting together: one builds, the other waits for it and reuses the engine."""
    engine = tmp_path / "engines" / "tiny-fp32-model"
    first, second = (start_engine_worker("ensure", engine, 1, checkpoint) for _ in range(2))
    outputs = sorted(run.communicate(timeout=120)[0].strip() for run in (first, second))
    assert (first.returncode, second.returncode) == (0, 0), outputs
    assert outputs == ["built", "reused"]
    assert start_engine_worker("ensure", engine, 1, checkpoint).communicate(timeout=120)[0].strip() == "reused"


def test_an_engine_in_a_folder_the_run_cannot_write_still_loads(tmp_path, monkeypatch):
    """A shared engines folder, read-only to the run: loading takes the owner's lock read-only, or runs without
    one where the owner's build left none; a build there still fails loudly."""
    import errno

    from code.common import file_lock

    spec = EngineSpec("tiny", "fp32", "random")
    engine = build_engine(spec, tmp_path / "engines" / "e")
    real_open, opened = os.open, []

    def read_only(path, flags, *args):  # noqa: ANN001, ANN202 - os.open's own arguments
        if flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        opened.append(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(file_lock.os, "open", read_only)
    load_engine(engine, spec)
    assert opened == [tmp_path / "engines" / ".e.lock"]  # the owner's lock, taken read-only
    (tmp_path / "engines" / ".e.lock").unlink()
    load_engine(engine, spec)  # no lock file and none can be made: loads without
    with pytest.raises(PermissionError):
        build_engine(spec, engine)
