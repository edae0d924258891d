"""Triton kernels on a machine without a GPU: Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Triton reads ``TRITON_INTERPRET`` as each ``@triton.jit`` function is decorated, its own library functions
(``tl.sum``...) included, i.e. before triton is first imported, which any module of the project may cause: so
``tests/conftest.py`` calls ``interpret_without_gpu()`` before any test module is imported. A module of kernel tests
yields from ``interpreted_module`` in its module fixture, which skips when triton is absent (the CPU torch wheel
doesn't pull it) or was imported before the variable was set.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch


def interpret_without_gpu() -> None:
    """Where triton is installed but no GPU is, and triton is not imported yet: let it interpret kernels on the CPU.
    (torch is imported only where triton is installed, so a CPU install without triton pays nothing.)"""
    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def fix_interpreter(mp: pytest.MonkeyPatch) -> None:
    """Triton 3.6's interpreter turns a loaded scalar (a 1-element array) into a loop bound with ``int(array)``: an
    error with the venv's NumPy 2.4 ("only 0-dimensional arrays can be converted"; deprecated since NumPy 1.25).
    Make that conversion take the element."""
    interpreter = importlib.import_module("triton.runtime.interpreter")
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None:
        return

    def patched(tensor, scope):  # noqa: ANN001 - the interpreter's own objects
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    mp.setattr(interpreter, "_patch_lang_tensor", patched)


def interpreted_module(name: str, kernel: str) -> Iterator[ModuleType]:
    """Module ``name`` with its kernels as the device runs them: compiled on a GPU, else interpreted (checked on
    its attribute ``kernel``); skips the tests when that cannot be."""
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        yield importlib.import_module(name)
        return
    from triton.language import standard
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(standard.sum, InterpretedFunction):
        pytest.skip("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: run this file on its own")
    with pytest.MonkeyPatch.context() as mp:
        fix_interpreter(mp)
        module = importlib.import_module(name)
        if not isinstance(getattr(module, kernel), InterpretedFunction):
            module = importlib.reload(module)
        yield module
