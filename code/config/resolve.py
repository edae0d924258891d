"""The resolution of one config, one pipeline: the layers in order, then the system scaling, then the rules.

The layers, lowest first (``LAYERS``): the field's default, the config class's value, the rung of its engine ladder
the run uses, the tuned value ``make find_performance`` stored, RUN_ARGS; each value keeps its layer and source.

The system scaling happens once. A throughput (``system_rate``) set by a class named after a GPU model is one GPU's,
multiplied by the system's GPU count (``system_scaled``) before the tuned value and RUN_ARGS, whole-system values, go
over it. A name without a count (``MyBox``) takes it from its class, its description or the machine. A run on fewer
GPUs than the system's (``--devices``) expects that share of the rate, so `make info` shows the rate the run uses.

A subclass's own value of a non-engine field wins over the rung of a ladder it inherits (the nearest class wins);
an engine field set below the ladder is refused, as it would make every rung the same engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from code.common import systems
from code.common.constants import DATASET_SIZE, EDGE_SETS, Benchmark, EdgeSet, Scenario, TestMode
from code.common.gpu_models import by_name
from code.common.rounds import SYSTEM_TYPES, RoundError, default_round, get_round
from code.common.system_description import DescriptionFiles, described_gpu_count, shown, system_type
from code.common.systems import SystemDetectionError, gpu_model_and_count, gpu_model_for_system
from code.config.capabilities import runnable_rungs
from code.config.classes import BenchmarkConfiguration
from code.config.cpu_features import BestCpuPrecision
from code.config.fields import FIELDS, FieldError, check_combination, check_plan
from code.config.ladder import Ladder, Rung, engine_fields, given_engine_fields, matching_rung
from code.config.registry import ConfigRegistry
from code.config.resolved import ConfigError, NoEngineError, ResolvedConfig, WorkloadSetting
from code.config.tuned import tuned_fields


def system_gpus(config: type[BenchmarkConfiguration], system: str) -> tuple[int | None, str]:
    """How many GPUs ``system`` has, from its name, its class's ``gpu_count``, its description or this machine, and
    where a count its name does not give comes from; None, with why, when nothing says."""
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
    """Whether the rates ``owner`` sets are one GPU's on ``system``: ``owner`` is per-GPU and not the system's own
    class. A name without a count is a system of GPUs unless its class runs on the CPU; a GPU model's own name
    (``H200_SXM_141GB``) is one GPU."""
    if not owner.per_gpu() or owner.system_name() == system:
        return False
    if gpu_model_and_count(system) is not None:
        return True
    return by_name(system) is None and config.fields().get("device") != "cpu"


@dataclass(frozen=True)
class Setting:
    """One layer's value of a field before the system scaling, with what set it, the setting class's note
    (``value_notes``), and whether it is one GPU's rate."""

    value: Any
    source: str
    note: str = ""
    per_gpu: bool = False


def _note(owner: type[BenchmarkConfiguration], name: str) -> str:
    return vars(owner).get("value_notes", {}).get(name, "")


def class_layer(config: type[BenchmarkConfiguration], system: str) -> dict[str, Setting]:
    """The class's fields, each with the class that set it: a rate is one GPU's by where it was set, not which
    class was looked up, so ``H200_SXM_141GBx2`` gets two GPUs' worth of what it inherits and its own as they are.
    A ``BestCpuPrecision`` is this machine's choice, its source saying why."""
    layer: dict[str, Setting] = {}
    for name, (value, owner) in config.field_owners().items():
        if isinstance(value, BestCpuPrecision):
            chosen, why = value.choose()
            layer[name] = Setting(chosen, f"{owner.__name__}: {why}")
        else:
            layer[name] = Setting(value, owner.__name__, _note(owner, name),
                                  FIELDS[name].system_rate and _per_gpu_on(config, owner, system))
    return layer


