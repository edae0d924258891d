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
