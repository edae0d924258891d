"""``make add_system``: config classes and a system description for this machine.

Detects the system (GPU model and count through NVML, or CPU), then for each benchmark and scenario appends
registered classes named after it to ``configs/<bench>/<Scenario>/custom.py`` (loaded automatically when present),
where the system has no class of its own yet. For a GPU model that has classes (``H200_SXM_141GB`` for
``H200_SXM_141GBx2``) they derive from the model's, so they start from its values (throughputs per GPU, times the
count) and a field set in them overrides it; the system already runs without them. For any other system they are
stubs with the starting values of each benchmark's ``configs/<bench>/new_system.py``, which run as they are; tune
``gpu_batch_size`` and the target QPS/latency with ``make run RUN_ARGS="... --test_run"``.
It writes the system description the MLPerf submission checker requires (``code/common/system_description.py``):
``systems/<name>.json`` with what detection knows, when the system has none yet, and ``systems/<name>.user.json``
with the fields still unanswered: detected values where this machine answers them, ``null`` where a person must
(status, cooling, networking ...). Values already in the user file are kept.

Usage: ``python -m scripts.add_system [--system_name NAME] [--benchmarks bert,gptj] [--submitter ORG] [--dry_run]``
(SUBMITTER in the environment works as --submitter)
"""

from __future__ import annotations

import argparse
import importlib
import json
import keyword
import os
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

from code.common import atomic
from code.common.constants import AccuracyTarget, Benchmark, ChoiceError, Scenario
from code.common.gpu_models import REFERENCE, GpuModel, by_name, model_names
from code.common.paths import REPO_ROOT
from code.common.system_description import (
    MEANINGFUL_FIELDS,
    REQUIRED_FIELDS,
    SUBMITTER_ENV,
    DescriptionFiles,
    description_problems,
    detected_fields,
    load_description,
    read_json_object,
)
from code.common.systems import (
    CPU_SYSTEM,
    DetectedSystem,
    GpuInfo,
    detect_system,
    gpu_model_and_count,
    gpu_model_for_system,
)
from code.config.classes import VARIANT_SUFFIX, BenchmarkConfiguration
from code.config.registry import ConfigRegistry
from code.config.resolved import ConfigError, WorkloadSetting

HEADER = '''"""Configs of systems added with `make add_system` (scripts/add_system.py); edit them freely.

This file is imported after the scenario's own configs. Each class is one machine, named after its GPU model
and count. A class derived from a GPU model's class (``H200_SXM_141GB``) inherits its values, the throughputs
per GPU (the system's are those times its GPU count); a throughput set here is the system's whole.
Fields are listed in documentation/configs.md.
"""

'''
# The imports of custom.py files written before ``import_block``: their classes name the scenario's base class.
EARLIER_IMPORTS = """from code.common.constants import AccuracyTarget, HarnessType, PowerSetting
from code.config.registry import ConfigRegistry
from configs.{bench}.{scenario} import {base}
"""


def import_block(benchmark: Benchmark, scenario: Scenario, earlier_base: bool = False) -> str:
    """custom.py's imports, sorted by module as ruff wants them. Classes name the scenario's classes through its
    module (``Offline.H200_SXM_141GB``), so the block is the same whatever classes the file holds and none is
    unused; ``earlier_base`` adds the base class import that classes of earlier files name directly."""
    lines = ["from code.common.constants import AccuracyTarget, HarnessType, PowerSetting",
             f"from configs.{benchmark.package} import {scenario.value}",
             "from code.config.registry import ConfigRegistry"]
    if earlier_base:
        lines.append(f"from configs.{benchmark.package}.{scenario.value} import {scenario.value}BaseConfig")
    return "\n".join(sorted(lines, key=lambda line: line.split()[1].lower())) + "\n"


LINE_LENGTH = 120  # ruff's (pyproject.toml): make lint checks what this script writes
# The longest system name whose class headers fit a line once wrapped (``class_header``): "class " + name + the
# longest variant suffix ("_HighAccuracy_MaxQ") + "(" within LINE_LENGTH, with room to spare.
MAX_SYSTEM_NAME = 90


