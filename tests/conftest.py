"""Shared fixtures: the C++ core is built once per test session (a no-op when `make build` ran first); torch on one
thread for the modules of tiny models."""

import os
import tempfile
from pathlib import Path

import pytest

# Tests never read nor write the checkout's tuned values (build/tuned, from make find_performance): a config they
# resolve is the config class's, on any machine. Set before any test imports code.common.paths.
os.environ.setdefault("MLPERF_TUNED_DIR", tempfile.mkdtemp(prefix="mlperf-tuned-"))


@pytest.fixture(scope="session")
def harness_built() -> Path:
    from code.harness.build import build

    return build()


@pytest.fixture(scope="module")
def one_torch_thread():
    """A 64-wide model gains nothing from intra-op threads, and on a busy 2-core machine their spin-waits make it
    ~10x slower. A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
