"""What a resolution produces: workload settings, the resolved config, where each value comes from, and the errors
that name a fix.

One rule orders a run's settings: RUN_ARGS > tuned > rung > config class > field default. A tuned value was measured
on this very machine, so it sits above the class, and below RUN_ARGS so a flag always wins. Code that reads a
resolved config depends on this module and the fields alone, never on the classes under ``configs/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.log import get_logger
from code.config.fields import FIELDS, FieldError
from code.config.ladder import Ladder, Rung

# The layers of a resolution, lowest first: each lays its values over those below it.
LAYERS = ("default", "class", "rung", "tuned", "RUN_ARGS")


class ConfigError(ValueError):
    """A config class that breaks the rules, or a lookup that finds no config; the message names the fix."""


class NoEngineError(ConfigError):
    """A GPU that runs no engine of a config's ladder; ``skipped``: each engine with why."""

    def __init__(self, message: str, skipped: tuple[tuple[str, str], ...]) -> None:
        super().__init__(message)
        self.skipped = skipped


@dataclass(frozen=True)
class WorkloadSetting:
    """Which variant of a benchmark's config: harness, accuracy target, power setting."""

    harness_type: HarnessType = HarnessType.Custom
    accuracy_target: AccuracyTarget = AccuracyTarget.k_99
    power_setting: PowerSetting = PowerSetting.MaxP

    def shortname(self) -> str:
        """e.g. ``custom_k_99_MaxP``: used in engine folders and logs, like NVIDIA's config_ver."""
        return f"{self.harness_type.value}_{self.accuracy_target.name}_{self.power_setting.value}"


@dataclass
class ResolvedConfig:
    """Every applicable field's final value and where it came from."""

    benchmark: Benchmark
    scenario: Scenario
    system: str
    workload: WorkloadSetting
    config_class: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    # What a tuned value replaced: field -> (the config class's or default value, its source).
    replaced: dict[str, tuple[Any, str]] = field(default_factory=dict)
    ladder: Ladder = ()  # the class's engine ladder as the system's GPU runs it; () when it pins its engine
    skipped: tuple[tuple[str, str], ...] = ()  # the ladder's rungs the system's GPU cannot run: (name, why)
    rung: Rung | None = None  # the rung whose values the config holds; None: no ladder, or RUN_ARGS name no rung
    engine_given: tuple[str, ...] = ()  # the ladder's engine fields RUN_ARGS give: they skip the ladder and its gate
    # Which engine the run uses and why, for metadata.json and the summary: set by the accuracy gate, which alone
    # knows what the accuracy runs decided.
    engine_choice: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, str] = field(default_factory=dict)  # field -> the layer of ``LAYERS`` its value came from
    # The share of the system's GPUs --devices names, by which the whole-system rate was scaled
    device_share: float = 1.0

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def benchmark_name(self) -> str:
        """bert-99, bert-99.9, llama3.1-8b: the name a submission uses."""
        return self.benchmark.submission_name(self.workload.accuracy_target)

    def run_args(self) -> str:
        """RUN_ARGS that resolve this config again, so a message's command can be pasted as it is."""
        given = [f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
                 for name, value in sorted(self.values.items()) if self.sources.get(name) == "RUN_ARGS"]
        return " ".join([f"--benchmarks={self.benchmark_name}", f"--scenarios={self.scenario.value.lower()}", *given])

    def as_dict(self) -> dict[str, Any]:
        """The config as metadata.json and ``make info`` record it."""
        return {
            "benchmark": self.benchmark_name,
            "scenario": self.scenario.value,
            "system": self.system,
            "workload": self.workload.shortname(),
            "config_class": self.config_class,
            "fields": dict(sorted(self.values.items())),
            "sources": dict(sorted(self.sources.items())),
            **({"engine_ladder": [rung.name for rung in self.ladder],
                "rung": self.rung.name if self.rung else None} if self.ladder else {}),
        }


@dataclass(frozen=True)
class Provenance:
    """Where one resolved value comes from."""

    name: str
    value: Any
    layer: str  # one of LAYERS
    source: str  # the class, rung, tuned file or flag, with the system scaling it went through
    replaced: tuple[Any, str] | None = None  # a tuned value's: the value below it and its source

    def __str__(self) -> str:
        text = f"{self.name} = {self.value!r}: {self.layer}, {self.source}"
        if self.replaced is not None:
            text += f" (over {self.replaced[0]!r} from {self.replaced[1]})"
        return text


def where_from(config: ResolvedConfig, name: str) -> Provenance:
    """Where the value of field ``name`` comes from: the one answer `make info` and an error give."""
    if name not in config.values:
        raise KeyError(f"{name} is not a field of {config.benchmark_name} {config.scenario.value}")
    return Provenance(name, config.values[name], config.layers.get(name, "default"), config.sources[name],
                      config.replaced.get(name))


def check_run_args_used(overrides: Mapping[str, Any], configs: Sequence[ResolvedConfig],
                        all_scenarios: bool = False) -> None:
    """Refuse a field RUN_ARGS give that no test of the run reads: a flag that silently does nothing (``--fp8_gemms``
    for GPT-J) leaves a submitter believing a run measured what it did not. One test reading it is enough. A switch
    set to its default is a reset (it clears a class's value meant for another backend) and passes. With
    ``--scenarios=all`` a field of a scenario the system's type does not run is only noted: one command serves every
    system type."""
    if not configs:
        return
    run = ", ".join(dict.fromkeys(f"{config.benchmark_name} {config.scenario.value}" for config in configs))
    for name, value in overrides.items():
        fld = FIELDS[name]
        holding = [config for config in configs if name in config.values]
        if any(fld.used_by(config.benchmark, config["backend"]) for config in holding):
            continue
        flag = f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
        if holding:
            if value == fld.default:
                continue
            benchmarks = {config.benchmark for config in holding}
            owners = list(dict.fromkeys(backend for benchmark, backend in fld.owners if benchmark in benchmarks))
            used = ", ".join(dict.fromkeys(config["backend"] for config in holding))
            raise FieldError(f"{flag} is an option of the {' and '.join(owners)} backend, not of {used}: set "
                             f"--backend={owners[0]}, or leave --{name} out")
        if not any(fld.benchmarks is None or config.benchmark in fld.benchmarks for config in configs):
            whose = (f"the {fld.owner_text()} backend" if fld.owners
                     else ", ".join(benchmark.value for benchmark in fld.benchmarks or ()))
            raise FieldError(f"--{name} is an option of {whose}, and this run has {run}: leave --{name} out")
        scenarios = ", ".join(scenario.value for scenario in fld.scenarios or ())
        if all_scenarios:
            get_logger("config").warning("--%s applies to %s only, and --scenarios=all runs %s on this system: no "
                                         "test reads it", name, scenarios, run)
            continue
        raise FieldError(f"--{name} applies to {scenarios} only, and this run has {run}: leave --{name} out, or add "
                         f"the scenario (--scenarios={(fld.scenarios or (Scenario.Offline,))[0].value.lower()})")
