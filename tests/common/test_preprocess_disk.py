"""A full disk during ``make preprocess_data``: refused before writing when the disk cannot hold the set, and a
write that fails anyway ends in one line naming the fix, with the earlier set whole and nothing half-written."""

from __future__ import annotations

import errno
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from code.bert import preprocess_data as bert_preprocess
from code.bert import squad
from code.bert.squad import MANIFEST_FILE, TOKENIZED_SUBDIR
from code.common import faults
from code.common.faults import NoSpaceError
from code.gptj import preprocess_data as gptj_preprocess

FIXTURE = Path(__file__).parents[1] / "fixtures" / "squad_tiny.json"
Usage = namedtuple("Usage", "total used free")


def files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def run_bert(out: Path) -> int:
    return bert_preprocess.main(["--squad_json", str(FIXTURE), "--preprocessed_data_dir", str(out)])


@pytest.fixture
def earlier(tmp_path) -> tuple[Path, dict[str, bytes]]:
    """A complete preprocessed SQuAD set, as an earlier make preprocess_data left it."""
    assert run_bert(tmp_path) == 0
    return tmp_path / TOKENIZED_SUBDIR, files(tmp_path / TOKENIZED_SUBDIR)


def test_too_little_space_is_refused_before_anything_is_written(earlier, monkeypatch, capsys):
    folder, before = earlier
    monkeypatch.setattr(faults.shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 2**20, 2**20))
    assert run_bert(folder.parent) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the preprocessed SQuAD set (") and "1.0 MiB is free there" in line
    assert "make clean_logs deletes old runs" in line and "nothing was written" in line
    assert files(folder) == before
    with pytest.raises(NoSpaceError, match="the preprocessed prompts .* needs"):
        gptj_preprocess.save_arrays(folder.parent / "prompts", np.zeros((3, 8)), np.full(3, 8), {"count": 3})
    assert not (folder.parent / "prompts").exists()


def test_a_small_set_refused_for_the_margin_says_its_own_size_and_the_margin(tmp_path, monkeypatch, capsys):
    """A 4 MiB disk and the 0.25 MB test set: the refusal names the set's own size beside the margin, never the sum
    alone as what the data needs."""
    monkeypatch.setattr(faults.shutil, "disk_usage", lambda path: Usage(4 * 2**20, 0, 4 * 2**20))
    assert run_bert(tmp_path) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: the preprocessed SQuAD set (53 features) needs 64.2 MiB free in {tmp_path} (")
    assert " KiB of its own and a 64.0 MiB margin kept free for the file system and other writers), and 4.0 MiB is " \
        "free there;" in line
    assert not (tmp_path / TOKENIZED_SUBDIR).exists()


def test_a_disk_that_fills_while_writing_leaves_the_earlier_set_whole(earlier, monkeypatch, capsys):
    folder, before = earlier
    real_save = np.save

    def save_half_then_fail(file, array):  # noqa: ANN001, ANN202 - np.save's own arguments
        real_save(file, array[: len(array) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(squad.np, "save", save_half_then_fail)
    assert run_bert(folder.parent) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: no space left writing {folder.parent}") and "then run again" in line
    assert files(folder) == before  # the earlier set, whole: a later run reads it, not synthetic inputs
    left = sorted(p.name for p in folder.parent.iterdir() if p.is_dir())
    assert left == [TOKENIZED_SUBDIR]  # no half-written folder (the writers' lock file stays, as locks do)
    assert (folder / MANIFEST_FILE).is_file()


def test_a_first_preprocess_on_a_full_disk_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(gptj_preprocess.np, "save", lambda file, array: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError):
        gptj_preprocess.save_arrays(tmp_path / "prompts", np.zeros((3, 8)), np.full(3, 8), {"count": 3})
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []  # the writers' lock file alone stays
