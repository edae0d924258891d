"""Where everything generated lives: one place, so no module invents its own folder under build/."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("MLPERF_BUILD_DIR", REPO_ROOT / "build"))

DATA_DIR = BUILD_DIR / "data"
MODELS_DIR = BUILD_DIR / "models"
PREPROCESSED_DATA_DIR = BUILD_DIR / "preprocessed_data"
ENGINES_DIR = BUILD_DIR / "engines"
LOGS_DIR = BUILD_DIR / "logs"
# In a run's log folder: the lock its run holds while it lives, so `make clean_logs` keeps the folder of a live run.
LIVE_RUN_LOCK = ".run.lock"
COMPLIANCE_LOGS_DIR = BUILD_DIR / "compliance_logs"
HARNESS_BUILD_DIR = BUILD_DIR / "harness"
# Downloaded sources a build needs (LoadGen's sdist): beside the build outputs, not among them, so that `make clean`
# keeps them and a machine without network builds again; `make clean_all` deletes them.
DOWNLOADS_DIR = BUILD_DIR / "downloads"
LIB_DIR = BUILD_DIR / "lib"
# What `make find_performance` measured, one file per system, benchmark and scenario (code/config/tuned.py).
TUNED_DIR = Path(os.environ.get("MLPERF_TUNED_DIR", BUILD_DIR / "tuned"))


def harness_build_dir(round_name: str) -> Path:
    """Where one round's LoadGen sources and CMake build live: rounds build side by side, never over each other."""
    return HARNESS_BUILD_DIR / round_name


def harness_lib_dir(round_name: str) -> Path:
    """Where one round's compiled core (``_mlperf_harness``) lands."""
    return LIB_DIR / round_name


# The official MLCommons tools (submission checker, compliance audits), one folder per round holding that round's
# clone of mlcommons/inference (or its tools/ and compliance/ folders). Beside the checkout on our machines and CI.
OFFICIAL_TOOLS_DIR = Path(os.environ.get("MLPERF_INFERENCE_TOOLS", REPO_ROOT.parent / "shared" / "mlcommons-inference"))
