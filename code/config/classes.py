"""What a config class is: a class whose attributes are fields of ``code/config/fields.py``, a variant being a
subclass, and the rules it is validated against when it registers (``validate_config_class``).

A class named after a GPU model (``H200_SXM_141GB``) holds one GPU's values and serves a system of any count of that
GPU (``per_gpu``); one named after a system (``H200_SXM_141GBx2``, ``CPU``) holds that system's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, ClassVar

from code.common.constants import Benchmark, Scenario
from code.common.gpu_models import GpuModel
from code.common.paths import REPO_ROOT
from code.common.systems import gpu_model_and_count
from code.config.cpu_features import BestCpuPrecision
from code.config.fields import FIELDS, FieldError
from code.config.ladder import Ladder, check_ladder
from code.config.resolved import ConfigError

# Class attributes that identify a config or say where its values come from, rather than set a field.
OTHER_ATTRIBUTES = ("benchmark", "scenario", "system", "value_notes", "gpu_model", "gpu_count", "skipped_rungs")
LADDER_ATTRIBUTE = "engine_ladder"  # the engines the class may run, fastest first (code/config/ladder.py)
# Suffixes of variant classes: H100_SXM_80GB_HighAccuracy configures H100_SXM_80GB, for bert-99.9.
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


class BenchmarkConfiguration(metaclass=_ConfigMeta):
    """Base of every config class. Subclasses set ``benchmark``, ``scenario`` and fields as class attributes."""

    benchmark: ClassVar[Benchmark | None] = None
    scenario: ClassVar[Scenario | None] = None
    system: ClassVar[str | None] = None  # default: the class name without variant suffixes
    engine_ladder: ClassVar[Ladder] = ()  # the engines it may run, fastest first; (): the class's own engine only
    # field -> where its value comes from when not measured on this GPU model ("estimate: H100_SXM_80GB's measured
    # rate x 0.39 ..."), shown beside the value by `make info`
    value_notes: ClassVar[dict[str, str]] = {}
    gpu_model: ClassVar[GpuModel | None] = None  # a derived class's GPU model (code/config/any_gpu.py)
    # The GPU count of a system whose name does not give it (``MyBox``): the per-GPU rates it inherits are
    # multiplied by it, as a name's count does
    gpu_count: ClassVar[int | None] = None
    # Rungs a derived class left out because the GPU cannot hold them (GPT-J's memory), with why, for `make info`
    skipped_rungs: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def fields(cls) -> dict[str, Any]:
        """The field values this class sets, its own and inherited (nearest class wins)."""
        return {key: value for key, (value, _) in cls.field_owners().items()}

    @classmethod
    def field_owners(cls) -> dict[str, tuple[Any, type[BenchmarkConfiguration]]]:
        """Each field's value and the nearest class that set it, so `make info` can say where it came from."""
        return {key: (value, klass) for klass in reversed(cls.__mro__) for key, value in vars(klass).items()
                if key in FIELDS}

    @classmethod
    def ladder_owner(cls) -> type[BenchmarkConfiguration] | None:
        """The class whose engine ladder this class uses; None without one (``engine_ladder = ()`` ends one)."""
        owner = next((klass for klass in cls.__mro__ if LADDER_ATTRIBUTE in vars(klass)), None)
        return owner if owner is not None and vars(owner)[LADDER_ATTRIBUTE] else None

    @classmethod
    def system_name(cls) -> str:
        return cls.system or VARIANT_SUFFIX.sub("", cls.__name__)

    @classmethod
    def per_gpu(cls) -> bool:
        """Whether the class's throughputs are one GPU's: it is named after a GPU model, or is a base class, not
        after a system with its GPU count (``H200_SXM_141GBx2``), ``CPU`` or ``MyBox``."""
        return gpu_model_and_count(cls.system_name()) is None


def source_file(config: type) -> str:
    """The file a class is written in, relative to the repository: an error about two classes names both files."""
    path = getattr(sys.modules.get(config.__module__), "__file__", None)
    if not path:
        return config.__module__
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path


def shared_values(**values: Any):  # noqa: ANN201 - a decorator factory
    """A class decorator (under ``@ConfigRegistry.register``) that sets fields several classes share across scenario
    files, so they are stated once; the class keeps single inheritance and owns the values. A class that sets one of
    them itself is refused: two statements of one value would leave a reader to guess which holds."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"shared_values: unknown field(s) {', '.join(unknown)}")

    def decorator(config: type[BenchmarkConfiguration]) -> type[BenchmarkConfiguration]:
        for name, value in values.items():
            if name in vars(config):
                raise ConfigError(f"config class {config.__name__} sets {name}, which its shared values set too: "
                                  "drop one of them")
            setattr(config, name, value)
        return config

    return decorator


def validate_config_class(config: type) -> None:
    """The registration rules; each failure names the class and the field."""
    name = getattr(config, "__name__", repr(config))
    if not (isinstance(config, type) and issubclass(config, BenchmarkConfiguration)):
        raise ConfigError(f"config class {name} must derive from BenchmarkConfiguration")
    if len(config.__bases__) != 1:
        raise ConfigError(f"config class {name}: single inheritance only (bases: {config.__bases__})")
    if not isinstance(config.benchmark, Benchmark) or not isinstance(config.scenario, Scenario):
        raise ConfigError(f"config class {name}: benchmark and scenario must be set (derive from a scenario base)")
    for klass in [klass for klass in config.__mro__ if klass not in (BenchmarkConfiguration, object)]:
        where = f"config class {klass.__name__}"
        for key, value in vars(klass).items():
            if key.startswith("_") or key in OTHER_ATTRIBUTES or callable(value) or isinstance(value, classmethod):
                continue
            try:
                if key == LADDER_ATTRIBUTE:
                    check_ladder(value, config.benchmark, config.scenario, where)
                    continue
                if key not in FIELDS:
                    raise ConfigError(f"{where}: unknown field '{key}'")
                if not FIELDS[key].applies_to(config.benchmark, config.scenario):
                    raise ConfigError(f"{where}: field '{key}' does not apply to "
                                      f"{config.benchmark.value}/{config.scenario.value}")
                for each in value.candidates if isinstance(value, BestCpuPrecision) else (value,):
                    FIELDS[key].check(each, where)
            except FieldError as error:
                raise ConfigError(str(error)) from None
    count = vars(config).get("gpu_count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ConfigError(f"config class {name}: gpu_count must be a whole number of GPUs, 1 or more; got {count!r}")
    values = config.fields()
    for fld in FIELDS.values():
        if fld.required and fld.applies_to(config.benchmark, config.scenario) and values.get(fld.name) is None:
            raise ConfigError(f"config class {name}: required field '{fld.name}' is missing ({fld.description})")
    owner = config.ladder_owner()
    if owner is not None:
        engines = {field for rung in config.engine_ladder for field in rung.engine()}
        for field, (_, setter) in config.field_owners().items():
            if field in engines and setter is not owner and issubclass(setter, owner):
                raise ConfigError(
                    f"config class {setter.__name__} sets {field}, an engine field the rungs of the engine_ladder it "
                    f"inherits from {owner.__name__} set: every rung would run the same engine. Give the class an "
                    f"engine_ladder of its own, or engine_ladder = () to run only the engine its fields make")
