"""The bf16 in-flight engine's Triton kernels compile for an A100 (sm_80) and an A10 (sm_86, 99 KB of shared memory
per block) within their shared memory (scripts/check_gptj_kernel_targets.py), without a GPU: a launch setting tuned
on an H100 must not break other GPUs. Skipped where triton or its ptxas is absent."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.paths import REPO_ROOT


def _ptxas() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return None
    ptxas = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return ptxas if ptxas.is_file() else None


@pytest.mark.skipif(_ptxas() is None, reason="needs triton with its bundled ptxas")
def test_bf16_engine_kernels_fit_sm80_and_sm86():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # interpreted kernels do not compile
    done = subprocess.run([sys.executable, "-m", "scripts.check_gptj_kernel_targets", "--capabilities=80,86"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("sm_86 ") and line.endswith(": ok") for line in lines) == 8
    assert not any("FP8" in line for line in lines)  # no FP8 kernel is asked of an A100 or A10
