"""Where a round's official MLCommons tools live: a submission is judged by its round's unmodified checker.

The tools are never copied into the project; a submitter clones ``mlcommons/inference`` at the round's tag, and
our machines use the shared copy beside the checkout (``MLPERF_INFERENCE_TOOLS`` points elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from code.common.paths import REPO_ROOT

TOOLS_VARIABLE = "MLPERF_INFERENCE_TOOLS"
DEFAULT_TOOLS_ROOT = REPO_ROOT.parent / "shared" / "mlcommons-inference"


class ToolsError(RuntimeError):
    """The round's official tools are missing; the message names the clone command and the variable."""


def tools_root() -> Path:
    """The folder holding one ``<round>/`` clone of mlcommons/inference per round."""
    return Path(os.environ.get(TOOLS_VARIABLE) or DEFAULT_TOOLS_ROOT)


def submission_tools(round_name: str) -> Path:
    """``<root>/<round>/tools/submission``: the round's submission_checker.py and truncate_accuracy_log.py."""
    root = tools_root()
    folder = root / round_name / "tools" / "submission"
    if not (folder / "submission_checker.py").is_file() or not (folder / "truncate_accuracy_log.py").is_file():
        raise ToolsError(
            f"no official submission tools for round {round_name} at {folder}: run "
            f"`git clone --branch {round_name} https://github.com/mlcommons/inference {root / round_name}` "
            f"(or set {TOOLS_VARIABLE} to the folder holding <round>/ clones)")
    return folder
