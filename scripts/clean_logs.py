"""``make clean_logs``: delete the run folders in build/logs, except those of runs still going.

A run holds the lock file ``LIVE_RUN_LOCK`` in its folder while it lives (``code/mlperf/run_logs.py``), so a folder
whose lock is held belongs to a live run: deleting it would take the logs from under the run and end it in
tracebacks. Such a folder is kept, and the output names it; the folders of ended or killed runs go.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from code.common.file_lock import is_held
from code.common.paths import LIVE_RUN_LOCK, LOGS_DIR


def clean_logs(logs_dir: Path) -> list[str]:
    """Delete every entry of ``logs_dir`` but the folders of live runs (and ``logs_dir`` itself once empty);
    the lines that say what was deleted and what kept."""
    if not logs_dir.is_dir() or not any(logs_dir.iterdir()):
        shutil.rmtree(logs_dir, ignore_errors=True)
        return [f"[clean_logs] nothing to delete: {logs_dir} holds no run"]
    deleted, kept = 0, []
    for entry in sorted(logs_dir.iterdir()):
        if entry.is_dir() and is_held(entry / LIVE_RUN_LOCK):
            kept.append(entry)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        deleted += 1
    folders = f"{deleted} run folder{'' if deleted == 1 else 's'}"
    if kept:
        return [f"[clean_logs] kept {run} (a run is writing it; make clean_logs again once it has ended)"
                for run in kept] + [f"[clean_logs] deleted {folders} in {logs_dir}"]
    try:
        logs_dir.rmdir()
    except OSError:  # a run started meanwhile: its folder stays
        return [f"[clean_logs] deleted {folders} in {logs_dir}"]
    return [f"[clean_logs] deleted {logs_dir} ({folders})"]


def main(argv: list[str]) -> int:
    logs_dir = Path(argv[0]) if argv else LOGS_DIR
    print("\n".join(clean_logs(logs_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
