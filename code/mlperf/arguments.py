"""RUN_ARGS: the command line of ``python -m code.main``.

Main arguments choose what to run (action, benchmarks, scenarios, workload, system); every config field can also be
given as ``--field=value`` and then overrides the config. Anything unknown or malformed is an error that lists the valid
choices, so a typo never silently runs the wrong thing.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass, field
from typing import Any

from code.common.constants import (
    CONFIG_VER_TO_ACCURACY,
    AccuracyTarget,
    Benchmark,
    ChoiceError,
    HarnessType,
    PowerSetting,
    Scenario,
    choice_error,
    closest,
)
from code.config.backends import declarations
from code.config.fields import FIELDS, FieldError
from code.mlperf.audits import AUDIT_TESTS, AuditError, parse_audit_tests

ACTIONS = ("generate_engines", "run_harness", "run", "info", "run_audit")
# Every spelling Benchmark.parse accepts, so help and errors never fall behind a new benchmark.
BENCHMARK_NAMES = list(dict.fromkeys([b.value for b in Benchmark] + [b.submission_name(t) for b in Benchmark
                                                                     for t in b.accuracy_targets]))
# --scenarios=all: every scenario the round accepts for each benchmark on the system (code/tuning/plans.py).
SCENARIOS_ALL = "all"
SCENARIO_NAMES = [s.value.lower() for s in Scenario]
MAIN_ARGUMENTS = {
    "action": "what to do: " + ", ".join(ACTIONS),
    "benchmarks": "comma list: " + ", ".join(BENCHMARK_NAMES),
    "scenarios": f"comma list: {', '.join(SCENARIO_NAMES)} (case-insensitive), or {SCENARIOS_ALL}: every scenario "
                 "the round accepts for each benchmark on this system's type (systems/<system>.json's "
                 "system_type; all three where it says none)",
    "accuracy_target": "0.99 or 0.999 (bert-99.9 in --benchmarks sets 0.999 too)",
    "config_ver": "legacy, comma list: default (= 0.99), high_accuracy (= 0.999), all (= both: each benchmark "
                  "at both targets)",
    "harness_type": "custom (our C++ core)",
    "power_setting": "MaxP or MaxQ",
    "system_name": "use this system's configs instead of the detected one",
    "audit_test": f"run_audit: comma list of {', '.join(AUDIT_TESTS)}",
    "audit_results_dir": "run_audit: the SubmissionRun <Scenario> folder to verify against",
}
# Main arguments that are switches: a bare --name means true, as for boolean config fields.
MAIN_SWITCHES = {
    "verbose": "the harness's debug messages too (Python logging at DEBUG; without it: INFO and above)",
    "find_performance": "run/run_harness: measure this system instead of one test: Offline expected QPS, Server "
                        "highest VALID target QPS, SingleStream expected latency, stored in build/tuned/ for later "
                        "runs (also make find_performance; documentation/performance_tuning_guide.md)",
    "check_args": "check RUN_ARGS and say what the run would do (tests, mode, estimated time), then stop; the make "
                  "targets that run tests do this before building the C++ core",
}
# What a main argument or switch means when RUN_ARGS leave it out: parse_run_args uses these, --help shows them and
# the plan a run announces names those a run took by default (one table, so the three never disagree).
MAIN_DEFAULTS: dict[str, str] = {
    "action": "run",
    "benchmarks": "bert",
    "scenarios": "offline",
    "accuracy_target": "0.99",
    "config_ver": "unset: --accuracy_target decides",
    "harness_type": "custom",
    "power_setting": "MaxP",
    "system_name": "the detected system",
    "audit_test": "every test the round requires",
    "audit_results_dir": "the newest SubmissionRun in build/logs",
    "verbose": "false",
    "find_performance": "false",
    "check_args": "false",
}
# NVIDIA's harness flags that mean what one of ours means: the value goes to our field, and "given twice" counts
# both spellings as one flag.
ALIASES = {
    "fast": "test_run",  # NVIDIA's name of --test_run before v4.1
    "use_graphs": "cuda_graphs",
    # NVIDIA's inference streams per GPU: here each worker thread drives the backend with a stream of its own.
    "gpu_inference_streams": "num_workers",
}
# NVIDIA flags with no same-meaning field here: (what it does there, what to do here instead). Refused with the
# equivalent named, rather than with the list of every flag, so a habit costs one try.
NVIDIA_ONLY_FLAGS = {
    "gpu_copy_streams": (
        "NVIDIA's count of host-to-device copy streams per GPU",
        "here no stream only copies: each batcher worker copies its batch on the stream it runs it on (on BERT's "
        "packed path, a stream of its own), so --num_workers=N (NVIDIA's --gpu_inference_streams) sets how many "
        "copies overlap; give that instead"),
    "power": (
        "NVIDIA's run under a power meter (MLPerf's power tools)",
        "this harness runs under no power meter; it reads the GPUs' own power through NVML in every performance "
        "test, unasked (the summary's power line): leave --power out (--power_setting=MaxQ picks a system's MaxQ "
        "config classes, where it has some)"),
    "force_calibration": (
        "NVIDIA's calibration run even when a calibration cache exists",
        "here FP8 calibration is part of building an FP8 engine: remove its folder under build/engines/<system>/ "
        "(make generate_engines names it), then run make generate_engines RUN_ARGS=\"...\" with this run's "
        "RUN_ARGS"),
}
# NVIDIA's --config_ver=all: every workload of the benchmark; here, each accuracy target.
CONFIG_VER_ALL = "all"


class ArgumentError(ValueError):
    """A bad RUN_ARGS entry; the message says which and what is valid."""


@dataclass(frozen=True)
class BenchmarkRequest:
    benchmark: Benchmark
    accuracy_target: AccuracyTarget

    @property
    def name(self) -> str:
        """bert-99, bert-99.9, llama3.1-8b: the name a round's tables and a submission use."""
        return self.benchmark.submission_name(self.accuracy_target)


