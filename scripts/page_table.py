"""A table of a documentation page that the code generates: found by its header, replaced up to the blank line after
it, and checked by a test, so a page never states what the code no longer does.

Each generating script (``scripts/document_fields.py``, ``document_gpus.py``, ``gptj_memory_table.py``) makes one
``PageTable``; ``python -m scripts.<name>`` rewrites the page and ``--check`` exits 1 when it is out of date.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PageTable:
    page: Path
    header: str  # the table's header and separator rows, each ending in a newline
    table: Callable[[], str]  # the whole table, header included
    command: str  # what rewrites it, for the message of a stale page

    def rewritten(self, text: str) -> str:
        start = text.index(self.header)
        end = text.index("\n\n", start)
        return text[:start] + self.table().rstrip("\n") + text[end:]

    def main(self, argv: list[str]) -> int:
        current = self.page.read_text()
        wanted = self.rewritten(current)
        if "--check" in argv:
            if wanted != current:
                print(f"{self.page} is out of date: run `{self.command}`", file=sys.stderr)
                return 1
            return 0
        self.page.write_text(wanted)
        return 0
