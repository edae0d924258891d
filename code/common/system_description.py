"""MLPerf system descriptions: ``systems/<system>.json`` plus the submitter's values, checked as the checker does.

The official checker wants every REQUIRED_FIELDS field present, those of MEANINGFUL_FIELDS non-empty, ``status`` one
of STATUSES, a ``system_type`` it knows, and ``submitter`` and ``division`` equal to their staging folders; a
placeholder such as ``FILL_ME`` passes it and is wrong, so it is refused here too. Values come from, a later source
winning: ``systems/<system>.json`` (the hardware's facts, or what ``make add_system`` detected),
``systems/<system>.user.json`` (what only the submitter knows; ``null`` where a person must answer), and the
``SUBMITTER`` variable.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common import systems
from code.common.rounds import SYSTEM_TYPES
from code.common.systems import DetectedSystem, SystemDetectionError

REQUIRED_FIELDS = (
    "division", "submitter", "status", "system_name", "number_of_nodes", "host_processor_model_name",
    "host_processors_per_node", "host_processor_core_count", "host_memory_capacity", "host_storage_capacity",
    "host_storage_type", "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "framework", "operating_system", "system_type", "other_software_stack", "host_processor_frequency",
    "host_processor_caches", "host_memory_configuration", "host_processor_interconnect", "host_networking",
    "host_networking_topology", "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_configuration", "accelerator_on-chip_memories",
    "cooling", "hw_notes", "sw_notes", "host_network_card_count", "system_type_detail",
)
"""The checker's SYSTEM_DESC_REQUIRED_FIELDS: each must be present (it may be "" unless also meaningful)."""
MEANINGFUL_FIELDS = (
    "division", "submitter", "system_type", "status", "system_name", "number_of_nodes", "host_processor_model_name",
    "host_processors_per_node", "host_processor_core_count", "host_memory_capacity", "host_memory_configuration",
    "host_storage_capacity", "host_storage_type", "host_networking", "host_network_card_count",
    "host_networking_topology", "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "accelerator_host_interconnect", "accelerator_memory_configuration", "accelerator_interconnect", "cooling",
    "framework", "operating_system", "other_software_stack",
)
"""The checker's SYSTEM_DESC_MEANINGFUL_RESPONSE_REQUIRED_FIELDS: each must be present and not empty."""
STATUSES = ("available", "preview", "rdi")
"""The checker's VALID_AVAILABILITIES (compared lower-cased)."""
DIVISIONS = ("closed", "open")
"""Divisions this harness submits to (the checker also knows "network", which needs fields of its own)."""
SUBMITTER_ENV = "SUBMITTER"
USER_FILE_SUFFIX = ".user.json"
_PLACEHOLDER = re.compile(r"^\s*(fill[_ ]?me|tbd|todo|xx+|\?+)\s*$", re.IGNORECASE)

DETECTED_FIELDS = (
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count", "host_memory_capacity",
    "host_storage_capacity", "host_storage_type", "accelerators_per_node", "accelerator_model_name",
    "accelerator_memory_capacity", "accelerator_host_interconnect", "accelerator_memory_configuration",
    "operating_system", "framework", "other_software_stack",
)
"""Fields ``make add_system`` fills from detection (``detected_fields``)."""
MEMORY_TYPES = {"H100_SXM_80GB": "HBM3", "H200_SXM_141GB": "HBM3e", "H100_NVL_94GB": "HBM3",
                "H100_PCIe_80GB": "HBM2e", "GH200_96GB": "HBM3"}
"""Memory technology of GPUs NVML names but does not describe (system short name -> type)."""


class SystemDescriptionError(SystemDetectionError):
    """A description file that is missing or not readable; the message names the fix."""


@dataclass(frozen=True)
class DescriptionFiles:
    """The two files of one system's description."""

    base: Path
    user: Path

    @classmethod
    def of(cls, system: str, systems_dir: Path | None = None) -> DescriptionFiles:
        folder = systems_dir or systems.SYSTEMS_DIR  # read at call time: tests point it elsewhere
        return cls(folder / f"{system}.json", folder / f"{system}{USER_FILE_SUFFIX}")


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (what a user types), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SystemDescriptionError(f"{path} is not valid JSON ({error}); fix it or delete it and run "
                                     "`make add_system`") from None
    if not isinstance(value, dict):
        raise SystemDescriptionError(f"{path} holds a {type(value).__name__}, not a JSON object of fields")
    return value


def load_description(system: str, systems_dir: Path | None = None, submitter: str | None = None) -> dict[str, Any]:
    """The description a submission ships: the system's JSON, then its user file's non-null values, then the
    submitter (``submitter`` or the SUBMITTER environment variable)."""
    files = DescriptionFiles.of(system, systems_dir)
    if not files.base.is_file():
        raise SystemDescriptionError(f"{files.base} is missing; it says whether {system} is a datacenter or edge "
                                     "system: run `make add_system` to write it")
    description = read_json_object(files.base)
    if files.user.is_file():
        user = read_json_object(files.user)
        unknown = sorted(set(user) - set(REQUIRED_FIELDS))
        if unknown:
            raise SystemDescriptionError(f"{files.user}: unknown field(s) {', '.join(unknown)}; the fields are the "
                                         "submission checker's (documentation/adding_a_system.md)")
        description.update({name: value for name, value in user.items() if value is not None})
    submitter = submitter or os.environ.get(SUBMITTER_ENV)
    if submitter:
        description["submitter"] = submitter
    return description