@dataclass
class RunRequest:
    """Parsed RUN_ARGS: what to run and which fields to override."""

    action: str
    benchmarks: list[BenchmarkRequest]
    scenarios: list[Scenario]
    harness_type: HarnessType = HarnessType.Custom
    power_setting: PowerSetting = PowerSetting.MaxP
    system_name: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    audit_tests: list[str] = field(default_factory=list)  # empty: every test the round requires
    audit_results_dir: str | None = None
    verbose: bool = False
    find_performance: bool = False
    check_args: bool = False
    # --scenarios=all: ``scenarios`` holds all three until the system is known (code/tuning/plans.py's scenarios_of).
    all_scenarios: bool = False
    defaulted: tuple[str, ...] = ()  # the main arguments RUN_ARGS left out, so the run took MAIN_DEFAULTS' value


TRUE_WORDS = ("1", "true", "yes", "on")
BOOL_WORDS = (*TRUE_WORDS, "0", "false", "no", "off")


def _join_space_form(argv: list[str]) -> list[str]:
    """``--benchmarks bert`` -> ``--benchmarks=bert``; a switch takes the next token only when a boolean word."""
    tokens, rest = [], list(argv)
    while rest:
        token = rest.pop(0)
        if token.startswith("--") and "=" not in token and rest and not rest[0].startswith("--"):
            name = ALIASES.get(token[2:].replace("-", "_"), token[2:].replace("-", "_"))
            takes_value = name in MAIN_ARGUMENTS or (name in FIELDS and FIELDS[name].type is not bool)
            if takes_value or rest[0].strip().lower() in BOOL_WORDS:
                token = f"{token}={rest.pop(0)}"
        tokens.append(token)
    return tokens


def _unknown_flag(name: str) -> ArgumentError:
    valid = sorted(list(MAIN_ARGUMENTS) + list(MAIN_SWITCHES) + list(FIELDS) + list(ALIASES))
    guess = closest(name, valid)
    hint = f" (did you mean --{guess}?)" if guess else ""
    return ArgumentError(f"unknown flag --{name}{hint}; valid flags: {', '.join('--' + v for v in valid)}")


# The make variables that pass a flag before RUN_ARGS (make/const.mk, make/run.mk).
MAKE_VARIABLES = {"round": "ROUND", "log_dir": "LOG_DIR"}


def _passed_by_make(name: str, first: str | None, second: str | None) -> str:
    """The end of the "given twice" error where make passed one value: the user typed ROUND=, not --round."""
    variable = MAKE_VARIABLES.get(name)
    value = os.environ.get(variable or "")
    if variable is None or "MAKELEVEL" not in os.environ or value not in (first, second):
        return ""
    return f": make's {variable}={value} passes --{name}={value} along with RUN_ARGS; give it once, as {variable}= " \
        f"or as --{name} in RUN_ARGS"


