"""Configuration as plain classes: a registry keyed by benchmark, scenario, system and workload.

A config is a class whose attributes are settings (fields from ``code/common/fields.py``); a variant is a
subclass. ``@ConfigRegistry.register(HarnessType, AccuracyTarget, PowerSetting)`` validates the class when its
module is imported, so a misspelt field or a missing required one fails at once, naming the class and field.

A class describes what it is named after. Named after a GPU model (``H200_SXM_141GB``), it holds one GPU's
values and serves a system of any count of that GPU; named after a system (``H200_SXM_141GBx2``, ``CPU``), it
holds that system's. A system ``<model>x<count>`` uses its own class when there is one, else its GPU model's, and
its throughputs (the fields marked ``system_rate``: Offline's expected and Server's target QPS) are the per-GPU
ones times the count; every other value, latencies included, is the class's as it is. A name without a count
(``MyBox``) whose class derives from a GPU model's takes the count from its class, its description or the machine
(``system_gpus``), or says its rates are one GPU's and why; a rate a system's own class sets is the whole system's,
and a GPU model's own name is one GPU. ``resolve_config`` looks the class up, turns its fields into the system's
values (``system_values``) and hands them to ``code.common.config.resolve_fields``, which holds the one precedence
rule (RUN_ARGS > tuned > rung > config class > field default; tuned values were measured on the whole system and
are never scaled). This module imports from ``code/common`` and never the reverse: code/common knows fields, not
the classes that set them.

A class may list the engines it can run for its accuracy target, fastest first: ``engine_ladder = (Rung(...), ...)``
(code/common/ladder.py). A rung's values are the class's for that engine and come between the tuned values and the
class's own (RUN_ARGS > tuned > rung > config class > default); a subclass's own value of a field that is not an
engine field (a rate of its own system) wins over the rung of a ladder it inherits, as the nearest class wins
anywhere, while an engine field set below the ladder is refused: it would make every rung the same engine.
"""

from __future__ import annotations

import importlib
import re
import sys
import traceback
from pathlib import Path
from typing import Any, ClassVar

from code.common import systems
from code.common.capabilities import runnable_rungs
from code.common.config import ConfigError, NoEngineError, ResolvedConfig, WorkloadSetting, resolve_fields
from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.cpu_features import BestCpuPrecision
from code.common.fields import FIELDS, FieldError
from code.common.gpu_models import REFERENCE, GpuModel, by_name
from code.common.ladder import Ladder, Rung, check_ladder, engine_fields, given_engine_fields, matching_rung
from code.common.paths import REPO_ROOT
from code.common.system_description import DescriptionFiles, described_gpu_count, shown
from code.common.systems import gpu_model_and_count, gpu_model_for_system
from code.common.tuned import tuned_fields

# ConfigError, ResolvedConfig and WorkloadSetting live in code/common/config.py; they are named here too because
# config files and NVIDIA-style readers look for them beside the registry.
__all__ = ["BenchmarkConfiguration", "ConfigError", "ConfigRegistry", "ResolvedConfig", "Rung", "WorkloadSetting",
           "resolve_config", "shared_values", "system_values", "validate_config_class"]

# Class attributes that identify a config rather than set a field.
IDENTITY_ATTRIBUTES = ("benchmark", "scenario", "system")
# Class attributes that say where values come from: a note per field (``estimate: ...``), the GPU model derived from.
NOTE_ATTRIBUTES = ("value_notes", "gpu_model", "gpu_count", "skipped_rungs")
LADDER_ATTRIBUTE = "engine_ladder"  # the engines the class may run, fastest first (code/common/ladder.py)
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
    gpu_model: ClassVar[GpuModel | None] = None  # a derived class's GPU model (configs/any_gpu.py)
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


RegistryKey = tuple[Benchmark, Scenario, str, WorkloadSetting]



