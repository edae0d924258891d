"""Tuned values: what ``make find_performance`` measured on a system, and the engines that missed their accuracy
target there, stored for later runs to pick up.

``build/tuned/<system>/<bench>/<Scenario>.json`` (``MLPERF_TUNED_DIR`` moves the folder) holds one record per key:
the speed-changing RUN_ARGS (``run_settings``) and the engine a value was measured with, so values found with other
flags sit side by side. A record holds the one machine-speed setting (``TUNED_FIELDS``), how and when it was found,
by which code version, for which system and on which hardware; one found by other code, for another system or on
other hardware is ignored with one warning naming the fix, never a traceback. Writers replace a file under its lock,
so two find_performance runs keep both values. ``<Scenario>.misses.json`` beside it records the ladder's engines
whose accuracy run on this checkpoint missed, so a later run starts at the first that has not
(code/tuning/accuracy_gate.py).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from code.common import atomic, paths
from code.common.constants import Scenario
from code.common.file_lock import holding
from code.common.log import get_logger
from code.config.fields import FIELDS, FieldError

TUNED_FIELDS = {
    Scenario.Offline: "offline_expected_qps",
    Scenario.Server: "server_target_qps",
    Scenario.SingleStream: "single_stream_expected_latency_ns",
}
SCHEMA = 1  # of a record
STORE_SCHEMA = 2  # of a file: {"schema": 2, "values": [record, ...]}; schema 1 files held one record
MISSES_SCHEMA = 1  # of a misses file (one record)
# RUN_ARGS fields that do not change how fast the system runs: a tuned value found with any of them holds without.
NOT_SPEED = frozenset({"test_run", "test_mode", "min_duration", "max_duration", "min_query_count", "max_query_count",
                       "log_dir", "log_enable_trace", "round", "num_samples", "performance_sample_count_override"})

log = get_logger("tuned")
_warned: set[str] = set()


class TunedStoreError(RuntimeError):
    """A tuned value cannot be written (a read-only or full build folder); the message names the fix."""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``git describe`` of the checkout (a tuned value is only trusted by the code that found it), else the
    package version from pyproject.toml."""
    try:
        found = subprocess.run(["git", "describe", "--always", "--tags"], cwd=paths.REPO_ROOT, capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip()
        if found:
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open(paths.REPO_ROOT / "pyproject.toml", "rb") as file:
            return "package " + str(tomllib.load(file)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def system_id() -> str:
    """The hardware (CPU model and cores, GPUs): a file copied from another machine, or kept after a GPU was
    swapped, is stale even when the config's system name is the same."""
    from code.common.systems import detect_system

    described = detect_system().describe()
    gpus = [gpu.get("name", str(gpu)) if isinstance(gpu, dict) else str(gpu) for gpu in described.get("gpus", [])]
    return (f"{described.get('cpu_model', '?')}, {described.get('cpu_cores', '?')} cores; "
            f"{', '.join(gpus) if gpus else 'no GPU'}")


def tuned_path(system: str, benchmark_name: str, scenario: Scenario) -> Path:
    return paths.TUNED_DIR / system / benchmark_name / f"{scenario.value}.json"


def misses_path(system: str, benchmark_name: str, scenario: Scenario) -> Path:
    return paths.TUNED_DIR / system / benchmark_name / f"{scenario.value}.misses.json"


def shown(path: Path) -> str:
    """A path as messages show it: relative to the checkout when inside it."""
    try:
        return str(Path(path).relative_to(paths.REPO_ROOT))
    except ValueError:
        return str(path)


def run_settings(overrides: dict[str, Any]) -> dict[str, str]:
    """The RUN_ARGS that may change the speed (precision, batch size, devices, inputs, ...): a tuned value holds only
    for runs that give the settings it was measured with."""
    tuned = set(TUNED_FIELDS.values())
    return {name: str(value) for name, value in sorted(overrides.items()) if name not in NOT_SPEED | tuned}


@dataclass
class TunedValue:
    system: str
    benchmark: str
    scenario: str
    field: str
    value: float | int
    how: str
    date: str
    code_version: str
    system_id: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # the speed-changing RUN_ARGS it was measured with
    schema: int = SCHEMA
    engine: str = ""  # the engine ladder's rung it was measured with ("": a config without a ladder, or none named)


def _rewrite(path: Path, change: Callable[[], Any]) -> Path:
    """Replace ``path`` with the JSON of ``change()``, whole or not at all and under the store's lock (``.<name>.lock``
    beside it), so writers at once lose nothing; ``TunedStoreError`` names the fix when the folder is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with holding(path.with_name(f".{path.name}.lock")):
            atomic.write_text(path, json.dumps(change(), indent=2, default=str) + "\n")
    except OSError as error:
        raise TunedStoreError(not_writable(path.parent, error)) from None
    return path


def write_tuned(system: str, benchmark_name: str, scenario: Scenario, value: float | int, how: str,
                settings: dict[str, str] | None = None, engine: str = "") -> Path:
    """Store a value found now with these ``run_settings`` and engine, beside those of other settings and engines and
    in place of the one of the same."""
    record = asdict(TunedValue(system, benchmark_name, scenario.value, TUNED_FIELDS[scenario], value, how,
                               time.strftime("%Y-%m-%dT%H:%M:%S%z"), code_version(), system_id(),
                               dict(settings or {}), engine=engine))
    path = tuned_path(system, benchmark_name, scenario)

    def change() -> dict[str, Any]:
        try:
            kept = _records(path.read_text())
        except FileNotFoundError:
            kept = []
        except (OSError, ValueError) as error:  # unreadable or corrupt: kept aside for a person, said so
            log.warning("%s: cannot read it (%s); moved it to %s, and a new file holds the new value",
                        shown(path), error, shown(set_aside(path)))
            kept = []
        for earlier in kept:
            if _key(earlier) == _key(record):
                log.info("%s: %s replaces %s (found %s)%s", shown(path), _number(value), _number(earlier.get("value")),
                         earlier.get("date", "at an unknown date"), _described(record["settings"], engine))
        return {"schema": STORE_SCHEMA, "values": [earlier for earlier in kept if _key(earlier) != _key(record)]
                + [record]}

    return _rewrite(path, change)


def set_aside(path: Path) -> Path:
    """Move an unreadable store to ``<name>.corrupt`` (``.corrupt-2``, ... when taken), where a person can recover
    its values."""
    aside, index = path.with_name(f"{path.name}.corrupt"), 1
    while aside.exists():
        index += 1
        aside = path.with_name(f"{path.name}.corrupt-{index}")
    os.replace(path, aside)
    return aside


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _described(settings: dict[str, str], engine: str) -> str:
    """`` with --a=1 --b=2, engine x`` for a log line; empty for no settings and no engine."""
    parts = [" ".join(f"--{name}={value}" for name, value in settings.items())] if settings else []
    parts += [f"engine {engine}"] if engine else []
    return f" with {', '.join(parts)}" if parts else ""


def _key(record: dict[str, Any]) -> tuple[str, str]:
    """What a stored value is kept apart by: the speed-changing settings and the engine it was measured with."""
    return json.dumps(record.get("settings") or {}, sort_keys=True), str(record.get("engine") or "")


def _records(text: str) -> list[dict[str, Any]]:
    """The records of a store's text (a schema-1 file is one record); ``ValueError`` when it is not a store."""
    stored = json.loads(text)
    if not isinstance(stored, dict):
        raise ValueError("not a JSON object")
    if "values" not in stored:
        return [stored]
    records = stored["values"]
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        raise ValueError("its values are not a list of JSON objects")
    return records


def not_writable(directory: Path, error: OSError) -> str:
    return (f"cannot write tuned values in {shown(directory)} ({error.strerror or error}): make it writable "
            f"(chmod -R u+w {shown(paths.TUNED_DIR)}), or point MLPERF_TUNED_DIR at a writable folder")


def check_writable(system: str) -> None:
    """Refuse a search whose results could not be stored, before it measures anything."""
    directory = paths.TUNED_DIR / system
    probe = directory / f".write-test.{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise TunedStoreError(not_writable(directory, error) + "; nothing was measured") from None


def _read_record(path: Path, fix: str) -> tuple[str | None, str | None]:
    """A stored file's text, or None and why it is ignored (None, None: there is none)."""
    try:
        return path.read_text(), None
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"ignoring {shown(path)}: cannot read it ({error.strerror or error}); {fix}"


def _corrupt(path: Path, error: Exception, fix: str) -> str:
    why = (str(error).splitlines() or [type(error).__name__])[0]
    return f"ignoring {shown(path)}: it is corrupt ({why}); {fix}"


def read_tuned(system: str, benchmark_name: str, scenario: Scenario, settings: dict[str, str] | None = None,
               engine: str = "") -> tuple[TunedValue | None, str | None]:
    """The stored value for a run with these ``run_settings`` and engine (a rung's name, "" for none), or None and
    why it cannot be used (None, None: there is none). Engines of one ladder differ in speed by up to 2x, so one's
    value is not another's."""
    path = tuned_path(system, benchmark_name, scenario)
    fix = (f'run `make find_performance RUN_ARGS="--benchmarks={benchmark_name} '
           f'--scenarios={scenario.value.lower()}"` again, or delete the file')
    text, unreadable = _read_record(path, fix)
    if text is None:
        return None, unreadable
    settings = dict(settings or {})
    try:
        records = _records(text)
        wanted = _key({"settings": settings, "engine": engine})
        record = next((record for record in records if _key(record) == wanted), None)
        if record is None:
            return None, _no_record(path, records, settings, engine, fix)
        tuned = TunedValue(**{key: record[key] for key in TunedValue.__dataclass_fields__ if key in record})
        if tuned.field != TUNED_FIELDS[scenario]:
            raise ValueError(f"it sets {tuned.field}, not {TUNED_FIELDS[scenario]}")
        fld = FIELDS[tuned.field]
        tuned.value = fld.parse(str(int(tuned.value) if fld.type is int else tuned.value))
    except (ValueError, TypeError, FieldError) as error:
        return None, _corrupt(path, error, fix)
    if tuned.system != system:
        return None, f"ignoring {shown(path)}: it was found on system {tuned.system}, not {system}; {fix}"
    if tuned.system_id != system_id():
        return None, (f"ignoring {shown(path)}: it was measured on other hardware ({tuned.system_id or 'unknown'}; "
                      f"this is {system_id()}); {fix}")
    if tuned.code_version != code_version():
        return None, (f"ignoring {shown(path)}: it was found by code version {tuned.code_version}, this is "
                      f"{code_version()} (a change may have changed the speed); {fix}")
    return tuned, None


def _no_record(path: Path, records: list[dict[str, Any]], settings: dict[str, str], engine: str, fix: str) -> str:
    """Why no stored value holds for a run: what the nearest record was measured with, against the run's."""
    def flags(given: dict[str, str]) -> str:
        return " ".join(f"--{name}={value}" for name, value in given.items()) or "no speed-changing flags"

    def named(rung: str) -> str:
        return f"engine {rung}" if rung else "the config's engine (no rung of an engine ladder)"

    same_settings = [record for record in records if _key(record)[0] == _key({"settings": settings})[0]]
    if same_settings:
        return (f"ignoring {shown(path)}: it was measured with {named(str(same_settings[-1].get('engine') or ''))}, "
                f"this run uses {named(engine)}; {fix}")
    if not records:
        raise ValueError("it holds no value")
    field_name = records[-1].get("field", "the tuned field")
    return (f"ignoring {shown(path)}: it was measured with {flags(records[-1].get('settings') or {})}, this run "
            f"gives {flags(settings)}; run `make find_performance` with this run's RUN_ARGS, or give the value "
            f"with --{field_name}")


def tuned_fields(system: str, benchmark_name: str, scenario: Scenario, warn: bool = True,
                 overrides: dict[str, Any] | None = None, engine: str = "") -> dict[str, tuple[Any, str]]:
    """``{field: (value, "tuned (<path>)")}`` for a run with this engine; a file it cannot use is ignored, with a
    warning once per process (``warn``) unless RUN_ARGS give the field, as then it changes nothing."""
    tuned, problem = read_tuned(system, benchmark_name, scenario, run_settings(overrides or {}), engine)
    if problem and warn and TUNED_FIELDS[scenario] not in (overrides or {}) and problem not in _warned:
        _warned.add(problem)
        log.warning("%s", problem)
    if tuned is None:
        return {}
    return {tuned.field: (tuned.value, f"tuned ({shown(tuned_path(system, benchmark_name, scenario))})")}


@dataclass
class EngineMiss:
    """One engine's accuracy run that missed the target."""

    engine: str  # the rung's name
    values: dict[str, Any]  # every engine field of the run (a rung whose values changed since is another engine)
    score: str  # the accuracy run's summary: its figures and targets
    failures: list[str]  # each figure that missed, against its target
    log_dir: str
    date: str
    code_version: str


@dataclass
class EngineMisses:
    """The misses of one system, benchmark and scenario, all on one checkpoint."""

    system: str
    benchmark: str
    scenario: str
    checkpoint: str  # the weights as the run named them: a path, or "none (<backend> backend)"
    checkpoint_identity: Any  # name, size and mtime of its files (code/mlperf/inputs.py)
    misses: list[EngineMiss] = field(default_factory=list)
    schema: int = MISSES_SCHEMA


def read_misses(system: str, benchmark_name: str, scenario: Scenario) -> tuple[EngineMisses | None, str | None]:
    """The stored misses, or None and why they cannot be used (None, None: there are none); the ladder then starts
    at its first engine again."""
    path = misses_path(system, benchmark_name, scenario)
    fix = "delete it (the accuracy gate then tries the ladder from its first engine again)"
    text, unreadable = _read_record(path, fix)
    if text is None:
        return None, unreadable
    try:
        record = json.loads(text)
        if not isinstance(record, dict) or record.get("schema") != MISSES_SCHEMA:
            raise ValueError(f"not a schema-{MISSES_SCHEMA} record")
        misses = [EngineMiss(**{key: miss[key] for key in EngineMiss.__dataclass_fields__})
                  for miss in record["misses"]]
        stored = EngineMisses(**{key: record[key] for key in EngineMisses.__dataclass_fields__ if key != "misses"},
                              misses=misses)
    except (ValueError, TypeError, KeyError) as error:
        return None, _corrupt(path, error, fix)
    if (stored.system, stored.benchmark, stored.scenario) != (system, benchmark_name, scenario.value):
        return None, (f"ignoring {shown(path)}: it is of {stored.system} {stored.benchmark} {stored.scenario}, not "
                      f"{system} {benchmark_name} {scenario.value}; {fix}")
    return stored, None


def record_miss(system: str, benchmark_name: str, scenario: Scenario, checkpoint: str, checkpoint_identity: Any,
                miss: EngineMiss) -> Path:
    """Add a miss on this checkpoint; misses stored for another checkpoint are dropped (they say nothing of it)."""

    def change() -> dict[str, Any]:
        stored, _ = read_misses(system, benchmark_name, scenario)
        if stored is None or (stored.checkpoint, stored.checkpoint_identity) != (checkpoint, checkpoint_identity):
            stored = EngineMisses(system, benchmark_name, scenario.value, checkpoint, checkpoint_identity)
        stored.misses = [kept for kept in stored.misses if kept.engine != miss.engine] + [miss]
        return asdict(stored)

    return _rewrite(misses_path(system, benchmark_name, scenario), change)


def clear_misses(system: str, benchmark_name: str, scenario: Scenario) -> None:
    """Forget the stored misses (the checkpoint they were measured on is gone)."""
    misses_path(system, benchmark_name, scenario).unlink(missing_ok=True)
