"""What every benchmark's engine folder shares: the manifest, the error a stale or missing engine raises (naming the
rebuild), and how a folder is built once and shared by runs at once.

An engine folder is complete exactly when its manifest is there. A build writes into a temporary folder beside it
and renames that into place (``build_once``), so an interrupted build leaves the earlier engine, never a half-built
one. A lock file beside the folder (``.<name>.lock``) orders runs that share it: a build holds it exclusively from
its check to its rename, so a second build waits and then reuses the first one's engine; a run loading the engine
holds it shared (``engine_lock``), so no build swaps the folder while its files are read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.benchmark_errors import BenchmarkError
from code.common.faults import writing_folder
from code.common.file_lock import holding

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
    atomic.write_text(Path(engine_dir) / MANIFEST, json.dumps(manifest, indent=2) + "\n")


@contextmanager
def engine_lock(engine_dir: Path, *, shared: bool = False) -> Iterator[None]:
    """Holds ``engine_dir``'s lock file: exclusively for a build, ``shared`` for a run reading the engine. The lock
    goes with the process, so a killed build never leaves it held."""
    with holding(Path(engine_dir).parent / f".{Path(engine_dir).name}.lock", shared=shared):
        yield


def build_once(engine_dir: Path, write: Callable[[Path], None],
               current: Callable[[Path], object] | None = None) -> bool:
    """Builds the engine at ``engine_dir`` with ``write(folder)`` (a whole engine, manifest last, into an empty
    folder) unless ``current(engine_dir)`` accepts the one there (it raises ``EngineError`` for a missing or stale
    one); True when it built."""
    engine_dir = Path(engine_dir)
    with engine_lock(engine_dir):
        if current is not None:
            with suppress(EngineError):  # missing or stale: build it
                current(engine_dir)
                return False
        atomic.recover(engine_dir)  # what a killed build left; no other build runs now
        # Outside the temporary folder: a full disk is named once that folder is removed again.
        with writing_folder(engine_dir.parent, f"the engine {engine_dir.name}"), \
                atomic.replacing_folder(engine_dir) as building:
            write(building)
    return True