def parse_run_args(argv: list[str]) -> RunRequest:
    """Parse ``--name=value`` or ``--name value`` tokens (a bare switch or boolean field means true)."""
    main: dict[str, str] = {}
    switches: dict[str, bool] = {}
    overrides: dict[str, Any] = {}
    given: dict[str, str | None] = {}
    spelled: dict[str, str] = {}  # our name -> the spelling first given (an alias or ours)
    for token in _join_space_form(argv):
        if not token.startswith("--"):
            raise ArgumentError(f"expected --name=value (or --name value), got '{token}'")
        typed, sep, value = token[2:].partition("=")
        typed, value = typed.replace("-", "_"), (value if sep else None)
        if typed in NVIDIA_ONLY_FLAGS:
            meaning, instead = NVIDIA_ONLY_FLAGS[typed]
            raise ArgumentError(f"--{typed} is {meaning}; {instead}")
        name = ALIASES.get(typed, typed)
        if name in given and given[name] != value:
            # make passes ROUND as --round before RUN_ARGS: two different values must not silently pick one.
            both = f"--{name}" if spelled[name] == typed else f"--{name} (as --{spelled[name]} and --{typed})"
            fix = _passed_by_make(name, given[name], value) or "; give it once"
            raise ArgumentError(f"{both} is given twice ({given[name]} and {value}){fix}")
        given[name] = value
        spelled.setdefault(name, typed)
        if name in MAIN_ARGUMENTS:
            if value is None or value == "":
                raise ArgumentError(f"--{name} needs a value: {MAIN_ARGUMENTS[name]}")
            main[name] = value
        elif name in MAIN_SWITCHES:
            if value not in (None, "") and value.strip().lower() not in BOOL_WORDS:
                raise ArgumentError(f"--{name}={value}: expected true or false ({MAIN_SWITCHES[name]})")
            switches[name] = value in (None, "") or value.strip().lower() in TRUE_WORDS
        elif name in FIELDS:
            fld = FIELDS[name]
            if value is None and fld.type is not bool:
                raise ArgumentError(f"--{name} needs a value ({fld.description})")
            try:
                overrides[name] = fld.parse("" if value is None else value)
            except FieldError as error:
                raise ArgumentError(str(error)) from None
        else:
            raise _unknown_flag(name)

    try:
        action = main.get("action", MAIN_DEFAULTS["action"])
        if action not in ACTIONS:
            raise choice_error("action", action, list(ACTIONS))
        for name in ("audit_test", "audit_results_dir"):
            if name in main and action != "run_audit":
                raise ArgumentError(f"--{name} applies to audits only: make run_audit_harness (--action=run_audit)")
        if switches.get("find_performance"):
            _check_find_performance(action, overrides)
        targets = _accuracy_targets(main)
        benchmarks = []
        for text in _comma_list(main.get("benchmarks", MAIN_DEFAULTS["benchmarks"])):
            benchmark, suffix_target = Benchmark.parse(text)
            if suffix_target and targets and suffix_target not in targets:
                raise ArgumentError(f"--benchmarks={text} asks for {suffix_target.value} but --accuracy_target/"
                                    f"--config_ver asks for {', '.join(str(t.value) for t in targets)}")
            for target in [suffix_target] if suffix_target else targets or [AccuracyTarget.k_99]:
                request = BenchmarkRequest(benchmark, target)
                if request not in benchmarks:
                    benchmarks.append(request)
        scenario_names = _comma_list(main.get("scenarios", MAIN_DEFAULTS["scenarios"]))
        all_scenarios = any(text.strip().lower() == SCENARIOS_ALL for text in scenario_names)
        scenarios = list(Scenario) if all_scenarios else list(dict.fromkeys(map(_parse_scenario, scenario_names)))
        return RunRequest(
            action=action,
            benchmarks=benchmarks,
            scenarios=scenarios,
            harness_type=HarnessType.parse(main.get("harness_type", MAIN_DEFAULTS["harness_type"])),
            power_setting=PowerSetting.parse(main.get("power_setting", MAIN_DEFAULTS["power_setting"])),
            system_name=main.get("system_name"),
            overrides=overrides,
            audit_tests=parse_audit_tests(main["audit_test"]) if "audit_test" in main else [],
            audit_results_dir=main.get("audit_results_dir"),
            verbose=switches.get("verbose", False),
            find_performance=switches.get("find_performance", False),
            check_args=switches.get("check_args", False),
            all_scenarios=all_scenarios,
            defaulted=tuple(name for name in MAIN_ARGUMENTS if name not in main),
        )
    except (ChoiceError, AuditError) as error:
        raise ArgumentError(str(error)) from None


