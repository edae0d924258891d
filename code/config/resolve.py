"""The resolution of one config, one pipeline: the layers in order, then the system scaling, then the rules.

The layers, lowest first (``LAYERS``): the field's default; the config class's value; the rung of its engine ladder
the run uses; the tuned value ``make find_performance`` stored for the system (code/config/tuned.py); RUN_ARGS.
Each lays its values over those below it (``resolve_fields``), and each value keeps its layer and source
(``where_from``).

The system scaling happens once. A system ``<model>x<count>`` uses its own class when there is one, else its GPU
model's, and its throughputs (the fields marked ``system_rate``: Offline's expected and Server's target QPS) set by
a class named after a GPU model are one GPU's: ``system_scaled`` multiplies them by the count, before the tuned value
and RUN_ARGS, whole-system values, go over them; every other value, latencies included, is the class's as it is. A
name without a count (``MyBox``) whose class derives from a GPU model's takes the count from its class, its
description or the machine (``system_gpus``), or says its rates are one GPU's and why; a rate a system's own class
sets is the whole system's, and a GPU model's own name is one GPU. Last, a run on the GPUs ``--devices`` names,
fewer than the system's, expects that share of the rate (``share_of_devices``), so `make info` shows the rate the
run uses.

A class may list the engines it can run for its accuracy target, fastest first: ``engine_ladder = (Rung(...), ...)``
(code/config/ladder.py). A rung's values are the class's for that engine and come between the tuned values and the
class's own; a subclass's own value of a field that is not an engine field (a rate of its own system) wins over the
rung of a ladder it inherits, as the nearest class wins anywhere, while an engine field set below the ladder is
refused: it would make every rung the same engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from code.common import systems
from code.common.constants import Benchmark, Scenario
from code.common.gpu_models import by_name
from code.common.system_description import DescriptionFiles, described_gpu_count, shown
from code.common.systems import gpu_model_and_count, gpu_model_for_system
from code.config.capabilities import runnable_rungs
from code.config.classes import BenchmarkConfiguration
from code.config.cpu_features import BestCpuPrecision
from code.config.fields import FIELDS, Field, FieldError, check_combination, check_plan
from code.config.ladder import Ladder, Rung, engine_fields, given_engine_fields, matching_rung
from code.config.registry import ConfigRegistry
from code.config.resolved import ConfigError, NoEngineError, ResolvedConfig, WorkloadSetting
from code.config.tuned import tuned_fields


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


@dataclass(frozen=True)
class Setting:
    """One layer's value of a field before the system scaling: what set it, the note the setting class keeps for it
    (``value_notes``), and whether it is one GPU's rate, which the scaling multiplies by the system's GPU count."""

    value: Any
    source: str
    note: str = ""
    per_gpu: bool = False


def class_layer(config: type[BenchmarkConfiguration], system: str) -> dict[str, Setting]:
    """The config class's fields as they are set, each with the class that set it.

    A throughput (``system_rate`` field) set by a per-GPU class (``per_gpu``: named after a GPU model) is one
    GPU's (``_per_gpu_on``): the rule follows where the value was set, not which class was looked up, so a user's
    ``H200_SXM_141GBx2`` derived from ``H200_SXM_141GB`` gets two GPUs' worth of what it inherits, and what it sets
    itself is the whole system's. A ``BestCpuPrecision`` is this machine's choice, its source saying why."""
    layer: dict[str, Setting] = {}
    for name, (value, owner) in config.field_owners().items():
        if isinstance(value, BestCpuPrecision):  # the CPU decides: bf16 only with bf16 arithmetic
            chosen, why = value.choose()
            layer[name] = Setting(chosen, f"{owner.__name__}: {why}")
        else:
            layer[name] = Setting(value, owner.__name__, _note(owner, name),
                                  FIELDS[name].system_rate and _per_gpu_on(config, owner, system))
    return layer


def rung_layer(config: type[BenchmarkConfiguration], rung: Rung, system: str) -> dict[str, Setting]:
    """The rung's values, each with its source (``H200_SXM_141GB engine_ladder[fp8]``); a rate is one GPU's as the
    class that set the ladder's own are. A value a subclass of that class sets itself is left out: the nearest class
    wins, so the class layer's value stays."""
    owner = config.ladder_owner()
    assert owner is not None, "a rung comes from a ladder"
    setters = config.field_owners()
    per_gpu = _per_gpu_on(config, owner, system)
    layer: dict[str, Setting] = {}
    for name, value in rung.values.items():
        setter = setters.get(name, (None, None))[1]
        if setter is not None and setter is not owner and issubclass(setter, owner):
            continue  # set by a class below the ladder's: its own system's value
        layer[name] = Setting(value, f"{owner.__name__} engine_ladder[{rung.name}]", _note(owner, name),
                              per_gpu and FIELDS[name].system_rate)
    return layer


