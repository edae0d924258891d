"""Engine ladders: the engines a config class may run for its accuracy target, fastest first.

MLPerf's accuracy rule (99% or 99.9% of the reference's score) is met or missed by the AccuracyOnly run of the real
checkpoint on the real data set; no proxy settles it for an engine close to the bar. So a config class need not pin
the safest engine: its ``engine_ladder`` lists engines (rungs), fastest first, and a run takes the first one that
has not missed the target on this system and checkpoint, with the real accuracy run as its gate
(code/tuning/accuracy_gate.py; the misses are stored by code/config/tuned.py).

A rung is a name, a line that says what the engine is and why it sits where it does, and field values: those that
make the engine (the fields marked ``engine`` in code/config/fields.py: precision, KV cache type, FP8 options) and
those that go with it (its expected rates, its batching). Config resolution (code/config/registry.py) puts a rung's
values between the tuned values and the config class's own: RUN_ARGS > tuned > rung > config class > default. An
engine field given in RUN_ARGS chooses the engine itself: the ladder and its gate are skipped, and the rung whose
engine the RUN_ARGS name (if one does) still brings its rates and batching.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from code.common.constants import Benchmark, Scenario
from code.config.fields import FIELDS, FieldError

RUNG_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]{0,39}")
"""A rung's name: it names a folder of the gate's logs and a key of the stored misses."""


@dataclass(frozen=True, init=False)
class Rung:
    """One engine of a ladder: ``Rung("fp8", "FP8 GEMMs and KV cache", precision="fp8", kv_cache_dtype="fp8")``."""

    name: str
    why: str
    values: Mapping[str, Any]

    def __init__(self, name: str, why: str, **values: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "values", MappingProxyType(dict(values)))

    def __repr__(self) -> str:
        return f"Rung({self.name!r}, {', '.join(f'{k}={v!r}' for k, v in self.values.items())})"

    def engine(self) -> dict[str, Any]:
        """The values that make the engine (the rest go with it: rates, batching)."""
        return {name: value for name, value in self.values.items() if FIELDS[name].engine}


Ladder = tuple[Rung, ...]


def check_ladder(ladder: Any, benchmark: Benchmark, scenario: Scenario, where: str) -> None:
    """Refuse a ladder that could not run, naming the rung and the fix: a ``FieldError`` (the caller says which class
    it is in ``where``)."""
    if not isinstance(ladder, tuple) or not all(isinstance(rung, Rung) for rung in ladder):
        raise FieldError(f"{where}: engine_ladder must be a tuple of Rung(...), fastest engine first, got {ladder!r}")
    seen: set[str] = set()
    for rung in ladder:
        if not RUNG_NAME.fullmatch(rung.name):
            raise FieldError(f"{where}: engine_ladder rung name {rung.name!r} must be lower-case letters, digits, '.', "
                             "'+' or '-' (at most 40), starting with a letter or digit: it names a log folder")
        if rung.name in seen:
            raise FieldError(f"{where}: engine_ladder names rung {rung.name!r} twice; give each engine its own name")
        seen.add(rung.name)
        if not rung.why.strip():
            raise FieldError(f"{where}: engine_ladder rung {rung.name!r} has no description; say what the engine is")
        for name, value in rung.values.items():
            if name not in FIELDS:
                raise FieldError(f"{where}: engine_ladder rung {rung.name!r}: unknown field '{name}'")
            fld = FIELDS[name]
            if not fld.applies_to(benchmark, scenario):
                raise FieldError(f"{where}: engine_ladder rung {rung.name!r}: field '{name}' does not apply to "
                                 f"{benchmark.value}/{scenario.value}")
            fld.check(value, f"{where} engine_ladder rung {rung.name!r}")
        if not rung.engine():
            engine_names = ", ".join(name for name, fld in FIELDS.items()
                                     if fld.engine and fld.applies_to(benchmark, scenario))
            raise FieldError(f"{where}: engine_ladder rung {rung.name!r} sets no field that makes an engine (one of "
                             f"{engine_names}): a rung is an engine")


def engine_fields(ladder: Ladder) -> list[str]:
    """The engine fields any rung of the ladder sets, in the order the rungs name them."""
    return list(dict.fromkeys(name for rung in ladder for name in rung.engine()))


def given_engine_fields(ladder: Ladder, overrides: Mapping[str, Any]) -> list[str]:
    """The ladder's engine fields that RUN_ARGS give: any of them chooses the engine and skips the ladder."""
    return [name for name in engine_fields(ladder) if name in overrides]


def matching_rung(ladder: Ladder, below: Mapping[str, Any], overrides: Mapping[str, Any]) -> Rung | None:
    """The rung whose engine the RUN_ARGS name: the one whose engine fields, over ``below`` (the config class's values
    and the defaults), equal the run's (``overrides`` over ``below``); None when no rung does."""
    names = engine_fields(ladder)
    run = {name: overrides.get(name, below.get(name, FIELDS[name].default)) for name in names}
    for rung in ladder:
        if all(rung.values.get(name, below.get(name, FIELDS[name].default)) == run[name] for name in names):
            return rung
    return None


def engine_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every engine field of a resolved config's values: what an accuracy run judged, and what a stored miss is
    compared with (a rung whose values changed since is another engine)."""
    return {name: value for name, value in sorted(values.items()) if FIELDS[name].engine}


def same_engine(stored: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a stored miss's engine values (``engine_values`` then) are those of ``values`` (``engine_values``
    now). A field the stored values lack did not apply to the benchmark when the miss was recorded, so it ran at
    its default: a field that starts to apply later (fp8_fast_accum for GPT-J) leaves an old miss standing as long
    as the rung keeps that default."""
    then = {name: FIELDS[name].default for name in values if name not in stored} | dict(stored)
    return then == dict(values)
