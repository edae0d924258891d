"""Configuration as plain classes: a registry keyed by benchmark, scenario, system and workload.

A config is a class whose attributes are settings (fields from ``code/common/fields.py``); a variant is a
subclass. ``@ConfigRegistry.register(HarnessType, AccuracyTarget, PowerSetting)`` validates the class when its
module is imported, so a misspelt field or a missing required one fails at once, naming the class and field.
``resolve_config`` looks a class up and hands its fields to ``code.common.config.resolve_fields``, which holds
the one precedence rule (RUN_ARGS > config class > field default) and the resolved config it makes. This module
imports from ``code/common`` and never the reverse: code/common knows fields, not the classes that set them.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, ClassVar

from code.common.config import ConfigError, ResolvedConfig, WorkloadSetting, resolve_fields
from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.fields import FIELDS, FieldError
from code.common.paths import REPO_ROOT
from code.common.tuned import tuned_fields

# ConfigError, ResolvedConfig and WorkloadSetting live in code/common/config.py; they are named here too because
# config files and NVIDIA-style readers look for them beside the registry.
__all__ = ["BenchmarkConfiguration", "ConfigError", "ConfigRegistry", "ResolvedConfig", "WorkloadSetting",
           "resolve_config", "validate_config_class"]

# Class attributes that identify a config rather than set a field.
IDENTITY_ATTRIBUTES = ("benchmark", "scenario", "system")
# Suffixes of variant classes: H100_SXM_80GBx1_HighAccuracy configures system H100_SXM_80GBx1.
VARIANT_SUFFIX = re.compile(r"(_HighAccuracy|_MaxQ|_MaxP)+$")


class _NoReassignNamespace(dict):
    """Class-body namespace that refuses a second assignment to the same field name."""

    def __init__(self, class_name: str) -> None:
        super().__init__()
        self.class_name = class_name

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self and key in FIELDS:
            raise ConfigError(f"config class {self.class_name}: field '{key}' is set twice")
        super().__setitem__(key, value)


class _ConfigMeta(type):
    @classmethod
    def __prepare__(mcs, name: str, bases: tuple, **kwargs: Any) -> dict:  # noqa: ANN001
        return _NoReassignNamespace(name)

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **kwargs: Any):  # noqa: ANN001, ANN204
        return super().__new__(mcs, name, bases, dict(namespace), **kwargs)


class BenchmarkConfiguration(metaclass=_ConfigMeta):
    """Base of every config class. Subclasses set ``benchmark``, ``scenario`` and fields as class attributes."""

    benchmark: ClassVar[Benchmark | None] = None
    scenario: ClassVar[Scenario | None] = None
    system: ClassVar[str | None] = None  # default: the class name without variant suffixes

    @classmethod
    def fields(cls) -> dict[str, Any]:
        """The field values this class sets, its own and inherited (nearest class wins)."""
        return {key: value for key, (value, _) in cls.field_origins().items()}

    @classmethod
    def field_origins(cls) -> dict[str, tuple[Any, str]]:
        """Each field's value and the name of the class that set it, so `make info` can say where it came from."""
        origins: dict[str, tuple[Any, str]] = {}
        for klass in reversed(cls.__mro__):
            for key, value in vars(klass).items():
                if key in FIELDS:
                    origins[key] = (value, klass.__name__)
        return origins

    @classmethod
    def system_name(cls) -> str:
        return cls.system or VARIANT_SUFFIX.sub("", cls.__name__)


RegistryKey = tuple[Benchmark, Scenario, str, WorkloadSetting]


