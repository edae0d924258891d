"""One lazy registry: a name maps to ``module:attribute``, imported only when that name is asked for.

Benchmarks and backends are both looked up this way. The indirection keeps the arrows one way (the orchestration
names a benchmark, a benchmark names a backend, neither imports the concrete module) and keeps a run cheap: the
oracle backend runs without torch weights, and a BERT run never imports GPT-J.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def pick(kind: str, table: Mapping[K, V], name: K) -> V:
    """``table[name]``, or a ValueError naming the known entries: how every lookup by a user's name fails."""
    if name not in table:
        known = ", ".join(sorted(str(getattr(key, "value", key)) for key in table))
        raise ValueError(f"unknown {kind} {name!r}; known: {known}")
    return table[name]


class LazyRegistry(Mapping[K, str], Generic[K]):
    """``{name: "package.module:Attribute"}`` (a module alone: the module), read-only; listing names imports
    nothing, ``load(name)`` imports one."""

    def __init__(self, kind: str, targets: Mapping[K, str]) -> None:
        self.kind = kind  # "BERT backend", "benchmark": what an error calls an entry
        self._targets = dict(targets)

    def __getitem__(self, name: K) -> str:
        return self._targets[name]

    def __iter__(self) -> Iterator[K]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    def load(self, name: K) -> Any:
        """Import and return what ``name`` is registered as; ValueError naming the known entries if none."""
        module, _, attribute = pick(self.kind, self._targets, name).partition(":")
        loaded = importlib.import_module(module)
        return getattr(loaded, attribute) if attribute else loaded
