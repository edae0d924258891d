"""Rewrite the GPT-J slots-by-memory table in documentation/gptj_gpu.md from ``code/gptj/memory_plan.py``.

Usage: ``python -m scripts.gptj_memory_table`` (``--check`` exits 1 when the page is out of date; a test runs that).
The table is the plan's, never typed by hand: a change to the engine's memory rules changes it here.
"""

from __future__ import annotations

import sys

from code.common.paths import REPO_ROOT
from code.gptj.memory_plan import GIB, MAX_SLOTS, gptj_memory_plan
from scripts.page_table import PageTable

PAGE = REPO_ROOT / "documentation" / "gptj_gpu.md"
ENGINES = (("bf16", "auto"), ("fp8", "auto"), ("fp8", "fp8"))
HEADER = ("| GPU memory (GiB) | for example | bf16 | FP8 GEMMs, bf16 KV cache | FP8 GEMMs and KV cache |\n"
          "| --- | --- | --- | --- | --- |\n")
# GiB as the lead's derived configs name them; a GPU reports a little less (an H100 SXM 79.6 GiB, an L4 22.5)
ROWS: tuple[tuple[float, str], ...] = (
    (16, "(16 GB cards)"),
    (24, "A10, L4, RTX 4090"),
    (40, "A100 40GB"),
    (48, "L40S, A40, RTX 6000 Ada"),
    (80, "A100 80GB, H100"),
    (94, "H100 NVL"),
    (96, "GH200 96GB"),
    (141, "H200"),
    (180, "B200"),
)


def _cell(gib: float, precision: str, kv_cache_dtype: str) -> str:
    plan = gptj_memory_plan(int(gib * GIB), precision, kv_cache_dtype)
    if not plan.fits:
        return f"none (8 need {plan.needed_bytes / GIB:.0f} GiB)"
    return f"{plan.slots} (the {MAX_SLOTS} cap)" if plan.limited_by == "cap" else str(plan.slots)


def table() -> str:
    rows = [f"| {gib:g} | {example} | " + " | ".join(_cell(gib, p, kv) for p, kv in ENGINES) + " |"
            for gib, example in ROWS]
    return HEADER + "\n".join(rows) + "\n"


TABLE = PageTable(PAGE, HEADER, table, "python -m scripts.gptj_memory_table")
rewritten = TABLE.rewritten


if __name__ == "__main__":
    sys.exit(TABLE.main(sys.argv[1:]))
