"""The documentation's layout: user guides in documentation/, listed in its index; notes and the measurement journal
in notes/; every relative link and every `documentation/...` path named in the repository points at a file that
exists."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "documentation"
INDEX = DOCS / "README.md"
# The measurement journal: one file per day and an index (README.md) that lists them.
JOURNAL = DOCS / "notes" / "journal"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOC_PATH = re.compile(r"documentation/[A-Za-z0-9_/-]+\.md")
# Paths of files that a staged submission tree holds, not this repository.
STAGED_ONLY = {"documentation/calibration.md"}
# The journal's days are edited only with new measurements; their older entries name notes by the paths they had when
# written.
NOT_SEARCHED = set(JOURNAL.glob("2*.md"))
SEARCHED = ("code", "configs", "scripts", "tests", "make", "docker", "documentation", ".ci")


def user_guides() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")


def test_every_user_guide_and_note_is_listed_in_the_index():
    index = INDEX.read_text()
    for page in user_guides():
        assert f"]({page.name})" in index, f"{page.name} is missing from documentation/README.md"
    for note in sorted((DOCS / "notes").glob("*.md")):
        assert f"](notes/{note.name})" in index, f"notes/{note.name} is missing from documentation/README.md"


@pytest.mark.parametrize("name", ["*_notes.md", "reliability_cases.md"])
def test_development_notes_live_in_the_notes_folder(name: str):
    assert not list(DOCS.glob(name)), f"{name} belongs in documentation/notes/"
    assert list((DOCS / "notes").glob(name))


def test_relative_links_of_the_docs_point_at_files():
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), *(DOCS / "notes").glob("*.md"), *JOURNAL.glob("*.md")]
    broken = [f"{page.relative_to(ROOT)} -> {target}" for page in pages
              for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_documentation_paths_named_in_the_repository_exist():
    files = [ROOT / "README.md", ROOT / "Makefile"]
    for folder in SEARCHED:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".mk", ".sh", "")
                  and p.is_file() and "__pycache__" not in p.parts and p not in NOT_SEARCHED]
    missing = {f"{path.relative_to(ROOT)}: {name}" for path in files
               for name in DOC_PATH.findall(path.read_text(errors="replace"))
               if name not in STAGED_ONLY and not (ROOT / name).exists()}
    assert not missing, "paths of missing documents:\n" + "\n".join(sorted(missing))


def test_user_guides_name_no_issue_numbers():
    pages = [ROOT / "README.md", *user_guides()]
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages
             for m in re.finditer(r"\bissues? #?\d+", page.read_text())]
    assert not found, "user docs name issues:\n" + "\n".join(found)


def test_the_journal_index_lists_every_day_newest_first():
    days = sorted((page.stem for page in JOURNAL.glob("2*.md")), reverse=True)
    listed = re.findall(r"^- \[(\d{4}-\d\d-\d\d)\]\(\1\.md\)", (JOURNAL / "README.md").read_text(), re.MULTILINE)
    assert days and listed == days, f"documentation/notes/journal/README.md lists {listed}, the folder holds {days}"


def test_user_guides_tables_carry_no_run_results():
    """A guide says what an engine is; how fast it ran is the journal's (performance.md's table, generated from run
    records, is the one exception)."""
    result = re.compile(r"\d[\d,.]*\s?(?:samples/s|tokens/s)|\bVALID at \d")
    pages = [ROOT / "README.md", *(page for page in user_guides() if page.name != "performance.md")]
    found = [f"{page.relative_to(ROOT)}: {line[:100]}" for page in pages
             for line in page.read_text().splitlines() if line.startswith("|") and result.search(line)]
    assert not found, "run results in guides' tables (move them to documentation/notes/journal/):\n" + "\n".join(found)
