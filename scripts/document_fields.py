"""Rewrite the field table in documentation/configs.md from the field table (code/config/fields.py: the harness's
fields and every backend's switches, taken from the backends' declarations).

Usage: ``python -m scripts.document_fields`` (``--check`` exits 1 when the page is out of date; a test runs that).
"""

from __future__ import annotations

import sys

from code.common.paths import REPO_ROOT
from code.config.fields import FIELDS, Field
from scripts.page_table import PageTable

PAGE = REPO_ROOT / "documentation" / "configs.md"
HEADER = "| field | accepts | default | applies to | description |\n| --- | --- | --- | --- | --- |\n"


def _applies(field: Field) -> str:
    parts = []
    if field.owners:  # a switch: the backends that read it
        parts.append(f"{field.owner_text()} backend{'s' if len(field.owners) > 1 else ''}")
    elif field.benchmarks:
        parts.append(", ".join(b.value for b in field.benchmarks))
    if field.scenarios:
        parts.append(", ".join(s.value for s in field.scenarios))
    where = " ".join(parts) or "all"
    return f"{where} (required)" if field.required else where


def table() -> str:
    rows = []
    for field in FIELDS.values():
        default = "—" if field.default is None else f"`{field.default!r}`"
        rows.append(f"| `{field.name}` | {field.accepted()} | {default} | {_applies(field)} | {field.description} |")
    return HEADER + "\n".join(rows) + "\n"


TABLE = PageTable(PAGE, HEADER, table, "python -m scripts.document_fields")
rewritten = TABLE.rewritten


if __name__ == "__main__":
    sys.exit(TABLE.main(sys.argv[1:]))