def import_config_module(module: str, path: Path, fix: str) -> None:
    """Import the config module ``module`` (the file ``path``), turning any error a hand edit can cause into one
    ``ConfigError`` naming the file, the line, the error and ``fix``: every run imports these files, so a slip in
    one (an unquoted value, a misspelt name) would otherwise end every command in a traceback. The registry's own
    errors (a misspelt field, a class registered twice) already name the class and pass unchanged."""
    try:
        importlib.import_module(module)
    except (ConfigError, FieldError):
        raise
    except SyntaxError as error:
        where = Path(error.filename) if error.filename else path
        raise ConfigError(f"{where} is not valid Python (line {error.lineno}: {error.msg}); {fix}") from None
    except Exception as error:
        where, line, text = _edited_line(error, path)
        quoted = f" ({text})" if text else ""
        raise ConfigError(f"{where} line {line}{quoted} raised {type(error).__name__}: {error}; {fix}") from None


def _edited_line(error: BaseException, path: Path) -> tuple[Path, int | str, str]:
    """The file, line number and source of the innermost frame of ``error`` in ``path``'s folder or the configs
    folder (where the hand edit is), else ``path`` with an unknown line."""
    folders = (path.resolve().parent, (REPO_ROOT / "configs").resolve())
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        file = Path(frame.filename).resolve()
        if any(file.is_relative_to(folder) for folder in folders):
            return file, frame.lineno or "?", (frame.line or "").split("  #")[0].strip()
    return path, "?", ""


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
                    f"config class {config.__name__} ({source_file(config)}) registers {key[2]} "
                    f"{workload.shortname()} for {config.benchmark.value}/{config.scenario.value}, already registered "
                    f"by {other.__name__} ({source_file(other)}): keep one of the two classes, in one of the files"
                )
            cls._classes[key] = config
            return config

        return decorator

    @classmethod
    def load(cls, benchmark: Benchmark, scenario: Scenario) -> None:
        """Import a scenario's configs and, when present, the user's ``custom.py`` beside them."""
        package = f"configs.{benchmark.package}.{scenario.value}"
        folder = REPO_ROOT / "configs" / benchmark.package / scenario.value
        shipped = folder / "__init__.py"
        import_config_module(package, shipped, f"fix that line (`git diff {shipped}` shows what changed from the "
                             "shipped file)")
        custom = folder / "custom.py"
        if custom.exists():
            import_config_module(f"{package}.custom", custom,
                                 "fix that line, or delete the file and run `make add_system` again")

    @classmethod
    def reload_custom(cls, benchmark: Benchmark, scenario: Scenario) -> None:
        """Import a scenario's ``custom.py`` again after it was rewritten (``make add_system``): a module is imported
        once per process, so without this the classes added to a file already imported would not register. The
        file's earlier classes are dropped first, as they register anew."""
        module = f"configs.{benchmark.package}.{scenario.value}.custom"
        for key in [key for key, config in cls._classes.items() if config.__module__ == module]:
            del cls._classes[key]
        sys.modules.pop(module, None)
        importlib.invalidate_caches()
        cls.load(benchmark, scenario)

    @classmethod
    def get(
        cls, benchmark: Benchmark, scenario: Scenario, system: str, workload: WorkloadSetting
    ) -> type[BenchmarkConfiguration]:
        """The system's own class, else its GPU model's (``H200_SXM_141GB`` for ``H200_SXM_141GBx2``): a class a
        user writes for one count wins over the model's."""
        cls.load(benchmark, scenario)
        names = candidate_names(system)
        for name in names:
            if (benchmark, scenario, name, workload) in cls._classes:
                return cls._classes[(benchmark, scenario, name, workload)]
        gpu = gpu_model_for_system(system)
        if gpu is not None and (benchmark, scenario, gpu.name, workload) in cls._classes:
            return cls._classes[(benchmark, scenario, gpu.name, workload)]  # named by an alias (NVIDIA's spelling)
        if gpu is not None and (benchmark, scenario, REFERENCE, workload) in cls._classes:
            from configs.any_gpu import derived_class  # it imports this module

            return derived_class(benchmark, scenario, workload, gpu)
        looked_for = system if len(names) == 1 else f"{system} (nor for its GPU model {names[1]})"
        for name in names:
            workloads = sorted(k[3].shortname() for k in cls._classes if k[:3] == (benchmark, scenario, name))
            if workloads:
                raise ConfigError(f"no config for system {looked_for}, {benchmark.value}/{scenario.value}, "
                                  f"{workload.shortname()}; {name} has configs for: {', '.join(workloads)}")
        configured = sorted({k[2] for k in cls._classes if k[:2] == (benchmark, scenario)})
        raise ConfigError(
            f"no config for system {looked_for}, {benchmark.value}/{scenario.value}, {workload.shortname()}; "
            f"configured: {', '.join(configured)} (a GPU model's class serves any count of it: "
            f"<model>x<count>; a model of code/common/gpu_models.py, or this machine's GPU, has a class derived "
            f"from the GPU). Add yours with `make add_system` (writes a stub class into "
            f"configs/{benchmark.package}/{scenario.value}/custom.py), or pick one with --system_name"
        )

    @classmethod
    def registered(cls) -> dict[RegistryKey, type[BenchmarkConfiguration]]:
        return dict(cls._classes)


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


