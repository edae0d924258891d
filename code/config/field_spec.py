"""What one configuration field is: name, type, default, description, the values it takes, where it applies.

It imports neither the harness's table (``code/config/fields.py``) nor the backends' declarations, so a backend can
declare its switches as ``Field`` values without importing the table they join.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from code.common.constants import Benchmark, Scenario

Owner = tuple[Benchmark, str]
BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "": True, "0": False, "false": False, "no": False,
            "off": False}  # a RUN_ARGS bool, lower-cased


class FieldError(ValueError):
    """An invalid field name or value; the message says what is allowed."""


@dataclass(frozen=True)
class Range:
    """``low`` to ``high``, ``low`` itself excluded when ``above_low`` (a rate must be > 0)."""

    low: float
    high: float
    above_low: bool = False

    def __contains__(self, value: float) -> bool:  # NaN compares false, so it is never inside
        return (value > self.low if self.above_low else value >= self.low) and value <= self.high

    def __str__(self) -> str:
        if self.above_low:
            return f"greater than {_number(self.low)} and at most {_number(self.high)}"
        return f"{_number(self.low)} to {_number(self.high)}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Field:
    """One setting: its type, default, and the benchmarks/scenarios it applies to."""

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
    # A whole-system throughput: a GPU model's class gives one GPU's, and N such GPUs resolve N times it.
    system_rate: bool = False
    # It changes the answers (arithmetic, backend), so an accuracy run with one value says nothing of another: a
    # ladder's rung names its engine by these, and one given in RUN_ARGS skips the ladder and its gate.
    engine: bool = False
    # The backends that declare this switch (only they read it); empty for a harness field. Filled in, with
    # ``benchmarks``, by the field table (``code/config/fields.py``).
    owners: tuple[Owner, ...] = ()

    def accepted(self) -> str:
        """What values the field takes, as ``--help`` says it."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.pattern is not None:
            return f"str matching {self.pattern}"
        if self.range is not None:
            return f"{self.type.__name__}, {self.range}"
        return self.type.__name__

    def default_text(self) -> str:
        """The default as --help says it, or who sets it where the field has none."""
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
        """Every backend reads a harness field; only its declaring backends read a switch."""
        return not self.owners or (benchmark, backend) in self.owners

    def owner_text(self) -> str:
        """``bert pytorch, gptj inflight``: the backends that declare a switch."""
        return ", ".join(f"{benchmark.value} {backend}" for benchmark, backend in self.owners)

    def owned_by(self, owner: Owner) -> Field:
        """This switch with ``owner`` added to the backends that declare it."""
        benchmark, backend = owner
        if not self.owners:
            return replace(self, benchmarks=(benchmark,), owners=(owner,))
        return replace(self, benchmarks=tuple(dict.fromkeys((*(self.benchmarks or ()), benchmark))),
                       owners=(*self.owners, owner))

    def merged(self, other: Field, owner: Owner) -> Field:
        """This switch declared again by ``owner``: one switch is one field, so the declarations must agree on all
        but their descriptions, which are joined."""
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
        """The value, checked for type, choice and range (an int passes as a float)."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if value is None and self.default is None:
            return None
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise FieldError(f"{where}: field '{self.name}' must be {self.type.__name__}, got {value!r}")
        if isinstance(value, str) and not value.strip():  # "" would pass for a path: Path("") is the current folder
            raise FieldError(f"{where}: field '{self.name}' is empty; give {self.accepted()}, or leave it out")
        if self.choices is not None and value not in self.choices:
            raise FieldError(f"{where}: field '{self.name}' = {value!r}; valid choices: {', '.join(self.choices)}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
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
        """A RUN_ARGS string as a typed value, or an error that names the field."""
        try:
            if self.type is bool:
                return BOOLEANS[text.strip().lower()]
            value = self.type(text)
        except (ValueError, KeyError):
            raise FieldError(f"--{self.name}={text}: expected {self.accepted()}") from None
        problem = self._range_problem(value)
        if problem:
            raise FieldError(f"--{self.name}={text} {problem}; give a value in that range, or leave --{self.name} "
                             "out to use the config's")
        return self.check(value, f"--{self.name}")
