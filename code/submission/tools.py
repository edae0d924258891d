"""Where a round's official MLCommons tools live: a submission is judged by its round's unmodified checker.

The tools are never copied into the project; a submitter clones ``mlcommons/inference`` at the round's tag (or,
for a round with no tag yet, at the commit ``rounds.py`` names), and our machines use the shared copy beside the
checkout (``MLPERF_INFERENCE_TOOLS`` points elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from code.common.paths import REPO_ROOT
from code.common.rounds import get_round

TOOLS_VARIABLE = "MLPERF_INFERENCE_TOOLS"
DEFAULT_TOOLS_ROOT = REPO_ROOT.parent / "shared" / "mlcommons-inference"


class ToolsError(RuntimeError):
    """The round's official tools are missing; the message names the clone command and the variable."""


def submission_tools(round_name: str) -> Path:
    """``<root>/<clone>/tools/submission``: the round's submission checker and truncate_accuracy_log.py. The root holds
    one clone of mlcommons/inference per tag (``<round>/``), and ``main/``, whose checker judges v5.1 and v6.1."""
    root = Path(os.environ.get(TOOLS_VARIABLE) or DEFAULT_TOOLS_ROOT)
    official = get_round(round_name).tools
    folder = root / official.folder / "tools" / "submission"
    command = official.checker  # ``python <command>`` from the folder: a script, or a package's module (``-m a.b``)
    checker = folder.joinpath(*command[1].split(".")).with_suffix(".py") if command[0] == "-m" else folder / command[0]
    if not checker.is_file() or not (folder / "truncate_accuracy_log.py").is_file():
        raise ToolsError(
            f"no official submission tools for round {round_name} at {folder}: run "
            f"`{official.clone_command(root)}` (or set {TOOLS_VARIABLE} to the folder holding the rounds' clones)")
    return folder