def system_gpus(config: type[BenchmarkConfiguration], system: str) -> tuple[int | None, str]:
    """How many GPUs ``system`` has, which the per-GPU rates it inherits are multiplied by, and where a count its
    name does not give comes from ("" where the name or its class gives it); None, with why, when nothing does.

    In order: the count its name gives (``<model>x<count>``); its class's ``gpu_count`` (what make add_system
    writes for ``MyBox``); ``accelerators_per_node`` of its description (systems/<system>.json, its user file over
    it), where a person states the system; this machine's GPUs, which a run of it uses. A name without a count
    asks the last two only when a rate is to be scaled (``_per_gpu_on``), so a CPU system never asks NVML."""
    found = gpu_model_and_count(system)
    if found:
        return found[1], ""
    if config.gpu_count:
        return config.gpu_count, ""
    described = described_gpu_count(system)
    if described:
        return described, f"accelerators_per_node of {shown(DescriptionFiles.of(system).base)}"
    here = len(systems.this_machine().gpus)
    if here:
        return here, "this machine's GPUs, which a run uses"
    return None, (f"{system} states no GPU count and this machine has no GPU: set gpu_count in its class (make "
                  f"add_system SYSTEM={system} GPU_MODEL=<model> GPU_COUNT=<count> writes it) or "
                  f"accelerators_per_node in systems/{system}.json")


def _per_gpu_on(config: type[BenchmarkConfiguration], owner: type[BenchmarkConfiguration], system: str) -> bool:
    """Whether the rates ``owner`` sets are one GPU's on ``system``, to be multiplied by its GPU count: ``owner``
    is named after a GPU model, or is a base class (``per_gpu``), and is not the system's own class, whose rates
    are the whole system's (``MyBox``'s as ``H200_SXM_141GBx2``'s). A name without a count is a system of GPUs
    unless its class runs on the CPU (``CPU``, make add_system's stubs), whose rates are the machine's; a name
    that is a GPU model's (``H200_SXM_141GB``) is one GPU, as its class describes."""
    if not owner.per_gpu() or owner.system_name() == system:
        return False
    if gpu_model_and_count(system) is not None:
        return True
    return by_name(system) is None and config.fields().get("device") != "cpu"


def _scaled_rate(name: str, value: Any, source: str, gpus: tuple[int | None, str]) -> tuple[Any, str]:
    """A per-GPU rate as the system's, its source saying by how many GPUs (and where that count came from), or, with
    no count, that it stays one GPU's and why."""
    count, where = gpus
    if not count:
        return value, f"{source}, one GPU's: {where}"
    source = f"{source} x {count} GPU{'s' if count != 1 else ''}"
    value = FIELDS[name].check(value * count, f"config class {source}")
    return value, f"{source} ({where})" if where else source


def candidate_names(system: str) -> list[str]:
    """The registered names that may configure ``system``, the first found winning: its own name, then for a
    ``<model>x<count>`` name its GPU model."""
    found = gpu_model_and_count(system)
    return [system, found[0]] if found else [system]


