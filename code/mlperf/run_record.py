"""A test's ``metadata.json``, the run record: the one module that writes and reads it.

Readers use a ``RunRecord``'s named accessors, never the file's string keys, so a renamed key is one edit here. The
record keeps the file's JSON as read and writes it back the same way (sorted keys, two-space indent): files of earlier
versions still read, and a record read and written again is byte for byte the file it came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common import atomic
from code.mlperf.run_logs import TestResult

METADATA_FILE = "metadata.json"
# How provenance's "model" (code/mlperf/inputs.py) words a model that is not the MLPerf one, and a backend that runs
# no model: the record's caveats read these words.
SMALL_MODEL = "(a small test model"
NO_MODEL = "none ("


class RunRecordError(ValueError):
    """A folder holds no readable run record; ``reason`` says why without naming the folder (for lists of folders)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# Read-only accessors of the record's entries: a section reads {} where the test recorded none (older records), an
# entry None, a reading (a measurement's dict) None where it was not read (its absence is news).
def _section(key: str, doc: str) -> Any:
    return property(lambda self: self.data.get(key) or {}, doc=doc)


def _entry(key: str, doc: str) -> Any:
    return property(lambda self: self.data.get(key), doc=doc)


def _reading(key: str, doc: str) -> Any:
    return property(lambda self: value if isinstance(value := self.data.get(key), dict) else None, doc=doc)


@dataclass
class RunRecord:
    """One test's record as metadata.json holds it; a section a test did not record reads as empty (or None)."""

    data: dict[str, Any]

    @property
    def result(self) -> TestResult:
        """The test's outcome; a record of a test that never wrote one reads as not complete."""
        return TestResult.from_dict(self.result_dict) if self.result_dict else TestResult("", "", "", complete=False)

    result_dict = _section("result", "The result as recorded (with its derived ``verdict``), for readers of its JSON.")

    @property
    def complete(self) -> bool:
        return bool(self.result_dict.get("complete"))

    @property
    def round(self) -> str | None:
        """The MLPerf round that ran the test; None in records from before rounds were kept."""
        return None if self.data.get("round") is None else str(self.data["round"])

    loadgen_version = _entry("loadgen_version", "The LoadGen version that ran the test.")
    system_name = _entry("system_name", "The system the test ran on, as its config names it.")
    config = _section(
        "config", "The resolved config: ``benchmark``, ``fields`` (values), ``sources`` (where each came from), ...")

    @property
    def has_config(self) -> bool:
        """Whether the test's own process wrote the record, not only its parent's note of a failure."""
        return "config" in self.data

    @property
    def sources(self) -> dict[str, str]:
        """Where each field's value came from ("RUN_ARGS", "tuned (...)", a class's name, "default")."""
        return self.config.get("sources") or {}

    @property
    def benchmark(self) -> str | None:
        return None if self.config.get("benchmark") is None else str(self.config["benchmark"])

    @property
    def fields(self) -> dict[str, Any]:
        return self.config.get("fields") or {}

    def given(self, *leave_out: str) -> dict[str, Any]:
        """The fields RUN_ARGS gave, by name, without the log folder (a run again needs its own) and ``leave_out``."""
        return {name: self.fields[name] for name, source in sorted(self.sources.items())
                if source == "RUN_ARGS" and name in self.fields and name not in ("log_dir", *leave_out)}

    provenance = _section("provenance", "What the test ran on: ``describe_inputs``' description.")
    engine = _section("engine", "Which engine of the config's ladder ran and why; {} before ladders existed.")
    devices = _section("devices", "The devices the test ran on.")
    versions = _section("versions", "The software versions that ran the test.")
    engine_stats = _section("engine_stats", "A continuous engine's counters (completed samples, generated tokens, "
                            "...); {} for a batch runner.")

    power = _reading("power", "GPU power over the performance test's timed part (code/mlperf/power.py); None when "
                     "it was not read.")
    power_missing = _entry("power_missing", "Why ``power`` is None; None in records from before power was read.")
    audit_accuracy = _section("audit_accuracy", "A TEST01 audit's accuracy scores of its logged responses; {} "
                              "otherwise.")
    tuning = _entry("tuning", "How the harness tuned the test's expected rate or latency first, if it did.")
    role = _entry("role", '"probe" for a --test_run\'s probe, which only sized the test\'s query.')
    host_load = _reading("host_load", "The host's load over the performance test's timed part "
                         "(code/common/host_load.py); None when it was not read.")

    @property
    def gpu_count(self) -> int:
        """The GPUs the test ran on: the CUDA devices it used (a CPU run's devices are ``cpu`` or ``cpu:N``)."""
        return sum(1 for device in self.devices.get("used") or [] if str(device).startswith("cuda"))

    @property
    def stand_in(self) -> str | None:
        """The GPU model the test ran as on another GPU (``--gpu_as``); None for a run as itself."""
        return str(self.fields["gpu_as"]) if self.fields.get("gpu_as") else None

    @property
    def model_label(self) -> str:
        """The model the figure is from, short: ``BERT-large``, ``BERT-tiny``, ``GPT-J 6B``, ``none (oracle
        backend)``; "?" in a record without provenance (a test that never started)."""
        model = str(self.provenance.get("model") or "?")
        return model if model.startswith(NO_MODEL) else model.split(" (")[0]

    @property
    def caveats(self) -> list[str]:
        """What keeps the figure from being a full-length run of the MLPerf model on real inputs, in a word each:
        ``stand-in for L4``, ``no model``, ``small model``, ``synthetic`` (inputs or weights), ``shortened``."""
        provenance, model = self.provenance, str(self.provenance.get("model") or "")
        caveats = [f"stand-in for {self.stand_in}"] if self.stand_in else []
        if model.startswith(NO_MODEL):
            caveats.append("no model")
        elif SMALL_MODEL in model:
            caveats.append("small model")
        if provenance.get("synthetic_inputs") or str(provenance.get("weights") or "").startswith("random"):
            caveats.append("synthetic")
        if self.fields.get("test_run") or any(str(reason).startswith("shortened")
                                              for reason in self.result_dict.get("not_submittable") or []):
            caveats.append("shortened")
        return caveats

    def update_engine(self, **changes: Any) -> None:
        """Add to the engine section: the accuracy gate marks the run of an engine that missed its target."""
        self.data["engine"] = {**self.engine, **changes}

    @classmethod
    def of(cls, result: TestResult, **sections: Any) -> RunRecord:
        return cls({"result": result.to_dict(), **sections})

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=True, default=str) + "\n"


