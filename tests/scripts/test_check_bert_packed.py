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
