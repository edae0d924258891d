"""``make link_dirs``: point build/data, build/models and build/preprocessed_data into $MLPERF_SCRATCH_PATH.

Data sets and checkpoints are large and often live on a shared disk. With MLPERF_SCRATCH_PATH set, each of the
three folders becomes a link to ``$MLPERF_SCRATCH_PATH/<name>``; without it they are plain local folders. A
local folder that already holds files is never replaced: that would hide data, so it is an error naming the fix.
MLPERF_SCRATCH_PATH must be absolute (``~`` is expanded): a relative link would dangle, and which folder a relative
path means depends on where make was started (``make -C``), so it is refused with the absolute path it would be
from here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from code.common.paths import DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR

LINKED = (DATA_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR)


class LinkDirsError(ValueError):
    """A setting or a folder that link_dirs will not act on; the message names the fix."""


def scratch_root(value: str) -> Path:
    """MLPERF_SCRATCH_PATH as an absolute path, or an error for a relative one."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise LinkDirsError(
            f"MLPERF_SCRATCH_PATH={value} is a relative path; links need an absolute one. If you meant it from "
            f"{Path.cwd()}: export MLPERF_SCRATCH_PATH={Path.cwd() / path}"
        )
    return path


def link_dirs(scratch: str | None) -> list[str]:
    """Create or re-point the three folders; returns a line per folder describing what it now is."""
    root = scratch_root(scratch) if scratch else None
    report = []
    for local in LINKED:
        local.parent.mkdir(parents=True, exist_ok=True)
        if root is None:
            if local.is_symlink():
                report.append(f"{local} -> {os.readlink(local)} (kept; MLPERF_SCRATCH_PATH is unset)")
            else:
                local.mkdir(exist_ok=True)
                report.append(f"{local} (local folder)")
            continue
        target = root / local.name
        target.mkdir(parents=True, exist_ok=True)
        if local.is_symlink():
            local.unlink()
        elif local.exists():
            if any(local.iterdir()):
                raise LinkDirsError(
                    f"{local} is a local folder with files; move them to {target} (or unset MLPERF_SCRATCH_PATH) "
                    "and run `make link_dirs` again"
                )
            local.rmdir()
        local.symlink_to(target, target_is_directory=True)
        report.append(f"{local} -> {target}")
    return report


def main() -> int:
    try:
        report = link_dirs(os.environ.get("MLPERF_SCRATCH_PATH"))
    except LinkDirsError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    for line in report:
        print(f"[link_dirs] {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