def rung_layer(config: type[BenchmarkConfiguration], rung: Rung, system: str) -> dict[str, Setting]:
    """The rung's values (source ``H200_SXM_141GB engine_ladder[fp8]``), but for those a subclass of the ladder's
    class sets itself: the nearest class wins."""
    owner = config.ladder_owner()
    setters = config.field_owners()
    per_gpu = _per_gpu_on(config, owner, system)
    layer: dict[str, Setting] = {}
    for name, value in rung.values.items():
        setter = setters.get(name, (None, None))[1]
        if setter is not None and setter is not owner and issubclass(setter, owner):
            continue
        layer[name] = Setting(value, f"{owner.__name__} engine_ladder[{rung.name}]", _note(owner, name),
                              per_gpu and FIELDS[name].system_rate)
    return layer


def system_scaled(config: type[BenchmarkConfiguration], system: str,
                  laid: dict[str, Setting]) -> dict[str, tuple[Any, str]]:
    """Each per-GPU rate times the system's GPU count, its source saying by how many (``H200_SXM_141GB x 2 GPUs``)
    or, with no count, that it stays one GPU's and why; then the setting class's note."""
    count, where = system_gpus(config, system) if any(setting.per_gpu for setting in laid.values()) else (None, "")
    values: dict[str, tuple[Any, str]] = {}
    for name, setting in laid.items():
        value, source = setting.value, setting.source
        if setting.per_gpu and not count:
            source = f"{source}, one GPU's: {where}"
        elif setting.per_gpu:
            source = f"{source} x {count} GPU{'s' if count != 1 else ''}"
            value = FIELDS[name].check(value * count, f"config class {source}")
            source = f"{source} ({where})" if where else source
        values[name] = (value, f"{source} ({setting.note})" if setting.note else source)
    return values


def system_values(config: type[BenchmarkConfiguration], system: str) -> dict[str, tuple[Any, str]]:
    """The config class's fields as ``system``'s values, each with its source as `make info` shows it."""
    return system_scaled(config, system, class_layer(config, system))


def system_ladder(config: type[BenchmarkConfiguration], system: str,
                  below: dict[str, Setting]) -> tuple[Ladder, tuple[tuple[str, str], ...]]:
    """The class's ladder as ``system``'s GPU model runs it, and the rungs skipped with why (a system of no known
    GPU model runs it as it is); refuses a ladder of which the GPU runs no rung."""
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
    """The rung named (the accuracy gate's choice); else the one RUN_ARGS' engine fields name (None if none does);
    else the ladder's first."""
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
    """RUN_ARGS > tuned > rung > config class > default for the fields that apply, the system scaling, then the
    rules between fields and the bound on LoadGen's plan. ``rung`` names the engine, else ``choose_rung`` picks it;
    ``warn_tuned``: whether an unusable tuned file is warned about here (a test process leaves that to its parent)."""
    config = ConfigRegistry.get(benchmark, scenario, system, workload)
    laid = class_layer(config, system)
    ladder, skipped = system_ladder(config, system, laid)
    chosen = choose_rung(config, ladder, rung, laid, overrides)
    rung_laid = rung_layer(config, chosen, system) if chosen is not None else {}
    from_config = system_scaled(config, system, {**laid, **rung_laid})
    tuned = tuned_fields(system, benchmark.submission_name(workload.accuracy_target), scenario, warn=warn_tuned,
                         overrides=overrides, engine=chosen.name if chosen else "")
    resolved = ResolvedConfig(benchmark, scenario, system, workload, config.__name__, ladder=ladder,
                              skipped=skipped, rung=chosen,
                              engine_given=tuple(given_engine_fields(ladder, overrides)))
    for fld in FIELDS.values():
        if not fld.applies_to(benchmark, scenario):
            continue
        name = fld.name
        below = from_config.get(name, (fld.default, "default"))
        if name in overrides:
            (value, source), layer = (overrides[name], "RUN_ARGS"), "RUN_ARGS"
        elif name in tuned:
            (value, source), layer = tuned[name], "tuned"
            resolved.replaced[name] = below
        else:
            (value, source), layer = below, ("rung" if name in rung_laid else
                                             "class" if name in from_config else "default")
        resolved.values[name], resolved.sources[name], resolved.layers[name] = value, source, layer
    if resolved.values.get("round") is None:
        resolved.values["round"] = default_round_of(resolved)
    check_combination(benchmark, resolved.values, resolved.sources)
    check_plan(scenario, resolved.values, resolved.sources)
    share_of_devices(resolved, config)
    if rung is None and chosen is not None and not resolved.engine_given:
        check_every_rung_takes(benchmark, scenario, system, workload, overrides, ladder, chosen)
    return resolved


