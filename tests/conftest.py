"""Shared fixtures: the C++ core is built once per test session (a no-op when `make build` ran first); torch on one
thread for the modules of tiny models; the round's official MLCommons tools, whose absence fails a test that needs
them (never a skip: a suite that judged nothing by the official tools must not pass)."""

import os
import tempfile
from pathlib import Path

import pytest

from tests.triton_interpreter import interpret_without_gpu

# Tests never read nor write the checkout's tuned values (build/tuned, from make find_performance): a config they
# resolve is the config class's, on any machine. Set before any test imports code.common.paths.
os.environ.setdefault("MLPERF_TUNED_DIR", tempfile.mkdtemp(prefix="mlperf-tuned-"))
# Without a GPU, Triton kernels run in Triton's CPU interpreter where triton is installed; set before any test module
# imports triton.
interpret_without_gpu()

from code.common.constants import Scenario  # noqa: E402 - after MLPERF_TUNED_DIR, as every import of code.*
from code.common.rounds import default_round  # noqa: E402

# The round of the core that tests which load one directly use: BERT Offline's default round on the CPU system (an
# edge system), the core `make build` builds for `make run`'s default tests.
CORE_ROUND = default_round("bert-99", Scenario.Offline, "edge")
# The rounds the CPU runs of the tests are for by default: each benchmark's default round on the CPU system.
CPU_ROUNDS = tuple(dict.fromkeys(default_round(name, Scenario.Offline, "edge")
                                 for name in ("bert-99", "gptj-99", "llama3.1-8b")))


def pytest_report_header() -> str:
    """Where the official tools are read from, said before the first test runs."""
    from code.common.paths import OFFICIAL_TOOLS_DIR
    from code.common.rounds import ROUNDS

    missing = [name for name, round_ in ROUNDS.items() if not (OFFICIAL_TOOLS_DIR / round_.tools.folder).is_dir()]
    state = f"missing for {', '.join(missing)}: the tests that need them fail" if missing else "every round's present"
    return f"official MLCommons tools: {OFFICIAL_TOOLS_DIR} ({state})"


def official_tools(round_name: str, part: str) -> Path:
    """``<tools>/<clone>/<part>`` (``tools/submission``, ``compliance``, ...) of the round's clone of
    mlcommons/inference (``<round>/``; ``main/`` for v5.1 and v6.1); the calling test fails, naming the clone command
    and MLPERF_INFERENCE_TOOLS, when it is missing."""
    from code.common.paths import OFFICIAL_TOOLS_DIR
    from code.common.rounds import get_round

    official = get_round(round_name).tools
    folder = OFFICIAL_TOOLS_DIR / official.folder / part
    if not folder.is_dir():
        pytest.fail(f"no official MLCommons tools of round {round_name} at {folder}: run "
                    f"`{official.clone_command(OFFICIAL_TOOLS_DIR)}`, or set MLPERF_INFERENCE_TOOLS to the folder "
                    "holding one such clone per round", pytrace=False)
    return folder


@pytest.fixture(scope="session")
def harness_built() -> Path:
    """The cores of ``CPU_ROUNDS``, so that a run that names no round finds its tests' cores built; the path of
    ``CORE_ROUND``'s module."""
    from code.harness.build import build

    built = {round_name: build(round_name) for round_name in CPU_ROUNDS}
    return built[CORE_ROUND]


def _skip_without_source(round_name: str) -> None:
    """Skip, saying why, when the round's LoadGen is built from a source tree (v4.1: a clone of mlcommons/inference
    at the round's tag), none is in place and LOADGEN_SRC names none here."""
    from code.common.rounds import LoadgenSource, get_round
    from code.harness.fetch_loadgen import SOURCE_ENV_VAR, is_fetched

    loadgen = get_round(round_name).loadgen
    if isinstance(loadgen, LoadgenSource) and not is_fetched(get_round(round_name)) and not os.environ.get(
            SOURCE_ENV_VAR):
        pytest.skip(f"round {round_name} builds LoadGen from mlcommons/inference at tag {loadgen.tag}, and "
                    f"{SOURCE_ENV_VAR} names no clone here (git clone --branch {loadgen.tag} "
                    f"https://github.com/mlcommons/inference <folder>; {SOURCE_ENV_VAR}=<folder>)")


def round_sources(round_name: str) -> Path:
    """The round's LoadGen sources in place (a download for a release); skipped as ``_skip_without_source`` says."""
    from code.common.rounds import get_round
    from code.harness.fetch_loadgen import fetch_loadgen

    _skip_without_source(round_name)
    return fetch_loadgen(get_round(round_name))


def round_core(round_name: str) -> Path:
    """The round's core, built (a no-op when it is); skipped as ``_skip_without_source`` says."""
    from code.harness.build import build

    _skip_without_source(round_name)
    return build(round_name)


@pytest.fixture(scope="module")
def one_torch_thread():
    """A 64-wide model gains nothing from intra-op threads, and on a busy 2-core machine their spin-waits make it
    ~10x slower. A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