def _note(owner: type[BenchmarkConfiguration], name: str) -> str:
    """The note ``owner`` itself keeps for field ``name`` (``value_notes``: an estimate, a value derived from the
    GPU), "" without one."""
    note: str = vars(owner).get("value_notes", {}).get(name, "")
    return note


def system_scaled(config: type[BenchmarkConfiguration], system: str,
                  laid: dict[str, Setting]) -> dict[str, tuple[Any, str]]:
    """The system scaling of the class and rung layers, in one place: each per-GPU rate times the system's GPU count
    (``system_gpus``), its source saying by how many (``H200_SXM_141GB x 2 GPUs``), then the setting class's note.
    The count is asked only when a rate is to be scaled, so a CPU system never asks NVML."""
    gpus = system_gpus(config, system) if any(setting.per_gpu for setting in laid.values()) else (None, "")
    values: dict[str, tuple[Any, str]] = {}
    for name, setting in laid.items():
        value, source = setting.value, setting.source
        if setting.per_gpu:
            value, source = _scaled_rate(name, value, source, gpus)
        values[name] = (value, f"{source} ({setting.note})" if setting.note else source)
    return values


def system_values(config: type[BenchmarkConfiguration], system: str) -> dict[str, tuple[Any, str]]:
    """The config class's fields as ``system``'s values (its layer, scaled), each with its source as `make info`
    shows it."""
    return system_scaled(config, system, class_layer(config, system))


def resolve_fields(
    benchmark: Benchmark,
    scenario: Scenario,
    system: str,
    workload: WorkloadSetting,
    config_class: str,
    from_config: dict[str, tuple[Any, str]],
    overrides: dict[str, Any],
    tuned: dict[str, tuple[Any, str]] | None = None,
    rung_fields: frozenset[str] = frozenset(),
) -> ResolvedConfig:
    """RUN_ARGS > tuned > rung > config class > field default, for the fields that apply to this benchmark and
    scenario.

    ``from_config`` maps each field the config class sets (itself or by inheritance), with the chosen rung's values
    of an engine ladder laid over them (code/config/registry.py), to its value and the name of what set it, so a
    resolved value can say where it came from; ``tuned`` the same for the values ``make find_performance`` stored
    (source ``tuned (<file>)``); ``rung_fields`` the fields the rung's values set, so each value's layer is known
    (``where_from``). The rules between fields (``check_combination``) and the bound on what LoadGen plans
    (``check_plan``) run last, on the final values.
    """
    tuned = tuned or {}
    resolved = ResolvedConfig(benchmark, scenario, system, workload, config_class)
    applicable: list[Field] = [f for f in FIELDS.values() if f.applies_to(benchmark, scenario)]
    for fld in applicable:
        if fld.name in overrides:
            resolved.values[fld.name], resolved.sources[fld.name] = overrides[fld.name], "RUN_ARGS"
            resolved.layers[fld.name] = "RUN_ARGS"
        else:
            below = from_config.get(fld.name, (fld.default, "default"))
            if fld.name in tuned:
                resolved.values[fld.name], resolved.sources[fld.name] = tuned[fld.name]
                resolved.replaced[fld.name] = below
                resolved.layers[fld.name] = "tuned"
            else:
                resolved.values[fld.name], resolved.sources[fld.name] = below
                resolved.layers[fld.name] = ("rung" if fld.name in rung_fields
                                             else "class" if fld.name in from_config else "default")
    check_combination(benchmark, resolved.values, resolved.sources)
    check_plan(scenario, resolved.values, resolved.sources)
    return resolved


def system_ladder(config: type[BenchmarkConfiguration], system: str,
                  below: dict[str, Setting]) -> tuple[Ladder, tuple[tuple[str, str], ...]]:
    """The class's engine ladder as ``system`` runs it: the rungs its GPU model can run (code/config/capabilities.py)
    and the others, each with the reason it is skipped. A system of no known GPU model (``CPU``, ``MyBox``) runs the
    ladder as it is. Refuses a ladder of which the GPU runs no rung, saying why for each."""
    ladder = config.engine_ladder if config.ladder_owner() else ()
    gpu = (gpu_model_for_system(system) or config.gpu_model) if ladder else None  # MyBox: its class's GPU model
    if gpu is None:
        return ladder, tuple(config.skipped_rungs)
    kept, skipped = runnable_rungs(config.benchmark, ladder, {name: setting.value for name, setting in below.items()},
                                   gpu.capability)
    skipped = tuple(config.skipped_rungs) + skipped
    if not kept:
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped)
        raise NoEngineError(f"{system}: {gpu.name} ({gpu.describe()}) runs no engine of config class "
                            f"{config.__name__}'s ladder ({reasons}); give the class an engine this GPU runs", skipped)
    return kept, skipped


