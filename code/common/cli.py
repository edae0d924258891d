"""How a command of this repository ends on an expected error (a bad input, a missing piece): one ``ERROR:`` line on
stderr, whose message names the fix, and exit status 2 (``ExitCode.BAD_INPUT``), not a traceback. A traceback
stays for what no one expected: it is what a bug report needs.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec

from code.common.constants import ExitCode

P = ParamSpec("P")


def exits_on(*errors: type[Exception]) -> Callable[[Callable[P, int]], Callable[P, int]]:
    """A command's ``main`` that ends on any of ``errors`` with its message as one ``ERROR:`` line and status 2."""

    def wrap(main: Callable[P, int]) -> Callable[P, int]:
        @functools.wraps(main)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except errors as error:
                print(f"ERROR: {error}", file=sys.stderr)
                return ExitCode.BAD_INPUT

        return guarded

    return wrap
