"""The registry of config classes, keyed by benchmark, scenario, system and workload.

``@ConfigRegistry.register(HarnessType, AccuracyTarget, PowerSetting)`` validates a class when its module is imported,
so a misspelt or missing field fails at once, naming the class. The classes live under ``configs/``, imported by name
when a benchmark's scenario is first looked up, so this room never imports the floor that holds them. A system
``<model>x<count>`` uses its own class when there is one, else its GPU model's, else the class derived for its GPU
(``code/config/any_gpu.py``).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.gpu_models import REFERENCE
from code.common.paths import REPO_ROOT
from code.common.systems import gpu_model_and_count, gpu_model_for_system
from code.config.any_gpu import derived_class
from code.config.classes import BenchmarkConfiguration, source_file, validate_config_class
from code.config.fields import FieldError
from code.config.resolved import ConfigError, WorkloadSetting

RegistryKey = tuple[Benchmark, Scenario, str, WorkloadSetting]


def import_config_module(module: str, path: Path, fix: str) -> None:
    """Import a config module, turning any error a hand edit can cause into a ``ConfigError`` naming the file, the
    line and ``fix``: every run imports these files, so a slip would otherwise end every command in a traceback. The
    registry's own errors already name the class and pass unchanged."""
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
    """The file, line and source of ``error``'s innermost frame in ``path``'s folder or configs/ (the hand edit)."""
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
        """Import a scenario's configs and the user's ``custom.py`` beside them."""
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
        """Import a scenario's ``custom.py`` again after ``make add_system`` rewrote it (a module is imported once per
        process), its earlier classes dropped first as they register anew."""
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
        """The system's own class, else its GPU model's (``H200_SXM_141GB`` for ``H200_SXM_141GBx2``), else the one
        derived for its GPU."""
        cls.load(benchmark, scenario)
        found = gpu_model_and_count(system)
        names = [system, found[0]] if found else [system]
        for name in names:
            if (benchmark, scenario, name, workload) in cls._classes:
                return cls._classes[(benchmark, scenario, name, workload)]
        gpu = gpu_model_for_system(system)
        if gpu is not None and (benchmark, scenario, gpu.name, workload) in cls._classes:
            return cls._classes[(benchmark, scenario, gpu.name, workload)]  # named by an alias (NVIDIA's spelling)
        if gpu is not None and (benchmark, scenario, REFERENCE, workload) in cls._classes:
            reference = cls.get(benchmark, scenario, REFERENCE, workload)
            return derived_class(reference, benchmark, scenario, workload, gpu)
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


def gpu_model_classes(benchmark: Benchmark, scenario: Scenario) -> Callable[[str], type[BenchmarkConfiguration]]:
    """A scenario module's ``__getattr__``: ``configs.bert.Offline.A100_SXM4_40GB`` (and ``..._HighAccuracy``) is
    the class derived for that GPU model, so ``make add_system`` can subclass it like a written one."""

    def class_named(name: str) -> type[BenchmarkConfiguration]:
        model_name = name.removesuffix("_HighAccuracy")
        if model_name.startswith("_") or not model_name:
            raise AttributeError(name)
        gpu = gpu_model_for_system(f"{model_name}x1")
        if gpu is None or gpu.name != model_name:
            raise AttributeError(f"module configs.{benchmark.package}.{scenario.value} has no attribute {name!r} (no "
                                 f"config class, and no GPU model of that name in code/common/gpu_models.py)")
        target = AccuracyTarget.k_99_9 if name.endswith("_HighAccuracy") else AccuracyTarget.k_99
        workload = WorkloadSetting(accuracy_target=target)
        ConfigRegistry.load(benchmark, scenario)
        written = ConfigRegistry.registered().get((benchmark, scenario, model_name, workload))
        if written is not None:
            return written
        reference = ConfigRegistry.get(benchmark, scenario, REFERENCE, workload)
        return derived_class(reference, benchmark, scenario, workload, gpu)

    return class_named