def choose_rung(config: type[BenchmarkConfiguration], ladder: Ladder, name: str | None,
                below: dict[str, Setting], overrides: dict[str, Any]) -> Rung | None:
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
        return matching_rung(ladder, {field: setting.value for field, setting in below.items()}, overrides)
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
    """One config's resolution, one pipeline: the layers in order (``LAYERS``: the field's default, the config
    class's value, the rung of its engine ladder, the tuned value, RUN_ARGS), each laid over those below it, then
    the system scaling once (``system_scaled``: a per-GPU rate of the class or rung times the system's GPU count;
    ``share_of_devices``: the share of the GPUs ``--devices`` names).

    The class is looked up for the system (``ConfigRegistry.get``); the rung is the one ``rung`` names, else the one
    RUN_ARGS' engine fields name, else the ladder's first (``choose_rung``); the tuned value is the one ``make
    find_performance`` stored for this system and engine (``code/config/tuned.py``), a whole-system value as it is,
    and ``warn_tuned`` says whether an unusable tuned file is warned about here (a test process leaves that to its
    parent, which already did). Each value keeps its layer and source (``where_from``)."""
    config = ConfigRegistry.get(benchmark, scenario, system, workload)
    laid = class_layer(config, system)
    ladder, skipped = system_ladder(config, system, laid)
    chosen = choose_rung(config, ladder, rung, laid, overrides)
    rung_laid = rung_layer(config, chosen, system) if chosen is not None else {}
    values = system_scaled(config, system, {**laid, **rung_laid})
    tuned = tuned_fields(system, benchmark.submission_name(workload.accuracy_target), scenario, warn=warn_tuned,
                         overrides=overrides, engine=chosen.name if chosen else "")
    resolved = resolve_fields(benchmark, scenario, system, workload, config.__name__, values, overrides, tuned,
                              frozenset(rung_laid))
    share_of_devices(resolved, config)
    resolved.ladder = ladder
    resolved.skipped = skipped
    resolved.rung = chosen
    resolved.engine_given = tuple(given_engine_fields(resolved.ladder, overrides))
    if rung is None and chosen is not None and not resolved.engine_given:
        check_every_rung_takes(benchmark, scenario, system, workload, overrides, resolved.ladder, chosen)
    return resolved


# The whole-system rate of each scenario that has one, which a run on a share of the system's GPUs expects that
# share of.
RATE_FIELDS = {Scenario.Offline: "offline_expected_qps", Scenario.Server: "server_target_qps"}


def device_share(devices: list[str], system_gpus: int) -> float:
    """The share of the system's GPUs a run uses: a config's QPS is for the whole system (a GPU model's per-GPU
    rate times the system's GPUs), so a run on fewer GPUs expects that share of it."""
    gpus = [device for device in devices if device.startswith("cuda")]
    if not gpus or system_gpus <= len(gpus):
        return 1.0
    return len(gpus) / system_gpus


def scales_qps(config: ResolvedConfig) -> bool:
    """Whether the test's QPS is the whole system's, to scale by the share of GPUs used: Offline's and Server's
    from a config class, a rung or a tuned file; not one given in RUN_ARGS (the run's own) or measured by a probe on
    the same devices, nor SingleStream's latency."""
    name = RATE_FIELDS.get(config.scenario)
    return name is not None and config.sources.get(name) not in ("RUN_ARGS", "probe")


def share_of_devices(resolved: ResolvedConfig, config: type[BenchmarkConfiguration]) -> None:
    """The last step of the system scaling: a run on the GPUs ``--devices`` names (``0,1``), fewer than the
    system's, expects that share of the whole-system rate, so the rate is scaled here, once, and `make info` shows
    the value the run uses. ``devices=all``, a CPU run and a rate that is the run's own (``scales_qps``) keep theirs.
    A run whose devices turn out to be another share (``CUDA_VISIBLE_DEVICES`` hides some) scales the rest itself
    (code/processes/run_single_test.py)."""
    named = str(resolved.values.get("devices", "all"))
    if named == "all" or resolved.values.get("device") == "cpu" or not scales_qps(resolved):
        return
    indices = named.split(",")
    count, _ = system_gpus(config, resolved.system)
    share = device_share([f"cuda:{index}" for index in indices], count or 0)
    if share == 1.0:
        return
    name = RATE_FIELDS[resolved.scenario]
    resolved.values[name] = resolved.values[name] * share
    resolved.sources[name] = f"{resolved.sources[name]}, x {len(indices)}/{count} GPUs (--devices={named})"
    resolved.device_share = share


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
