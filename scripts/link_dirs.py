"""``make link_dirs``: point build/data, build/models and build/preprocessed_data into $MLPERF_SCRATCH_PATH.

Data sets and checkpoints are large and often live on a shared disk. With MLPERF_SCRATCH_PATH set, each of the
three folders becomes a link to ``$MLPERF_SCRATCH_PATH/<name>``; without it they are plain local folders. A
local folder that already holds files is never replaced: that would hide data, so it is an error naming the fix.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from code.common.paths import DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR

LINKED = (DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR)


def link_dirs(scratch: str | None) -> list[str]:
    """Create or re-point the three folders; returns a line per folder describing what it now is."""
    report = []
    for local in LINKED:
        local.parent.mkdir(parents=True, exist_ok=True)
        if not scratch:
            if local.is_symlink():
                report.append(f"{local} -> {os.readlink(local)} (kept; MLPERF_SCRATCH_PATH is unset)")
            else:
                local.mkdir(exist_ok=True)
                report.append(f"{local} (local folder)")
            continue
        target = Path(scratch) / local.name
        target.mkdir(parents=True, exist_ok=True)
        if local.is_symlink():
            local.unlink()
        elif local.exists():
            if any(local.iterdir()):
                raise SystemExit(
                    f"ERROR: {local} is a local folder with files; move them to {target} (or unset "
                    "MLPERF_SCRATCH_PATH) and run `make link_dirs` again"
                )
            local.rmdir()
        local.symlink_to(target, target_is_directory=True)
        report.append(f"{local} -> {target}")
    return report


def main() -> int:
    for line in link_dirs(os.environ.get("MLPERF_SCRATCH_PATH")):
        print(f"[link_dirs] {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
