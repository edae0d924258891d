"""``make pack_submission``: the archive of a staged, truncated and checked tree that the submission UI takes.

The archive holds ``closed/<submitter>/`` as the round's ``tools/submission/pack_submission.sh`` packs ``closed/``
(without its encryption, which the round's process asks for separately when it does), beside a ``.sha1`` file in
``sha1sum``'s format, as that script writes it, and a ``.sha256``. Only a tree that the round's checker passed as it is
now is packed; one with staging problems only with ``allow_incomplete``, for pipeline tests.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from code.common.download import file_checksum
from code.submission.checker import CHECK_RECORD, tree_digest, truncated
from code.submission.stage import DIVISION, STAGE_RECORD, SUBMISSION_DIR, WORK_DIR, StageError, check_submitter


@dataclass(frozen=True)
class Packed:
    archive: Path
    sha1: str
    sha256: str
    files: int


def pack(submitter: str, submission_dir: Path = SUBMISSION_DIR, work_dir: Path = WORK_DIR,
         allow_incomplete: bool = False) -> Packed:
    """Write ``<work_dir>/<submitter>/mlperf_submission_<submitter>.tar.gz`` and its checksums, or say the step to
    run."""
    check_submitter(submitter)
    tree = submission_dir / DIVISION / submitter
    work = work_dir / submitter
    staged = _read(work / STAGE_RECORD)
    if staged is None or not tree.is_dir():
        raise StageError(f"nothing staged for SUBMITTER={submitter}: make stage_results SUBMITTER={submitter} first")
    if not truncated(tree):
        raise StageError(f"{tree} is not truncated: make truncate_results SUBMITTER={submitter}, then "
                         "make check_submission")
    checked = _read(work / "check" / CHECK_RECORD)
    if checked is None:
        raise StageError(f"{tree} has not been checked: make check_submission SUBMITTER={submitter}")
    if not checked.get("passed"):
        raise StageError(f"the round's checker found {checked.get('errors')} error(s) in {tree} ("
                         f"{checked.get('verdict')}): fix them (make check_submission SUBMITTER={submitter} lists "
                         "them) and check again")
    if checked.get("tree_sha256") != tree_digest(tree):
        raise StageError(f"{tree} changed after the checker passed it: make check_submission SUBMITTER={submitter} "
                         "again")
    if (problems := staged.get("problems")) and not allow_incomplete:
        listed = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise StageError(f"{tree} was staged with --allow_incomplete and is not a submittable set ({listed}); "
                         "its README lists why. ALLOW_INCOMPLETE=1 packs it anyway (a pipeline test)")
    archive = work / f"mlperf_submission_{submitter}.tar.gz"
    partial = archive.with_name(archive.name + ".partial")
    files = sorted(path for path in tree.rglob("*") if path.is_file())
    with tarfile.open(partial, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(submission_dir).as_posix(), recursive=False)
    partial.replace(archive)
    sha1, sha256 = (file_checksum(archive, name) for name in ("sha1", "sha256"))
    archive.with_suffix("").with_suffix(".sha1").write_text(f"{sha1}  {archive.name}\n")
    archive.with_suffix("").with_suffix(".sha256").write_text(f"{sha256}  {archive.name}\n")
    return Packed(archive, sha1, sha256, len(files))


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

