"""A folder replaced whole (code/common/atomic.py): what a killed writer leaves is recovered by the next writer."""

import os

import pytest

from code.common import atomic


def left_by_a_killed_writer(path, kind: str, content: str):
    """The folder a writer killed mid-way leaves beside ``path`` (its names as ``replacing_folder`` makes them)."""
    leftover = path.with_name(f".{path.name}.4242.deadbeef.{kind}")
    leftover.mkdir()
    (leftover / "data").write_text(content)
    return leftover


def test_a_kill_between_the_two_renames_leaves_the_earlier_folder_to_put_back(tmp_path):
    path = tmp_path / "squad_tokenized"
    left_by_a_killed_writer(path, atomic.FOLDER_REPLACED, "earlier set")
    left_by_a_killed_writer(path, atomic.FOLDER_TEMPORARY, "half a set")
    atomic.recover(path)
    assert (path / "data").read_text() == "earlier set"
    assert atomic.leftovers(path) == []


def test_the_next_writer_removes_a_killed_writers_temporary_and_keeps_the_set(tmp_path):
    path = tmp_path / "squad_tokenized"
    path.mkdir()
    (path / "data").write_text("earlier set")
    left_by_a_killed_writer(path, atomic.FOLDER_TEMPORARY, "half a set")
    with atomic.replacing_folder_alone(path) as folder:
        (folder / "data").write_text("new set")
    assert (path / "data").read_text() == "new set"
    assert sorted(entry.name for entry in tmp_path.iterdir()) == [".squad_tokenized.lock", "squad_tokenized"]


def test_a_failed_write_leaves_the_earlier_folder_whole(tmp_path):
    path = tmp_path / "set"
    path.mkdir()
    (path / "data").write_text("earlier set")
    with pytest.raises(OSError), atomic.replacing_folder_alone(path) as folder:
        (folder / "data").write_text("part")
        raise OSError(28, os.strerror(28))
    assert (path / "data").read_text() == "earlier set" and atomic.leftovers(path) == []