def described_gpu_count(system: str) -> int | None:
    """The description's ``accelerators_per_node``; None without one or a whole number there (a run does not need
    the description; ``make check_system_json`` names what is wrong with it)."""
    try:
        return int(str(load_description(system).get("accelerators_per_node")).strip())
    except (SystemDescriptionError, ValueError):
        return None


def system_type(system: str, systems_dir: Path | None = None) -> str:
    """The description's ``system_type``: with the round, it decides which scenarios a submission must and may have."""
    value = load_description(system, systems_dir).get("system_type")
    if not value:
        raise SystemDescriptionError(f"{DescriptionFiles.of(system, systems_dir).base} has no system_type: set it to "
                                     f"{', '.join(SYSTEM_TYPES)}")
    return str(value)


def _how_to_set(name: str, files: DescriptionFiles) -> str:
    user = shown(files.user)
    if name == "submitter":
        return f'give SUBMITTER=<organization> or set "submitter" in {user}'
    if name in DETECTED_FIELDS:
        return f'run `make add_system` on the machine that runs the benchmark (it detects it) or set "{name}" in {user}'
    return f'set "{name}" in {user}'


def description_problems(description: dict[str, Any], files: DescriptionFiles) -> list[str]:
    """Everything the round's checker would reject in ``description``, or that is a placeholder, one line per field
    naming where to set it; empty when it would pass."""
    problems = []
    for name in REQUIRED_FIELDS:
        value = description.get(name)
        fix = _how_to_set(name, files)
        if value is None:
            problems.append(f"{name}: missing; {fix}")
        elif isinstance(value, str) and _PLACEHOLDER.match(value):
            problems.append(f"{name}: placeholder {value!r}; {fix}")
        elif name in MEANINGFUL_FIELDS and (not value or (isinstance(value, str) and not value.strip())):
            problems.append(f"{name}: empty, and the checker requires a meaningful value; {fix}")
    # Fields with a closed set of values, and the files that may set them: status is the submitter's alone.
    both = [files.base, files.user]
    for name, valid, where in (("status", STATUSES, [files.user]), ("system_type", SYSTEM_TYPES, both),
                               ("division", DIVISIONS, both)):
        value = description.get(name)
        compared = str(value).lower() if name == "status" else value  # the checker lower-cases the status alone
        if value and compared not in valid and not _PLACEHOLDER.match(str(value)):
            problems.append(f"{name}: {value!r} is not one of {', '.join(valid)}; set \"{name}\" in "
                            f"{' or '.join(shown(path) for path in where)}")
    return problems


def unknown_fields(description: dict[str, Any]) -> list[str]:
    """Fields the checker does not know (it warns about them): usually a misspelt required one."""
    return sorted(set(description) - set(REQUIRED_FIELDS))


def _capacity(size_bytes: float) -> str:
    """Decimal units as vendors state capacities: "2 TB", "512 GB"."""
    terabytes = size_bytes / 1e12
    return f"{terabytes:.3g} TB" if terabytes >= 1 else f"{size_bytes / 1e9:.0f} GB"


def detected_fields(detected: DetectedSystem) -> dict[str, str]:
    """The DETECTED_FIELDS this machine answers, in the checker's field names; fields it cannot answer are absent."""
    values = {
        "host_processor_model_name": detected.cpu_model,
        "host_processors_per_node": str(detected.cpu_sockets) if detected.cpu_sockets else "",
        "host_processor_core_count": str(detected.cores_per_socket) if detected.cores_per_socket else "",
        "host_memory_capacity": f"{round(detected.memory_bytes / 2**30)} GB" if detected.memory_bytes else "",
        "operating_system": detected.operating_system,
    }
    if detected.storage:
        values["host_storage_capacity"] = ", ".join(f"{_capacity(d.size_bytes)} {d.kind}" for d in detected.storage)
        values["host_storage_type"] = ", ".join(sorted({d.kind for d in detected.storage}))
    versions = detected.software
    cuda = f", CUDA {detected.cuda_version}" if detected.cuda_version else ""
    if "torch" in versions:
        values["framework"] = f"PyTorch {versions['torch']}{cuda}"
    stack = [f"Python {versions['python']}"] if "python" in versions else []
    stack += [f"{name} {version}" for name, version in versions.items() if name not in ("python", "torch")]
    if detected.driver_version:
        stack.append(f"NVIDIA driver {detected.driver_version}")
    values["other_software_stack"] = ", ".join(stack + ["MLPerf LoadGen of the round, in our C++ harness"])
    values["accelerators_per_node"] = str(len(detected.gpus))
    if detected.gpus:
        gpu = detected.gpus[0]
        values.update({"accelerator_model_name": gpu.name,
                       "accelerator_memory_capacity": f"{round(gpu.memory_bytes / 2**30)} GB",
                       "accelerator_host_interconnect": gpu.pcie,
                       "accelerator_memory_configuration": MEMORY_TYPES.get(gpu.short_name, "")})
    else:
        values.update(dict.fromkeys(("accelerator_model_name", "accelerator_memory_capacity",
                                     "accelerator_host_interconnect", "accelerator_memory_configuration",
                                     "accelerator_interconnect"), "N/A"))
    return {name: value for name, value in values.items() if value}
