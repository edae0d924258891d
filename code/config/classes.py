"""What a config class is: a class whose attributes are settings (fields of ``code/config/fields.py``), a variant
being a subclass, and the rules it is validated against when it registers (``validate_config_class``).

A class describes what it is named after. Named after a GPU model (``H200_SXM_141GB``), it holds one GPU's values
and serves a system of any count of that GPU (``per_gpu``); named after a system (``H200_SXM_141GBx2``, ``CPU``), it
holds that system's. The registry (``code/config/registry.py``) files classes by benchmark, scenario, system and
workload; the resolution (``code/config/resolve.py``) turns one class's fields into a run's values.
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

# Class attributes that identify a config rather than set a field.
IDENTITY_ATTRIBUTES = ("benchmark", "scenario", "system")
# Class attributes that say where values come from: a note per field (``estimate: ...``), the GPU model derived from.
NOTE_ATTRIBUTES = ("value_notes", "gpu_model", "gpu_count", "skipped_rungs")
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

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **kwargs: Any):  # noqa: ANN001, ANN204
        return super().__new__(mcs, name, bases, dict(namespace), **kwargs)


class BenchmarkConfiguration(metaclass=_ConfigMeta):
    """Base of every config class. Subclasses set ``benchmark``, ``scenario`` and fields as class attributes."""

    benchmark: ClassVar[Benchmark | None] = None
    scenario: ClassVar[Scenario | None] = None
    system: ClassVar[str | None] = None  # default: the class name without variant suffixes
    engine_ladder: ClassVar[Ladder] = ()  # the engines it may run, fastest first; (): the class's own engine only
    # field -> where its value comes from when not measured on this GPU model ("estimate: H100_SXM_80GB's measured
    # rate x 0.39 ..."), shown beside the value by `make info`; set by the class that sets the value or its ladder
    value_notes: ClassVar[dict[str, str]] = {}
    gpu_model: ClassVar[GpuModel | None] = None  # a derived class's GPU model (code/config/any_gpu.py)
    # The GPU count of a system whose name does not give it (``MyBox``, not ``<model>x<count>``): the per-GPU rates
    # it inherits from a GPU model's class are multiplied by it, as a name's count does
    gpu_count: ClassVar[int | None] = None
    # Rungs a derived class left out of its ladder because the GPU cannot hold them (GPT-J's memory), with why:
    # `make info` names them beside those its compute capability skips
    skipped_rungs: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def fields(cls) -> dict[str, Any]:
        """The field values this class sets, its own and inherited (nearest class wins)."""
        return {key: value for key, (value, _) in cls.field_origins().items()}

    @classmethod
    def field_origins(cls) -> dict[str, tuple[Any, str]]:
        """Each field's value and the name of the class that set it, so `make info` can say where it came from."""
        return {key: (value, owner.__name__) for key, (value, owner) in cls.field_owners().items()}

    @classmethod
    def field_owners(cls) -> dict[str, tuple[Any, type[BenchmarkConfiguration]]]:
        """Each field's value and the class that set it (the nearest one in the class's ancestry)."""
        owners: dict[str, tuple[Any, type[BenchmarkConfiguration]]] = {}
        for klass in reversed(cls.__mro__):
            for key, value in vars(klass).items():
                if key in FIELDS:
                    owners[key] = (value, klass)
        return owners

    @classmethod
    def ladder_owner(cls) -> type[BenchmarkConfiguration] | None:
        """The class that set the engine ladder this class uses (itself or the nearest base); None without one (an
        ``engine_ladder = ()`` ends an inherited one)."""
        owner = next((klass for klass in cls.__mro__ if LADDER_ATTRIBUTE in vars(klass)), None)
        return owner if owner is not None and vars(owner)[LADDER_ATTRIBUTE] else None

    @classmethod
    def system_name(cls) -> str:
        return cls.system or VARIANT_SUFFIX.sub("", cls.__name__)

    @classmethod
    def per_gpu(cls) -> bool:
        """Whether the class's throughputs are one GPU's: it is named after a GPU model (``H200_SXM_141GB``), or is
        a base class, not after a system with its GPU count (``H200_SXM_141GBx2``). A system multiplies them by its
        GPU count where they are not its own class's (``_per_gpu_on``), so ``CPU`` and ``MyBox`` keep their own."""
        return gpu_model_and_count(cls.system_name()) is None


def source_file(config: type) -> str:
    """The file a class is written in, relative to the repository: an error about two classes names both files."""
    module = sys.modules.get(config.__module__)
    path = getattr(module, "__file__", None)
    if not path:
        return config.__module__
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path


def shared_values(**values: Any):  # noqa: ANN201 - a decorator factory
    """A class decorator that sets fields several classes share across scenario files (a benchmark's values for an
    accuracy target or a device), so they are stated once; it goes under ``@ConfigRegistry.register``. The class
    keeps single inheritance and is the values' owner, as if it had set them. A class that sets one of those fields
    itself is refused: two statements of one value would leave a reader to guess which one holds."""
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
    for klass in config.__mro__:
        if klass is BenchmarkConfiguration or klass is object:
            continue
        for key, value in vars(klass).items():
            if (key.startswith("_") or key in IDENTITY_ATTRIBUTES or key in NOTE_ATTRIBUTES or callable(value)
                    or isinstance(value, classmethod)):
                continue
            if key == LADDER_ATTRIBUTE:
                try:
                    check_ladder(value, config.benchmark, config.scenario, f"config class {klass.__name__}")
                except FieldError as error:
                    raise ConfigError(str(error)) from None
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
                for each in value.candidates if isinstance(value, BestCpuPrecision) else (value,):
                    fld.check(each, f"config class {klass.__name__}")
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