def _parse_scenario(text: str) -> Scenario:
    try:  # an unknown scenario gets the nearest, and the list with ``all``
        return Scenario.parse(text)
    except ChoiceError:
        raise choice_error("scenario", text, [*SCENARIO_NAMES, SCENARIOS_ALL]) from None


def _check_find_performance(action: str, overrides: dict[str, Any]) -> None:
    """--find_performance measures with PerformanceOnly tries, in a run: refuse what contradicts it."""
    if action not in ("run", "run_harness"):
        raise ArgumentError(f"--find_performance runs tests, so it goes with make run or make find_performance, not "
                            f"--action={action}")
    mode = overrides.get("test_mode")
    if mode is not None and str(mode).lower() != "performanceonly":
        raise ArgumentError(f"--find_performance measures performance, but --test_mode={mode} asks for "
                            f"{'an accuracy run' if str(mode).lower() == 'accuracyonly' else 'a submission run'}: "
                            "drop --test_mode (the search runs PerformanceOnly tries), then run that test on its own "
                            f"with make run RUN_ARGS=\"... --test_mode={mode}\" (it uses the tuned values)")
    devices = overrides.get("devices", "all")
    if devices == "all" and ":" in str(overrides.get("device", "")):
        devices = str(overrides["device"])
    if devices != "all":
        # A tuned value is the system's (a run on fewer GPUs expects its share of it), so it is measured on all.
        given = f"--devices={devices}" if "devices" in overrides else f"--device={devices}"
        raise ArgumentError(f"--find_performance stores values for the whole system, so it runs on every GPU: drop "
                            f"{given} (CUDA_VISIBLE_DEVICES makes a smaller system, with tuned values "
                            "of its own)")


def _comma_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ArgumentError(f"empty list '{text}'")
    return items


def _accuracy_targets(main: dict[str, str]) -> list[AccuracyTarget]:
    """The targets asked for, in order (empty: none said); ``--config_ver`` may list several, NVIDIA-style."""
    target = AccuracyTarget.parse(main["accuracy_target"]) if "accuracy_target" in main else None
    if "config_ver" not in main:
        return [target] if target else []
    targets: list[AccuracyTarget] = []
    # ``all`` stands for every config_ver, in their order, wherever it is in the list.
    for config_ver in [each for name in _comma_list(main["config_ver"])
                       for each in (CONFIG_VER_TO_ACCURACY if name == CONFIG_VER_ALL else [name])]:
        if config_ver not in CONFIG_VER_TO_ACCURACY:
            raise choice_error("config_ver", config_ver, [*CONFIG_VER_TO_ACCURACY, CONFIG_VER_ALL])
        legacy = CONFIG_VER_TO_ACCURACY[config_ver]
        if target and legacy is not target:
            raise ArgumentError(f"--config_ver={config_ver} contradicts --accuracy_target={target.value}")
        if legacy not in targets:
            targets.append(legacy)
    return targets


# --help: flags in groups, each line within HELP_WIDTH columns (a terminal's or a pasted page's), names in a column.
HELP_WIDTH = 100
NAME_COLUMN = 30
MAIN_GROUPS = (
    ("What to run", ("action", "benchmarks", "scenarios", "accuracy_target", "config_ver", "harness_type",
                     "power_setting", "system_name", "verbose", "find_performance", "check_args")),
    ("Compliance audits (make run_audit_harness)", ("audit_test", "audit_results_dir")),
)
# The config fields by what they set; the last group, apart, holds what exists to test the harness itself. A field in
# no group still shows, under OTHER_FIELDS (a test keeps that group empty); backends' switches: ``field_groups``.
FIELD_GROUPS = (
    ("Model, data and device", ("round", "backend", "precision", "model_name", "weights", "input_data", "device",
                                "devices", "gpu_as", "cpu_threads", "num_beams", "seed", "synthetic_sample_count",
                                "synthetic_lengths")),
    ("Batching (the C++ core)", ("gpu_batch_size", "num_workers", "sort_by_length", "batch_timeout_us")),
    ("LoadGen (written to user.conf)", ("test_mode", "test_run", "offline_expected_qps", "server_target_qps",
                                        "single_stream_expected_latency_ns", "min_duration", "max_duration",
                                        "min_query_count", "max_query_count", "performance_sample_count_override",
                                        "num_samples")),
    ("Logs", ("log_dir", "log_enable_trace")),
    ("Several nodes (documentation/cluster.md)", ("cluster", "cluster_host", "cluster_port",
                                                  "cluster_ready_timeout_s")),
    ("Test-only: for testing the harness, not for a benchmark run", ("cpu_workers", "synthetic_length_scale")),
)
OTHER_FIELDS = "Other fields"