def system_values(config: type[BenchmarkConfiguration], system: str) -> dict[str, tuple[Any, str]]:
    """The config class's fields as ``system``'s values, each with its source as `make info` shows it.

    A throughput (``system_rate`` field) set by a per-GPU class (``per_gpu``: named after a GPU model) is one
    GPU's: on a system ``<model>x<count>`` it is multiplied by the count, its source saying so
    (``H200_SXM_141GB x 2 GPUs``). The rule follows where the value was set, not which class was looked up, so a
    user's ``H200_SXM_141GBx2`` derived from ``H200_SXM_141GB`` gets two GPUs' worth of what it inherits, and what
    it sets itself is the whole system's. A ``BestCpuPrecision`` is this machine's choice, its source saying why.
    A value the setting class notes (``value_notes``: an estimate, a value derived from the GPU) says so after its
    source."""
    owners = config.field_owners()
    scaled = {name for name, (_, owner) in owners.items()
              if FIELDS[name].system_rate and _per_gpu_on(config, owner, system)}
    gpus = system_gpus(config, system) if scaled else (None, "")
    values: dict[str, tuple[Any, str]] = {}
    for name, (value, owner) in owners.items():
        if name in scaled:
            value, source = _scaled_rate(name, value, owner.__name__, gpus)
            values[name] = (value, noted(owner, name, source))
        elif isinstance(value, BestCpuPrecision):  # the CPU decides: bf16 only with bf16 arithmetic
            chosen, why = value.choose()
            values[name] = (chosen, f"{owner.__name__}: {why}")
        else:
            values[name] = (value, noted(owner, name, owner.__name__))
    return values


def noted(owner: type[BenchmarkConfiguration], name: str, source: str) -> str:
    """``source`` with the note ``owner`` itself keeps for field ``name`` (``value_notes``), if it keeps one."""
    note = vars(owner).get("value_notes", {}).get(name)
    return f"{source} ({note})" if note else source


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


def rung_values(config: type[BenchmarkConfiguration], rung: Rung, system: str,
                below: dict[str, tuple[Any, str]]) -> dict[str, tuple[Any, str]]:
    """The rung's values as ``system``'s, each with its source (``H200_SXM_141GB engine_ladder[fp8]``), over
    ``below`` (the class's ``system_values``). A rate is scaled as the class that set the ladder scales its own
    (``system_values``); a value a subclass of that class sets itself stays (the nearest class wins)."""
    owner = config.ladder_owner()
    assert owner is not None, "a rung comes from a ladder"
    setters = config.field_owners()
    scaled = _per_gpu_on(config, owner, system) and any(FIELDS[name].system_rate for name in rung.values)
    gpus = system_gpus(config, system) if scaled else (None, "")
    values = dict(below)
    for name, value in rung.values.items():
        setter = setters.get(name, (None, None))[1]
        if setter is not None and setter is not owner and issubclass(setter, owner):
            continue  # set by a class below the ladder's: its own system's value
        source = f"{owner.__name__} engine_ladder[{rung.name}]"
        if scaled and FIELDS[name].system_rate:
            value, source = _scaled_rate(name, value, source, gpus)
        values[name] = (value, noted(owner, name, source))
    return values


def system_ladder(config: type[BenchmarkConfiguration], system: str,
                  below: dict[str, tuple[Any, str]]) -> tuple[Ladder, tuple[tuple[str, str], ...]]:
    """The class's engine ladder as ``system`` runs it: the rungs its GPU model can run (code/common/capabilities.py)
    and the others, each with the reason it is skipped. A system of no known GPU model (``CPU``, ``MyBox``) runs the
    ladder as it is. Refuses a ladder of which the GPU runs no rung, saying why for each."""
    ladder = config.engine_ladder if config.ladder_owner() else ()
    gpu = (gpu_model_for_system(system) or config.gpu_model) if ladder else None  # MyBox: its class's GPU model
    if gpu is None:
        return ladder, tuple(config.skipped_rungs)
    kept, skipped = runnable_rungs(config.benchmark, ladder, {name: value for name, (value, _) in below.items()},
                                   gpu.capability)
    skipped = tuple(config.skipped_rungs) + skipped
    if not kept:
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped)
        raise NoEngineError(f"{system}: {gpu.name} ({gpu.describe()}) runs no engine of config class "
                            f"{config.__name__}'s ladder ({reasons}); give the class an engine this GPU runs", skipped)
    return kept, skipped


