"""The config classes keep their numbers and cite the measurement journal by id (``# measured: <id>``); the journal
(documentation/notes/journal/) defines each id once and holds the measurements, so a class's comment carries no
figures of a run."""

from __future__ import annotations

import re
from pathlib import Path

from code.common.paths import REPO_ROOT
from code.report.current_figures import journal_ids

CONFIGS = REPO_ROOT / "configs"
# A cited id: a name that ends in the date of the entry that defines it.
CITED = re.compile(r"(?i:measured): ([a-z0-9][a-z0-9.-]*-\d{4}-\d\d-\d\d)\b")
# A run's figure in a comment: a number with a rate or latency unit, or a VALID/INVALID verdict at a rate.
COMMENT = re.compile(r"(?:^\s*|\s\s)#\s?(.*)$")  # a comment line, or a comment after code
RUN_FIGURE = re.compile(r"\d[\d,.]*\s?(?:samples/s|ms\b|s\b|QPS)|\b(?:IN)?VALID at\b")


def config_files() -> list[Path]:
    return sorted(CONFIGS.rglob("*.py"))


def test_every_cited_id_is_defined_in_the_journal():
    ids = journal_ids()
    cited = {(path.relative_to(REPO_ROOT).as_posix(), name) for path in config_files()
             for name in CITED.findall(path.read_text())}
    assert len({name for _, name in cited}) >= 8
    undefined = sorted(f"{path}: {name}" for path, name in cited if name not in ids)
    assert not undefined, "ids no journal entry defines ('Measurement id: `<id>`'):\n" + "\n".join(undefined)


def test_scenario_classes_comment_no_run_figures():
    found = []
    for path in sorted(CONFIGS.glob("*/*/__init__.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            comment = COMMENT.search(line)
            if comment and RUN_FIGURE.search(comment[1]):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {comment[1]}")
    assert not found, "figures of runs belong in the journal, cited by id:\n" + "\n".join(found)