def class_header(name: str, base: str) -> list[str]:
    """``class name(base):`` on one line when it fits ``LINE_LENGTH``, else wrapped as ruff's formatter would."""
    line = f"class {name}({base}):"
    return [line] if len(line) <= LINE_LENGTH else [f"class {name}(", f"    {base},", "):"]


def stub_classes(system: str, benchmark: Benchmark, scenario: Scenario) -> str:
    """The two classes (99% and 99.9%) of a new system without GPUs, from the benchmark's
    ``configs/<bench>/new_system.py``. (A system of GPUs derives from its GPU model's classes instead.)

    The values live with the benchmark's configs so that this script knows no benchmark by name.
    """
    start = importlib.import_module(f"configs.{benchmark.package}.new_system")
    values = start.STARTING_VALUES[scenario]
    precision, high_accuracy_precision = start.PRECISION
    lines = [
        "",
        "",
        "@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)",
        *class_header(system, f"{scenario.value}.{scenario.value}BaseConfig"),
        '    """Added by make add_system: starting values, to be tuned with --test_run runs."""',
        "",
        f'    precision = "{precision}"',
        '    device = "cpu"',
    ]
    lines += [f"    {name} = {value!r}" for name, value in values.items()]
    lines += [
        "",
        "",
        "@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)",
        *class_header(f"{system}_HighAccuracy", system),
        f'    precision = "{high_accuracy_precision}"',
    ]
    return "\n".join(lines) + "\n"


def model_subclasses(system: str, scenario: Scenario,
                     model_classes: dict[WorkloadSetting, type[BenchmarkConfiguration]], count: int) -> str:
    """A class of ``system`` for each workload of its GPU model's classes, derived from the model's class of the
    same workload: the system starts from the model's values and a field set in it overrides them. A system whose
    name does not give its GPU count (``MyBox``) states it (``gpu_count``), which its per-GPU rates are multiplied
    by."""
    counted = gpu_model_and_count(system) is not None
    blocks = []
    for workload, parent in model_classes.items():
        suffix = match.group(0) if (match := VARIANT_SUFFIX.search(parent.__name__)) else ""
        summary = textwrap.fill(f"Added by make add_system from {parent.__name__}: its values, the throughputs "
                                f"x {count} GPU{'s' if count != 1 else ''}.", width=113, initial_indent='    """',
                                subsequent_indent="    ")
        blocks.append("\n".join([
            "",
            "",
            f"@ConfigRegistry.register(HarnessType.{workload.harness_type.name}, "
            f"AccuracyTarget.{workload.accuracy_target.name}, PowerSetting.{workload.power_setting.name})",
            *class_header(f"{system}{suffix}", f"{scenario.value}.{parent.__name__}"),
            summary,
            "",
            "    A field set here overrides the inherited one; a throughput set here is the whole system's, as it "
            'is."""',
            *([] if counted else ["", f"    gpu_count = {count}"]),
        ]))
    return "\n".join(blocks) + "\n"


def model_classes_of(model: GpuModel, benchmark: Benchmark,
                     scenario: Scenario) -> dict[WorkloadSetting, type[BenchmarkConfiguration]]:
    """The GPU model's classes in this scenario by workload: the classes written for it, else those derived from the
    GPU (code/config/any_gpu.py), which its scenario module names (``Offline.A100_SXM4_40GB``) so that a class can
    derive from them."""
    classes = {key[3]: config for key, config in ConfigRegistry.registered().items()
               if key[:3] == (benchmark, scenario, model.name)}
    if classes:
        return classes
    module = importlib.import_module(f"configs.{benchmark.package}.{scenario.value}")
    workloads = [key[3] for key in ConfigRegistry.registered() if key[:3] == (benchmark, scenario, REFERENCE)]
    return {workload: getattr(module, model.name + ("_HighAccuracy" if workload.accuracy_target is
                                                    AccuracyTarget.k_99_9 else "")) for workload in workloads}


