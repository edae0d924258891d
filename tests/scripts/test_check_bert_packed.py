"""scripts/gpu/check_bert_packed.py's pieces that must work on a machine without a GPU (its steps run on a GPU)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from code.common.paths import REPO_ROOT
from scripts.gpu.check_bert_packed import gpu_reading


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the reading may hold figures")
def test_the_clock_and_power_reading_is_empty_without_a_gpu():
    assert gpu_reading() == {}


def test_help_names_the_sustained_timing():
    result = subprocess.run([sys.executable, "scripts/gpu/check_bert_packed.py", "--help"], cwd=REPO_ROOT,
                            env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                            text=True, timeout=120, check=True)
    assert "--sustain_s" in result.stdout and "sustained run settles at" in " ".join(result.stdout.split())


def test_the_reading_asks_nvidia_smi_for_this_gpu_and_parses_it(monkeypatch):
    import subprocess as sp
    from types import SimpleNamespace

    asked = []

    def fake_run(command, **_kwargs):
        asked.append(command)
        return SimpleNamespace(stdout="1485, 699.52\n")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(uuid="0f1e2d3c-aaaa"))
    monkeypatch.setattr(sp, "run", fake_run)
    assert gpu_reading() == {"sm_mhz": 1485.0, "watts": 699.52}
    assert asked[0][:3] == ["nvidia-smi", "-i", "GPU-0f1e2d3c-aaaa"]
    monkeypatch.setattr(sp, "run", lambda *_a, **_k: SimpleNamespace(stdout="[N/A], [N/A]\n"))
    assert gpu_reading() == {}  # a field the driver cannot report


@pytest.fixture
def interpreted_int8(monkeypatch):
    """The INT8 steps' kernels as this machine runs them: compiled on a GPU, else in Triton's CPU interpreter; the
    check's short table collected apart."""
    from tests.triton_interpreter import interpreted_module

    opened = [interpreted_module(name, kernel) for name, kernel in (
        ("code.numerics.int8", "_quantize_kernel"), ("code.numerics.int8_gemm", "_int8_gemm_kernel"),
        ("code.bert.packed.kernels", "_add_ln_kernel"), ("code.bert.packed.attention", "_varlen_attention_kernel"))]
    for module in opened:
        next(module)
    import scripts.gpu.check_bert_packed as check

    monkeypatch.setattr(check, "ROWS", [])
    yield check
    for module in opened:
        module.close()


def test_the_int8_kernel_step_runs_on_small_shapes(interpreted_int8):
    """The GPU check's int8_kernels step, at a few rows of narrow layers: every kernel against its definition within
    one int8 level (rarely), every row of its table written."""
    check, details = interpreted_int8, {}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    check.check_int8_kernels(details, device=device, rows=37, h=64, f=128, heads=2)
    results = details["int8_kernels"]
    assert not [key for key, r in results.items() if "error" in r], results
    assert len(results) == 9 and all(r["rel"] < 0.05 for r in results.values())
    assert all(r["max_levels"] <= 1 and r["off_share"] < 0.05 for r in results.values() if "off_share" in r)
    assert len(check.ROWS) == 1 + len(results) and "GEMM gelu int8 out [int_mm]" in check.ROWS[-1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="times the real GEMMs on a GPU: the GPU check's own run")
def test_the_int8_gemm_step_tables_every_variant(interpreted_int8, monkeypatch):
    """The int8_gemm step's plumbing on the CPU: each variant run once (cuBLASLt's FP8 calls stubbed), one table row
    each with its milliseconds per shape and the layer's sum."""
    import triton.testing

    import code.bert.packed.cublaslt as cublaslt

    check, details, ran = interpreted_int8, {}, []

    def bench(fn, **_kwargs):
        fn()
        ran.append(fn)
        return 0.5

    monkeypatch.setattr(triton.testing, "do_bench", bench)
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args, **kwargs: None)
    monkeypatch.setattr(cublaslt, "fp8_gelu_gemm", lambda *args: (lambda x: None))
    check.time_int8_gemms(details, m=40, shapes={"qkv": (64, 96), "w1": (64, 128)}, device="cpu")
    timing = details["int8_gemm_ms"]["timing"]
    assert not details["int8_gemm_ms"]["errors"]
    expected = {"fp16 cuBLAS", "fp8 cuBLASLt", "int8 int_mm + dequant kernel", "int8 triton +bias+gelu->int8"}
    assert expected <= set(timing)
    assert any(name.endswith("(engine)") for name in timing) and len(ran) == sum(len(t) for t in timing.values())
    assert len(check.ROWS) == 2 + len(timing) and check.ROWS[2].split()[-2:] == ["1.000", "0"]