def choose_rung(config: type[BenchmarkConfiguration], ladder: Ladder, name: str | None,
                below: dict[str, tuple[Any, str]], overrides: dict[str, Any]) -> Rung | None:
    """The rung of ``ladder`` (the class's, as the system runs it) a resolution applies: the one named (the accuracy
    gate's choice, or a test process's from its parent); else, when RUN_ARGS give an engine field, the rung whose
    engine they name (None if none does); else the ladder's first."""
    if not ladder:
        if name is not None:
            raise ConfigError(f"engine {name!r} asked of config class {config.__name__}, which has no engine_ladder")
        return None
    if name is not None:
        for rung in ladder:
            if rung.name == name:
                return rung
        raise ConfigError(f"engine {name!r} is not a rung of config class {config.__name__}'s engine_ladder "
                          f"({', '.join(rung.name for rung in ladder)})")
    if given_engine_fields(ladder, overrides):
        return matching_rung(ladder, {field: value for field, (value, _) in below.items()}, overrides)
    return ladder[0]


def resolve_config(
    benchmark: Benchmark,
    scenario: Scenario,
    system: str,
    workload: WorkloadSetting,
    overrides: dict[str, Any],
    warn_tuned: bool = True,
    rung: str | None = None,
) -> ResolvedConfig:
    """Look the config class up, make its fields the system's values (``system_values``) and, with an engine
    ladder, lay the rung's over them (``choose_rung``: ``rung`` names one, else the first, else the one RUN_ARGS
    name), then apply RUN_ARGS > tuned > rung > config class > field default (``resolve_fields``); the tuned value is
    the one ``make find_performance`` stored for this system and engine (``code/common/tuned.py``), a whole-system
    value as it is, and ``warn_tuned`` says whether an unusable tuned file is warned about here (a test process
    leaves that to its parent, which already did)."""
    config = ConfigRegistry.get(benchmark, scenario, system, workload)
    values = system_values(config, system)
    ladder, skipped = system_ladder(config, system, values)
    chosen = choose_rung(config, ladder, rung, values, overrides)
    if chosen is not None:
        values = rung_values(config, chosen, system, values)
    tuned = tuned_fields(system, benchmark.submission_name(workload.accuracy_target), scenario, warn=warn_tuned,
                         overrides=overrides, engine=chosen.name if chosen else "")
    resolved = resolve_fields(benchmark, scenario, system, workload, config.__name__, values, overrides, tuned)
    resolved.ladder = ladder
    resolved.skipped = skipped
    resolved.rung = chosen
    resolved.engine_given = tuple(given_engine_fields(resolved.ladder, overrides))
    if rung is None and chosen is not None and not resolved.engine_given:
        check_every_rung_takes(benchmark, scenario, system, workload, overrides, resolved.ladder, chosen)
    return resolved


def check_every_rung_takes(benchmark: Benchmark, scenario: Scenario, system: str, workload: WorkloadSetting,
                           overrides: dict[str, Any], ladder: Ladder, first: Rung) -> None:
    """RUN_ARGS that set an engine field no rung sets (``--fp8_residual``) apply to every rung, and the accuracy gate
    may fall back to any of them: refuse them now, naming the rung that cannot take them, rather than after an
    accuracy run has missed."""
    extra = [name for name in overrides if FIELDS[name].engine and name not in engine_fields(ladder)]
    if not extra:
        return
    for other in ladder:
        if other is first:
            continue
        try:
            resolve_config(benchmark, scenario, system, workload, overrides, warn_tuned=False, rung=other.name)
        except FieldError as error:
            given = ", ".join(f"--{name}" for name in extra)
            raise FieldError(f"{given} applies to every engine of the ladder ({', '.join(r.name for r in ladder)}), "
                             f"and its {other.name!r} engine, which the accuracy gate may fall back to, cannot take "
                             f"it ({error}); to run one engine without the ladder, name it whole with the engine "
                             f"fields of its rung (make info lists them), or leave {given} out") from None