class ConfigRegistry:
    """All registered config classes, filled as configs/<bench>/<Scenario>/ modules are imported."""

    _classes: ClassVar[dict[RegistryKey, type[BenchmarkConfiguration]]] = {}

    @classmethod
    def register(
        cls,
        harness_type: HarnessType,
        accuracy_target: AccuracyTarget,
        power_setting: PowerSetting,
    ):  # noqa: ANN206 - a decorator factory
        """Validate a config class and file it under (benchmark, scenario, system, workload)."""
        workload = WorkloadSetting(harness_type, accuracy_target, power_setting)

        def decorator(config: type[BenchmarkConfiguration]) -> type[BenchmarkConfiguration]:
            validate_config_class(config)
            key = (config.benchmark, config.scenario, config.system_name(), workload)
            if key in cls._classes:
                other = cls._classes[key]
                raise ConfigError(
                    f"config class {config.__name__} registers {key[2]} {workload.shortname()} for "
                    f"{config.benchmark.value}/{config.scenario.value}, already registered by {other.__name__}"
                )
            cls._classes[key] = config
            return config

        return decorator

    @classmethod
    def load(cls, benchmark: Benchmark, scenario: Scenario) -> None:
        """Import a scenario's configs and, when present, the user's ``custom.py`` beside them."""
        package = f"configs.{benchmark.value}.{scenario.value}"
        importlib.import_module(package)
        custom = REPO_ROOT / "configs" / benchmark.value / scenario.value / "custom.py"
        if custom.exists():
            try:
                importlib.import_module(f"{package}.custom")
            except SyntaxError as error:  # a hand edit gone wrong: every run would fail, so say which line
                raise ConfigError(
                    f"{custom} is not valid Python (line {error.lineno}: {error.msg}); fix that line, or delete the "
                    "file and run `make add_system` again"
                ) from None

    @classmethod
    def get(
        cls, benchmark: Benchmark, scenario: Scenario, system: str, workload: WorkloadSetting
    ) -> type[BenchmarkConfiguration]:
        cls.load(benchmark, scenario)
        key = (benchmark, scenario, system, workload)
        if key in cls._classes:
            return cls._classes[key]
        systems = sorted({k[2] for k in cls._classes if k[:2] == (benchmark, scenario)})
        same_system = sorted(k[3].shortname() for k in cls._classes if k[:3] == (benchmark, scenario, system))
        if same_system:
            hint = f"{system} has configs for: {', '.join(same_system)}"
        else:
            hint = (
                f"configured systems: {', '.join(systems)}. Add yours with `make add_system` (writes a stub class "
                f"into configs/{benchmark.value}/{scenario.value}/custom.py), or pick one with --system_name"
            )
        raise ConfigError(
            f"no config for system {system}, {benchmark.value}/{scenario.value}, {workload.shortname()}; {hint}"
        )

    @classmethod
    def registered(cls) -> dict[RegistryKey, type[BenchmarkConfiguration]]:
        return dict(cls._classes)


def validate_config_class(config: type) -> None:
    """The registration rules; each failure names the class and the field."""
    name = getattr(config, "__name__", repr(config))
    if not (isinstance(config, type) and issubclass(config, BenchmarkConfiguration)):
        raise ConfigError(f"config class {name} must derive from BenchmarkConfiguration")
    if len(config.__bases__) != 1:
        raise ConfigError(f"config class {name}: single inheritance only (bases: {config.__bases__})")
    if not isinstance(config.benchmark, Benchmark) or not isinstance(config.scenario, Scenario):
        raise ConfigError(f"config class {name}: benchmark and scenario must be set (derive from a scenario base)")
    for klass in config.__mro__:
        if klass is BenchmarkConfiguration or klass is object:
            continue
        for key, value in vars(klass).items():
            if key.startswith("_") or key in IDENTITY_ATTRIBUTES or callable(value) or isinstance(value, classmethod):
                continue
            if key not in FIELDS:
                raise ConfigError(f"config class {klass.__name__}: unknown field '{key}'")
            fld = FIELDS[key]
            if not fld.applies_to(config.benchmark, config.scenario):
                raise ConfigError(
                    f"config class {klass.__name__}: field '{key}' does not apply to "
                    f"{config.benchmark.value}/{config.scenario.value}"
                )
            try:
                fld.check(value, f"config class {klass.__name__}")
            except FieldError as error:
                raise ConfigError(str(error)) from None
    values = config.fields()
    for fld in FIELDS.values():
        if fld.required and fld.applies_to(config.benchmark, config.scenario) and values.get(fld.name) is None:
            raise ConfigError(f"config class {name}: required field '{fld.name}' is missing ({fld.description})")


def resolve_config(
    benchmark: Benchmark,
    scenario: Scenario,
    system: str,
    workload: WorkloadSetting,
    overrides: dict[str, Any],
    warn_tuned: bool = True,
) -> ResolvedConfig:
    """Look the config class up, then apply RUN_ARGS > tuned > config class > field default (``resolve_fields``);
    the tuned value is the one ``make find_performance`` stored for this system (``code/common/tuned.py``), and
    ``warn_tuned`` says whether an unusable tuned file is warned about here (a test process leaves that to its
    parent, which already did)."""
    config = ConfigRegistry.get(benchmark, scenario, system, workload)
    tuned = tuned_fields(system, f"{benchmark.value}-{workload.accuracy_target.suffix}", scenario, warn=warn_tuned,
                         overrides=overrides)
    return resolve_fields(benchmark, scenario, system, workload, config.__name__, config.field_origins(), overrides,
                          tuned)
