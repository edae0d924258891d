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

from code.common.cli import exits_on
from code.common.faults import NOT_WRITABLE, describe
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
    """Create or re-point the three folders; returns a line per folder describing what it now is. A folder that
    cannot be created or replaced is a ``LinkDirsError`` naming it and the fix; each folder is linked only once
    its target exists, so a refusal leaves every folder a working one (linked or local) and a rerun finishes."""
    root = scratch_root(scratch) if scratch else None
    report = []
    for local in LINKED:
        try:
            report.append(_link_one(local, root))
        except OSError as error:
            raise _cannot_write(error, local, root) from None
    return report


def _cannot_write(error: OSError, local: Path, root: Path | None) -> LinkDirsError | OSError:
    """The one line for a folder link_dirs may not create: in the scratch folder or in build/."""
    where = Path(error.filename) if error.filename else local
    in_scratch = root is not None and (where == root or root in where.parents)
    if error.errno in NOT_WRITABLE:
        if in_scratch:
            return LinkDirsError(
                f"cannot create {where} ({error.strerror}): MLPERF_SCRATCH_PATH={root} is read-only or not yours; "
                f"make it writable (chmod u+w {root}, or ask its owner), or export MLPERF_SCRATCH_PATH=<a writable "
                "folder>, then run `make link_dirs` again"
            )
        return LinkDirsError(
            f"cannot create {where} ({error.strerror}): {local.parent} is read-only or not yours; make it writable "
            "(chmod u+w), then run `make link_dirs` again"
        )
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        return LinkDirsError(f"{where} is a file where link_dirs needs a folder; move it away, then run "
                             "`make link_dirs` again")
    message = describe(error)
    return LinkDirsError(message) if message else error


def _link_one(local: Path, root: Path | None) -> str:
    """Make ``local`` a folder (no scratch root) or a link to ``root/<its name>``; returns what it now is."""
    local.parent.mkdir(parents=True, exist_ok=True)
    if root is None:
        if local.is_symlink():
            return f"{local} -> {os.readlink(local)} (kept; MLPERF_SCRATCH_PATH is unset)"
        local.mkdir(exist_ok=True)
        return f"{local} (local folder)"
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
    return f"{local} -> {target}"


@exits_on(LinkDirsError)
def main() -> int:
    report = link_dirs(os.environ.get("MLPERF_SCRATCH_PATH"))
    for line in report:
        print(f"[link_dirs] {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
