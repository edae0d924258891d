"""Shared fixtures: the C++ core is built once per test session (a no-op when `make build` ran first)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def harness_built() -> Path:
    from code.harness.build import build

    return build()
