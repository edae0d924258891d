"""Shared fixtures: the C++ core is built once per test session (a no-op when `make build` ran first); torch on one
thread for the modules of tiny models."""

from pathlib import Path

import pytest


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