def record_path(directory: Path) -> Path:
    return Path(directory) / METADATA_FILE


def write_record(directory: Path, record: RunRecord) -> Path:
    """Write the test folder's metadata.json, replaced whole (``atomic``): a write that fails (a full disk) leaves the
    earlier record, the test's "not finished" marker, rather than a cut-short file that reads as nothing."""
    return atomic.write_text(record_path(directory), record.to_json())


def read_record(directory: Path) -> RunRecord:
    """The test folder's record; RunRecordError, naming the folder, when it has none or one that does not read."""
    path = record_path(directory)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        reason = f"no readable {METADATA_FILE} ({error})"
        raise RunRecordError(f"{Path(directory)} has {reason}: not a test folder of this harness", reason) from None
    if not isinstance(data, dict) or not isinstance(data.get("result", {}), dict):
        reason = f"its {METADATA_FILE} is not a run record (a JSON object with a result object)"
        raise RunRecordError(f"{path} is not a run record (a JSON object with a result object)", reason)
    return RunRecord(data)


def mark_incomplete(directory: Path, scenario: str, mode: str, reason: str, details: dict[str, Any]) -> TestResult:
    """Write metadata.json for a test that has not finished (``complete: false``) and return its result."""
    result = TestResult(scenario, mode, str(directory), complete=False, invalid_reasons=[reason])
    write_record(directory, RunRecord.of(result, **details))
    return result