def target_gpus(system: str, detected: DetectedSystem, gpu_model: str | None,
                gpu_count: int | None) -> tuple[GpuModel, int] | None:
    """The GPU model and count the system is made of: --gpu_model/--gpu_count where given, else the model and count
    its name says (``A100_SXM4_40GBx8``), else this machine's GPUs; None for a system without GPUs."""
    found = gpu_model_and_count(system)
    if gpu_model is not None:
        model = by_name(gpu_model)
        if model is None:
            raise ConfigError(f"--gpu_model={gpu_model} is no GPU model of code/common/gpu_models.py; known: "
                              f"{', '.join(model_names())}")
        count = gpu_count or (found[1] if found else 1)
        if found and (by_name(found[0]) != model or found[1] != count):
            raise ConfigError(f"--system_name={system} says {found[1]}x {found[0]}, and --gpu_model/--gpu_count say "
                              f"{count}x {model.name}: give a name without a count (MyBox), or leave those out")
        return model, count
    if found is not None and (model := gpu_model_for_system(system)) is not None:
        return model, gpu_count or found[1]
    if detected.gpus and system != CPU_SYSTEM:
        return detected.gpus[0].model(), gpu_count or (found[1] if found else len(detected.gpus))
    return None


def as_detected(detected: DetectedSystem, model: GpuModel, count: int) -> DetectedSystem:
    """This machine with the system's GPUs in place of its own (a system added from another machine): the host
    fields of its description stay this machine's, to be corrected in the user file where they differ."""
    if detected.gpus and detected.gpus[0].model().name == model.name and len(detected.gpus) == count:
        return detected
    gpu = GpuInfo(model.nvml_names[0] if model.nvml_names else model.name, model.memory_bytes, model.capability)
    return replace(detected, gpus=(gpu,) * count)


def with_imports(text: str, path: Path, benchmark: Benchmark, scenario: Scenario) -> str:
    """An existing custom.py with the imports the classes add_system writes need: a file written before
    ``import_block`` gets its import block replaced by one that has both; a file whose imports were edited by hand,
    or never had them, is refused naming the lines to add (nothing is written)."""
    lines = text.splitlines()
    missing = [line for line in import_block(benchmark, scenario).splitlines() if line not in lines]
    if not missing:
        return text
    earlier = EARLIER_IMPORTS.format(bench=benchmark.package, scenario=scenario.value,
                                     base=f"{scenario.value}BaseConfig")
    if earlier in text:
        return text.replace(earlier, import_block(benchmark, scenario, earlier_base=True), 1)
    raise ConfigError(f"{path} lacks imports that the classes make add_system writes need: add "
                      f"{'; '.join(f'`{line}`' for line in missing)} to its imports, then run make add_system again")


# Names custom.py binds besides the classes it defines: a system named like one would shadow it and break the file.
RESERVED_NAMES = {"AccuracyTarget", "HarnessType", "PowerSetting", "ConfigRegistry",
                  *(scenario.value for scenario in Scenario), *(f"{scenario.value}BaseConfig" for scenario in Scenario)}


