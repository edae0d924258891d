"""What every benchmark's engine folder shares: the manifest file, the error a stale or missing engine raises, and
how that error tells the user to rebuild.

An engine folder is complete exactly when its manifest is there: a build removes the manifest first and writes it
last, atomically, so an interrupted build leaves "missing", never a half-built engine that looks current.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.benchmark_errors import BenchmarkError

MANIFEST = "engine.json"


class EngineError(BenchmarkError):
    """The engine a run needs is missing or does not match the run; the message says how to rebuild it."""


def rebuild_hint(run_args: str | None = None) -> str:
    args = run_args if run_args is not None else "<the RUN_ARGS of this run>"
    return f'Rebuild it: make generate_engines RUN_ARGS="{args}"'


def read_manifest(engine_dir: Path, benchmark: str, run_args: str | None = None) -> dict[str, Any]:
    """The manifest of ``engine_dir`` as a dict; ``EngineError`` naming the rebuild when missing or unreadable."""
    path = Path(engine_dir) / MANIFEST
    if not path.is_file():
        raise EngineError(f"no {benchmark} engine at {engine_dir} ({MANIFEST} missing). {rebuild_hint(run_args)}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise EngineError(f"unreadable engine manifest {path}: {e}. {rebuild_hint(run_args)}") from e
    if not isinstance(manifest, dict):
        raise EngineError(f"engine manifest {path} is not a JSON object. {rebuild_hint(run_args)}")
    return manifest


def write_manifest(engine_dir: Path, manifest: dict[str, Any]) -> None:
    """The last step of a build: the manifest, written atomically."""
    atomic.write_text(Path(engine_dir) / MANIFEST, json.dumps(manifest, indent=2) + "\n")
