"""What one configuration field is: its name, type, default, description, the values it takes and where it applies.

The harness's own fields are listed in ``code/config/fields.py``; a backend declares its own switches as ``Field``
values beside its declaration (``code/<bench>/backends/__init__.py``), and the field table is assembled from both.
This module imports nothing of either, so a backend's declaration can describe its switches without importing the
table it joins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from code.common.constants import Benchmark, Scenario

# (benchmark, backend name): a backend that declares a switch
Owner = tuple[Benchmark, str]


class FieldError(ValueError):
    """A field name or value that is not valid; the message says which and what is allowed."""


@dataclass(frozen=True)
class Range:
    """The values a numeric field accepts: ``low`` to ``high``, ``low`` itself excluded when ``above_low``."""

    low: float
    high: float
    above_low: bool = False  # a rate must be > 0, not >= 0

    def __contains__(self, value: float) -> bool:  # NaN compares false, so it is never inside
        return (value > self.low if self.above_low else value >= self.low) and value <= self.high

    def __str__(self) -> str:
        if self.above_low:
            return f"greater than {_number(self.low)} and at most {_number(self.high)}"
        return f"{_number(self.low)} to {_number(self.high)}"


def _number(value: float) -> str:
    """1000000.0 -> 1,000,000; 0.5 -> 0.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Field:
    """One setting: how it is typed, what it defaults to, and which benchmarks/scenarios it applies to."""

    name: str
    type: type
    default: Any
    description: str
    benchmarks: tuple[Benchmark, ...] | None = None  # None: every benchmark
    scenarios: tuple[Scenario, ...] | None = None  # None: every scenario
    required: bool = False  # a registered config class must set it (where it applies)
    choices: tuple[str, ...] | None = None
    range: Range | None = None  # every int and float field has one
    pattern: str | None = None  # a str field with open-ended values: the regular expression they match in full
    # A throughput of the whole system. A config class named after a GPU model (code/config/registry.py) gives it
    # for one GPU, and a system of N such GPUs resolves N times it; nothing else scales with the GPU count.
    system_rate: bool = False
    # It makes the engine: it changes the answers a run gives (the arithmetic, the backend), so an accuracy run with
    # one value says nothing of another. A rung of an engine ladder names its engine by these (code/config/ladder.py),
    # and one given in RUN_ARGS chooses the engine itself, skipping the ladder and its accuracy gate.
    engine: bool = False
    # The backends that declare it (a switch): only they read it, and a value given for another backend is refused
    # (``code/config/resolved.py``, ``check_run_args_used``). Empty: a field of the harness, which every backend reads.
    # The field table fills it in, and ``benchmarks`` with it, from the declarations (``code/config/fields.py``).
    owners: tuple[Owner, ...] = ()

    def accepted(self) -> str:
        """What values the field takes, as ``--help`` and the docs say it."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.pattern is not None:
            return f"str matching {self.pattern}"
        if self.range is not None:
            return f"{self.type.__name__}, {self.range}"
        return self.type.__name__

    def default_text(self) -> str:
        """The default as --help says it: the value, or who sets it where the field has none of its own."""
        if self.default is None:
            return "set by the config class" if self.required else "unset"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return _number(self.default) if isinstance(self.default, (int, float)) else str(self.default)

    def applies_to(self, benchmark: Benchmark, scenario: Scenario) -> bool:
        return (self.benchmarks is None or benchmark in self.benchmarks) and (
            self.scenarios is None or scenario in self.scenarios
        )

    def used_by(self, benchmark: Benchmark, backend: str) -> bool:
        """Whether a run of ``benchmark`` on ``backend`` reads the field: every backend a harness field, the
        declaring backends a switch."""
        return not self.owners or (benchmark, backend) in self.owners

    def owner_text(self) -> str:
        """The backends that declare a switch, as messages and the docs name them: ``bert pytorch, gptj inflight``."""
        return ", ".join(f"{benchmark.value} {backend}" for benchmark, backend in self.owners)

    def owned_by(self, owner: Owner) -> Field:
        """This switch as the field table holds it once ``owner`` declared it (with every earlier declarer's
        claim): a switch of the same name declared by several backends is one field, so its declarations must agree
        on everything but their descriptions, which are joined."""
        benchmark, backend = owner
        if not self.owners:
            return replace(self, benchmarks=(benchmark,), owners=(owner,))
        return replace(self, benchmarks=tuple(dict.fromkeys((*(self.benchmarks or ()), benchmark))),
                       owners=(*self.owners, owner))

    def merged(self, other: Field, owner: Owner) -> Field:
        """This field (already declared) and ``other``, the same switch declared by ``owner`` too."""
        mine = replace(self, description="", benchmarks=None, owners=())
        theirs = replace(other, description="", benchmarks=None, owners=())
        if mine != theirs:
            raise TypeError(f"switch '{self.name}' is declared by {self.owner_text()} and {owner[0].value} "
                            f"{owner[1]} differently ({mine} vs {theirs}): one switch has one type, default and "
                            "set of values")
        description = self.description
        if other.description not in description:
            description = f"{description}; {other.description}"
        return replace(self, description=description).owned_by(owner)

    def check(self, value: Any, where: str) -> Any:
        """Check a value's type, choice and range; ints are accepted for float fields."""
        ok = isinstance(value, self.type) and not (self.type is int and isinstance(value, bool))
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if value is None and self.default is None:
            ok = True
        if not ok:
            raise FieldError(f"{where}: field '{self.name}' must be {self.type.__name__}, got {value!r}")
        if isinstance(value, str) and not value.strip():  # "" would pass for a path: Path("") is the current folder
            raise FieldError(f"{where}: field '{self.name}' is empty; give {self.accepted()}, or leave it out")
        if self.choices is not None and value is not None and value not in self.choices:
            raise FieldError(f"{where}: field '{self.name}' = {value!r}; valid choices: {', '.join(self.choices)}")
        if self.pattern is not None and value is not None and not re.fullmatch(self.pattern, value):
            raise FieldError(f"{where}: field '{self.name}' = {value!r} is not {self.accepted()} "
                             f"({self.description})")
        problem = self._range_problem(value)
        if problem:
            raise FieldError(f"{where}: field '{self.name}' = {value!r} {problem}; set a value in that range")
        return value

    def _range_problem(self, value: Any) -> str | None:
        if self.range is None or value is None or value in self.range:
            return None
        return f"is out of range: allowed {self.range} ({self.description})"

    def parse(self, text: str) -> Any:
        """Turn a RUN_ARGS string into a typed value, with an error that names the field."""
        try:
            if self.type is bool:
                lowered = text.strip().lower()
                if lowered in ("1", "true", "yes", "on", ""):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            value = self.type(text)
        except ValueError:
            raise FieldError(f"--{self.name}={text}: expected {self.accepted()}") from None
        problem = self._range_problem(value)
        if problem:
            raise FieldError(f"--{self.name}={text} {problem}; give a value in that range, or leave --{self.name} "
                             "out to use the config's")
        return self.check(value, f"--{self.name}")
