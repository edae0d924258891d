"""Engine ladders: the engines a config class may run for its accuracy target, fastest first.

MLPerf's accuracy rule (99% or 99.9% of the reference's score) is settled only by the real checkpoint's AccuracyOnly
run, so a class need not pin the safest engine: its ``engine_ladder`` lists rungs, fastest first, and a run takes the
first that has not missed on this system and checkpoint (code/tuning/accuracy_gate.py). A rung is a name, what the
engine is, and field values: those that make the engine (``engine`` fields) and those that go with it (rates,
batching). An engine field in RUN_ARGS chooses the engine itself; the rung it names still brings its rates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from code.common.constants import Benchmark, Scenario
from code.config.fields import FIELDS, FieldError

RUNG_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]{0,39}")  # it names a log folder and a key of the stored misses


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
        return {name: value for name, value in self.values.items() if FIELDS[name].engine}


Ladder = tuple[Rung, ...]


def check_ladder(ladder: Any, benchmark: Benchmark, scenario: Scenario, where: str) -> None:
    """Refuse a ladder that could not run, naming the rung and the fix (``where``: the class)."""
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
    return list(dict.fromkeys(name for rung in ladder for name in rung.engine()))


def given_engine_fields(ladder: Ladder, overrides: Mapping[str, Any]) -> list[str]:
    """The ladder's engine fields RUN_ARGS give: any of them chooses the engine and skips the ladder."""
    return [name for name in engine_fields(ladder) if name in overrides]


def matching_rung(ladder: Ladder, below: Mapping[str, Any], overrides: Mapping[str, Any]) -> Rung | None:
    """The rung whose engine fields over ``below`` (the class's values) equal ``overrides`` over ``below``."""
    names = engine_fields(ladder)
    run = {name: overrides.get(name, below.get(name, FIELDS[name].default)) for name in names}
    return next((rung for rung in ladder
                 if all(rung.values.get(name, below.get(name, FIELDS[name].default)) == run[name] for name in names)),
                None)


def engine_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The engine fields of a resolved config: what an accuracy run judged, and a stored miss is compared with."""
    return {name: value for name, value in sorted(values.items()) if FIELDS[name].engine}


def same_engine(stored: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a stored miss's ``engine_values`` are ``values``. A field the stored ones lack did not apply when the
    miss was recorded, so it ran at its default: one that applies later (fp8_fast_accum for GPT-J) leaves the miss
    standing while the rung keeps that default."""
    then = {name: FIELDS[name].default for name in values if name not in stored} | dict(stored)
    return then == dict(values)