def _help_entry(flag: str, text: str) -> list[str]:
    """A flag's name in the first column, its text wrapped beside it (below it when the name is long)."""
    head, indent = f"  {flag}", " " * NAME_COLUMN
    above = [head] if len(head) + 2 > NAME_COLUMN else []
    return above + textwrap.wrap(text, HELP_WIDTH, initial_indent=indent if above else head.ljust(NAME_COLUMN),
                                 subsequent_indent=indent, break_on_hyphens=False)


def _field_text(name: str) -> str:
    """What a field accepts, what it does and its default (unless its description says it)."""
    fld = FIELDS[name]
    text = f"{fld.accepted()}. {fld.description}"
    if len(fld.owners) > 1:  # listed under its first backend: say which others read it
        text += f" (read by the {fld.owner_text()} backends)"
    return text if "(default" in fld.description else f"{text} (default: {fld.default_text()})"


def field_groups() -> list[tuple[str, list[str]]]:
    """The fields as --help shows them, every field once: FIELD_GROUPS, each backend's switches under the first
    backend that declares it, before the test-only group (an oracle's in it), the rest under OTHER_FIELDS."""
    grouped = {name for _, names in FIELD_GROUPS for name in names}
    *harness, (test_title, test_only) = [(title, [name for name in names if name in FIELDS])
                                         for title, names in FIELD_GROUPS]
    backends: list[tuple[str, list[str]]] = []
    oracles: list[str] = []
    for benchmark in Benchmark:
        for declared in declarations(benchmark):
            names = [switch.name for switch in declared.switches if switch.name not in grouped]
            grouped.update(names)
            if not declared.runs_model:
                oracles += names
            elif names:
                backends.append((f"Switches of the {benchmark.value} {declared.name} backend", names))
    others = [name for name in FIELDS if name not in grouped]
    return [*harness, *backends, (test_title, test_only + oracles)] + ([(OTHER_FIELDS, others)] if others else [])


def format_help() -> str:
    """``--help``: usage, exit statuses, the flags in groups, NVIDIA's spellings last."""
    lines = [
        "usage: python -m code.main --action=ACTION [RUN_ARGS...]   (make run RUN_ARGS=\"...\")",
        "",
        "Each flag is --name=value or --name value; a bare switch (--test_run, --verbose) means true.",
        "Exit status: 0 every test VALID or PASS; 1 a test did not finish; 2 bad input, refused before",
        "anything ran; 3 a test INVALID or FAIL (documentation/commands.md).",
    ]
    for title, names in MAIN_GROUPS:
        lines += ["", f"{title}:"]
        for name in names:
            text = MAIN_ARGUMENTS.get(name) or MAIN_SWITCHES[name]
            lines += _help_entry(f"--{name}", f"{text} (default: {MAIN_DEFAULTS[name]})")
    lines += ["", *textwrap.wrap("Config fields override the config class (RUN_ARGS > tuned > rung > config > "
                                 "default); each says what it accepts and its own default, which a config class "
                                 "may replace (make info RUN_ARGS=\"...\" shows the values a run resolves).",
                                 HELP_WIDTH)]
    for title, names in field_groups():
        lines += ["", f"{title}:"]
        for name in names:
            lines += _help_entry(f"--{name}", _field_text(name))
    lines += ["", "NVIDIA harness spellings:"]
    for alias, name in ALIASES.items():
        lines += _help_entry(f"--{alias}", f"= --{name}")
    lines += _help_entry(f"--config_ver={CONFIG_VER_ALL}", f"= --config_ver={','.join(CONFIG_VER_TO_ACCURACY)}")
    for name, (_, instead) in NVIDIA_ONLY_FLAGS.items():
        lines += _help_entry(f"--{name}", f"refused: {instead}")
    lines += [""] + textwrap.wrap(
        "A value outside what a field accepts, or a combination the benchmark cannot run (a sample count below "
        "the benchmark's, a backend it lacks), stops the run before anything starts or is written (exit status 2).",
        HELP_WIDTH)
    return "\n".join(lines)