def system_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a config class in custom.py, with the fix; None when it can. Checked before
    anything is written: a bad name would leave a custom.py that breaks every later run."""
    if not name.isidentifier():
        fixed = "".join(c if c.isalnum() or c == "_" else "_" for c in name).lstrip("0123456789") or "MySystem"
        return (f"--system_name={name} must be a valid Python class name (letters, digits, _; not starting with a "
                f"digit): try --system_name={fixed}")
    if len(name) > MAX_SYSTEM_NAME:
        return (f"--system_name={name} has {len(name)} characters; a system name has at most {MAX_SYSTEM_NAME} "
                f"characters, so its config classes fit a line of configs/*/custom.py: try "
                f"--system_name={name[:MAX_SYSTEM_NAME]}")
    if keyword.iskeyword(name):
        return (f"--system_name={name} is a Python keyword, which cannot name a config class: try "
                f"--system_name={name}_system")
    if name in RESERVED_NAMES or name.endswith("_HighAccuracy"):
        return (f"--system_name={name} is a name configs/*/custom.py already uses for something else: pick "
                f"another, such as --system_name=My{name}")
    model = by_name(name)
    if model is not None:  # its classes are one GPU's, for every count: a system of it says how many
        return (f"--system_name={name} names a GPU model, not a system (its classes hold one GPU's values for every "
                f"system of it): name the system with its GPU count, --system_name={model.name}x<count>, or give "
                f"it a name of its own with --gpu_model={model.name} --gpu_count=<count>")
    return None


def add_configs(system: str, benchmark: Benchmark, gpus: tuple[GpuModel, int] | None, dry_run: bool) -> list[str]:
    """Append classes where the system has none of its own yet, derived from its GPU model's where it has some,
    else stubs; returns what was done per scenario.

    Each custom.py is written whole or not at all (a temporary file, checked to compile, then renamed), and when
    a file cannot take the classes or the registry rejects what was written, every file is put back as it was: no
    broken config is left behind."""
    done = []
    previous: dict[Path, str | None] = {}  # the files written, with their earlier text (None: they were new)
    try:
        for scenario in Scenario:
            ConfigRegistry.load(benchmark, scenario)
            registered = {key[2] for key in ConfigRegistry.registered() if key[:2] == (benchmark, scenario)}
            path = REPO_ROOT / "configs" / benchmark.package / scenario.value / "custom.py"
            if system in registered:
                done.append(f"{path}: {system} already configured, left as is")
                continue
            if gpus is None:
                classes = stub_classes(system, benchmark, scenario)
                what = f"added {system} and {system}_HighAccuracy (starting values of a machine without GPUs)"
            else:
                model, count = gpus
                classes = model_subclasses(system, scenario, model_classes_of(model, benchmark, scenario), count)
                what = f"added {system} and its variants, derived from {model.name}'s classes"
            if not dry_run:
                before = path.read_text() if path.exists() else None
                text = (HEADER + import_block(benchmark, scenario) if before is None
                        else with_imports(before, path, benchmark, scenario))
                text += classes
                compile(text, str(path), "exec")  # a SyntaxError here is a bug in the stubs: nothing is written
                atomic.write_text(path, text)
                previous[path] = before
            done.append(f"{path}: {what}")
        # Make sure what was written imports, validates (the registry checks every field) and is the system's own.
        for scenario in Scenario:
            if dry_run:
                break
            ConfigRegistry.reload_custom(benchmark, scenario)
            config = ConfigRegistry.get(benchmark, scenario, system, WorkloadSetting())
            if config.system_name() != system:
                raise ConfigError(f"{system}'s class in configs/{benchmark.package}/{scenario.value}/custom.py did "
                                  f"not register (the system resolves to {config.__name__}); check that file")
    except Exception:
        for path, before in previous.items():
            if before is None:
                path.unlink(missing_ok=True)
            else:
                atomic.write_text(path, before)
        raise
    return done


def system_description(detected: DetectedSystem, system: str) -> dict[str, object]:
    """A new system's JSON: what detection knows, the facts every system of this harness shares, and "" for the
    fields the checker wants present but not answered. Nothing a person must answer is guessed."""
    known: dict[str, object] = {
        "division": "closed",
        "system_name": system,
        "number_of_nodes": "1",
        # The one type both rounds accept for BERT and GPT-J on a GPU (documentation/adding_a_system.md).
        "system_type": "datacenter,edge" if detected.gpus else "edge",
        "system_type_detail": "N/A",
        **detected_fields(detected),
    }
    blank = {name: "" for name in REQUIRED_FIELDS if name not in MEANINGFUL_FIELDS}
    return {name: known.get(name, blank.get(name)) for name in REQUIRED_FIELDS
            if name in known or name in blank}


def user_values(description: dict[str, Any], detected: dict[str, str], user: dict[str, Any],
                submitter: str | None) -> dict[str, Any]:
    """The user file: its non-null values kept; every other field the description lacks or leaves empty, filled
    from detection where it answers, else null (asked of a person)."""
    values = {name: value for name, value in user.items() if value is not None}
    for name in REQUIRED_FIELDS:
        if name in values:
            continue
        present = description.get(name)
        if present is None or (name in MEANINGFUL_FIELDS and not str(present).strip()):
            values[name] = detected.get(name)
    if submitter:
        values["submitter"] = submitter
    return {name: values[name] for name in REQUIRED_FIELDS if name in values}


def write_description(detected: DetectedSystem, system: str, submitter: str | None, dry_run: bool) -> list[str]:
    """Write systems/<system>.json if missing and update systems/<system>.user.json; returns what was done."""
    files = DescriptionFiles.of(system)
    wrote = "would write" if dry_run else "wrote"
    done = []
    if files.base.exists():
        done.append(f"{files.base} exists, left as is")
        base = read_json_object(files.base)
        said = base.get("host_processor_model_name")
        if system == detected.name and said and detected.cpu_model and said != detected.cpu_model:
            done.append(f"warning: this machine's CPU is {detected.cpu_model!r}, {files.base.name} says {said!r}: "
                        f"if you submit from this machine, set the host_* fields in {files.user}")
    else:
        base = system_description(detected, system)
        if not dry_run:
            files.base.write_text(json.dumps(base, indent=2) + "\n")
        done.append(f"{wrote} {files.base}")
    user = read_json_object(files.user) if files.user.exists() else {}
    values = user_values(base, detected_fields(detected), user, submitter)
    if not dry_run:
        files.user.write_text(json.dumps(values, indent=2) + "\n")
    done.append(f"{wrote} {files.user} ({sum(v is None for v in values.values())} values to fill in)")
    return done


def no_gpu_warning(system: str) -> str:
    """What a system named on a machine without GPUs gets, and how to name its GPUs instead: the name alone cannot
    say whether the system is meant to have some."""
    return (f"warning: {system} is written as a machine without GPUs (CPU stubs; accelerators_per_node 0 in its "
            f"description): this machine has none, and none was named. For a system of GPUs: make add_system "
            f"SYSTEM={system} GPU_MODEL=<model> GPU_COUNT=<count> (--gpu_model/--gpu_count; models: "
            f"{', '.join(model_names())}), or a name <model>x<count>")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system_name", help="name to use instead of the detected one")
    parser.add_argument("--benchmarks", default="bert,gptj", help="comma list (default: bert,gptj)")
    parser.add_argument("--submitter", default=os.environ.get(SUBMITTER_ENV),
                        help="your organization, as the submission names it (default: $SUBMITTER)")
    parser.add_argument("--gpu_model", help="the system's GPU model where the name does not say it (MyBox) or it is "
                        "added from another machine; one of code/common/gpu_models.py's")
    parser.add_argument("--gpu_count", type=int, help="the system's GPU count with --gpu_model (default: the name's, "
                        "else 1)")
    parser.add_argument("--dry_run", action="store_true", help="say what would be written, write nothing")
    args = parser.parse_args(argv)
    if args.system_name is not None and (problem := system_name_problem(args.system_name)):
        parser.error(problem)  # before detection and before anything is written
    try:  # before detection and before anything is written, as the name is
        benchmarks = [Benchmark.parse(name)[0] for name in args.benchmarks.split(",")]
    except ChoiceError as error:
        parser.error(f"--benchmarks={args.benchmarks}: {error}")
    detected = detect_system()
    system = args.system_name or detected.name
    if problem := system_name_problem(system):
        parser.error(f"{problem} (the detected name; give one with --system_name)")
    print(f"[add_system] this machine: {json.dumps(detected.describe())}")
    try:
        gpus = target_gpus(system, detected, args.gpu_model, args.gpu_count)
        if gpus is None:
            print(f"[add_system] system: {system}, no GPU")
            if system != CPU_SYSTEM:
                print(no_gpu_warning(system), file=sys.stderr)
        else:
            model, count = gpus
            system_gpus = as_detected(detected, model, count)
            here = "this machine's" if system_gpus is detected else "as named, not this machine's GPUs"
            print(f"[add_system] system: {system}, {count}x {model.name} ({model.describe()}; {here})")
            detected = system_gpus
        for benchmark in benchmarks:
            for line in add_configs(system, benchmark, gpus, args.dry_run):
                print(f"[add_system] {line}")
    except ConfigError as error:  # a custom.py broken before this run (a hand edit), or GPUs that do not add up
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    for line in write_description(detected, system, args.submitter, args.dry_run):
        print(f"[add_system] {line}")
    if not args.dry_run:
        problems = description_problems(load_description(system, submitter=args.submitter), DescriptionFiles.of(system))
        for problem in problems:
            print(f"[add_system] to fill in before submitting: {problem}")
        print("[add_system] `make check_system_json` checks the description as the submission checker will")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