def known_system_type(system: str) -> str | None:
    """The system's type from its description (systems/<system>.json); None when it says none the checker knows (the
    verdict names that problem; the round is then any type's)."""
    try:
        kind = system_type(system)
    except (SystemDetectionError, RoundError):
        return None
    return kind if kind in SYSTEM_TYPES else None


def edge_set(config: ResolvedConfig) -> EdgeSet | None:
    """The edge set the run is of, or None for the benchmark's full set. The one rule of which set a run uses: an
    edge system's run of a round whose checker names the benchmark apart there (``Round.edge_names``: v5.1's and
    v6.1's llama3.1-8b-edge) runs the edge set; a datacenter or datacenter,edge system's, an older round's (no edge
    set, none in its mlperf.conf) and a system's of unknown type (its verdict names that) the full set."""
    kind = known_system_type(config.system)
    if kind is None or get_round(config["round"]).checker_name(config.benchmark_name, kind) == config.benchmark_name:
        return None
    return EDGE_SETS[config.benchmark]


def loadgen_model(config: ResolvedConfig) -> str:
    """The mlperf.conf key the run's LoadGen settings are read under: the core's model and user.conf's prefix, which
    must be the same for LoadGen to read user.conf. An edge set's own key gives its sample counts (5,000, not
    13,368), which its checker requires and the 5,000 samples a run loads fill."""
    edge = edge_set(config)
    return edge.loadgen_model if edge else config.benchmark.loadgen_model


def dataset_size(config: ResolvedConfig) -> int:
    """The samples of the set the run uses (``edge_set``): its QSL's full size, which is also its mlperf.conf key's
    performance sample count and Offline minimum."""
    edge = edge_set(config)
    return edge.size if edge else DATASET_SIZE[config.benchmark]


def default_round_of(config: ResolvedConfig) -> str:
    """The round of a test whose run, config class and tuned values name none (``default_round``): a SubmissionRun
    only a clone-built round accepts is refused here, naming the round and ``LOADGEN_SRC``; a measurement of it runs
    with the newest buildable round that has the benchmark."""
    measuring = TestMode.parse(config.values.get("test_mode", TestMode.PerformanceOnly.value)) \
        is not TestMode.SubmissionRun
    return default_round(config.benchmark_name, config.scenario, known_system_type(config.system), measuring)


# The whole-system rate of each scenario that has one, which a run on a share of the system's GPUs expects that
# share of.
RATE_FIELDS = {Scenario.Offline: "offline_expected_qps", Scenario.Server: "server_target_qps"}


def device_share(devices: list[str], system_gpus: int) -> float:
    """The share of the system's GPUs a run uses, and so of the whole-system QPS it expects."""
    gpus = [device for device in devices if device.startswith("cuda")]
    if not gpus or system_gpus <= len(gpus):
        return 1.0
    return len(gpus) / system_gpus


def scales_qps(config: ResolvedConfig) -> bool:
    """Whether the test's QPS is the whole system's, to scale by the share of GPUs used: not a rate given in
    RUN_ARGS or measured by a probe on the same devices, nor SingleStream's latency."""
    name = RATE_FIELDS.get(config.scenario)
    return name is not None and config.sources.get(name) not in ("RUN_ARGS", "probe")


def share_of_devices(resolved: ResolvedConfig, config: type[BenchmarkConfiguration]) -> None:
    """Scale the whole-system rate by the share of GPUs ``--devices`` names, once, so `make info` shows the value the
    run uses. A run whose devices turn out another share (``CUDA_VISIBLE_DEVICES``) scales the rest itself
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
    """Refuse now RUN_ARGS that set an engine field no rung sets (``--fp8_residual``) where a rung the accuracy gate
    may fall back to cannot take them, rather than after an accuracy run has missed."""
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
