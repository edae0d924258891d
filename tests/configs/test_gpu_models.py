"""A config class of a GPU model serves any count of it (code/config/registry.py): lookup, what is scaled, what is
not, a system's own class, and the errors that name the fix."""

import json

import pytest

from code.common import systems
from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.system_description import shown
from code.common.systems import CPU_SYSTEM, DetectedSystem, GpuInfo, gpu_model_and_count
from code.config.fields import FIELDS, FieldError
from code.config.registry import ConfigRegistry
from code.config.resolve import resolve_config
from code.config.resolved import ConfigError, WorkloadSetting
from configs.bert.Offline import H200_SXM_141GB, H200_SXM_141GB_HighAccuracy, OfflineBaseConfig

RATES = {Scenario.Offline: "offline_expected_qps", Scenario.Server: "server_target_qps"}
COUNTS = (1, 2, 4, 8)
register = ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)


def _load_all() -> None:
    for benchmark in Benchmark:
        for scenario in Scenario:
            ConfigRegistry.load(benchmark, scenario)


def gpu_models() -> list[str]:
    """Every GPU model with a class: a registered name without a GPU count, other than CPU."""
    _load_all()
    return sorted({key[2] for key in ConfigRegistry.registered()
                   if gpu_model_and_count(key[2]) is None and key[2] != CPU_SYSTEM})


@pytest.fixture
def scratch_registry(monkeypatch):
    """Classes a test registers are gone after it: the registry is a copy, taken once every shipped config is in."""
    _load_all()
    monkeypatch.setattr(ConfigRegistry, "_classes", dict(ConfigRegistry._classes))


def first_engine(config_class, name):
    """A class's value of ``name`` for the engine a run starts with: its engine ladder's first rung's, if it sets it."""
    ladder = config_class.engine_ladder
    return ladder[0].values[name] if ladder and name in ladder[0].values else getattr(config_class, name)


def resolve(benchmark, scenario, system, target=AccuracyTarget.k_99, overrides=None):
    return resolve_config(benchmark, scenario, system, WorkloadSetting(accuracy_target=target), overrides or {})


def test_the_shipped_gpu_models_have_classes():
    assert {"H100_SXM_80GB", "H200_SXM_141GB"} <= set(gpu_models())


def test_only_throughputs_scale_with_the_gpu_count():
    assert {name for name, fld in FIELDS.items() if fld.system_rate} == set(RATES.values())


@pytest.mark.parametrize("scenario", list(Scenario))
@pytest.mark.parametrize(("benchmark", "target"), [(b, t) for b in Benchmark for t in b.accuracy_targets])
@pytest.mark.parametrize("model", gpu_models())
def test_every_count_of_a_gpu_model_uses_its_class_with_rates_times_the_count(model, benchmark, scenario, target):
    suffix = "_HighAccuracy" if target is AccuracyTarget.k_99_9 else ""
    one = resolve(benchmark, scenario, f"{model}x1", target)
    rate = RATES.get(scenario)
    for count in COUNTS:
        config = resolve(benchmark, scenario, f"{model}x{count}", target)
        assert config.config_class == f"{model}{suffix}"
        for name, value in config.values.items():
            if name == rate:
                assert value == one[name] * count
                assert config.sources[name].endswith(f" x {count} GPU{'s' if count > 1 else ''}")
            elif name != "round":  # latencies, batch sizes, engines: one GPU's are every count's (the round is
                # the test's default for the system's type, which a count with no systems/<name>.json does not say)
                assert (value, config.sources[name]) == (one[name], one.sources[name]), name


def test_make_info_names_the_class_and_the_count():
    config = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx2", AccuracyTarget.k_99_9)
    assert config.sources["offline_expected_qps"] == ("H200_SXM_141GB_HighAccuracy engine_ladder[fp8-fast-accum] "
                                                      "x 2 GPUs")
    assert config["offline_expected_qps"] == 2 * first_engine(H200_SXM_141GB_HighAccuracy, "offline_expected_qps")
    assert config.sources["gpu_batch_size"] == "H200_SXM_141GB"


def test_a_system_named_after_a_model_without_count_is_one_gpu_unscaled():
    """The class of a model, looked up by its own name, is what it describes: one GPU."""
    config = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GB")
    assert config["offline_expected_qps"] == first_engine(H200_SXM_141GB, "offline_expected_qps")
    first_rung = H200_SXM_141GB.engine_ladder[0].name
    assert config.sources["offline_expected_qps"] == f"H200_SXM_141GB engine_ladder[{first_rung}]"


def test_a_systems_own_class_wins_and_its_own_rate_is_the_whole_systems(scratch_registry):
    @register
    class H200_SXM_141GBx2(OfflineBaseConfig):
        gpu_batch_size = 64
        offline_expected_qps = 1234.0

    config = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx2")
    assert config.config_class == "H200_SXM_141GBx2"
    assert (config["offline_expected_qps"], config.sources["offline_expected_qps"]) == (1234.0, "H200_SXM_141GBx2")
    assert config["gpu_batch_size"] == 64
    other = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx4")  # the other counts keep the model's
    assert other.config_class == "H200_SXM_141GB"
    assert other["offline_expected_qps"] == 4 * first_engine(H200_SXM_141GB, "offline_expected_qps")


def test_a_systems_class_derived_from_its_model_scales_what_it_inherits_only(scratch_registry):
    """What make add_system writes: inherited throughputs are per GPU (x the count), its own are the system's."""
    @register
    class H200_SXM_141GBx4(H200_SXM_141GB):
        gpu_batch_size = 256

    inherited = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx4")
    assert inherited.config_class == "H200_SXM_141GBx4" and inherited["gpu_batch_size"] == 256
    assert inherited["offline_expected_qps"] == 4 * first_engine(H200_SXM_141GB, "offline_expected_qps")
    first_rung = H200_SXM_141GB.engine_ladder[0].name
    assert inherited.sources["offline_expected_qps"] == f"H200_SXM_141GB engine_ladder[{first_rung}] x 4 GPUs"

    @register
    class H200_SXM_141GBx8(H200_SXM_141GB):
        offline_expected_qps = 50_000.0

    own = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx8")
    assert (own["offline_expected_qps"], own.sources["offline_expected_qps"]) == (50_000.0, "H200_SXM_141GBx8")


def test_a_name_without_a_count_takes_its_gpus_from_its_class_description_or_machine(scratch_registry, tmp_path,
                                                                                   monkeypatch):
    """A system named without a count (``MyBox``) whose class inherits a model's per-GPU rates multiplies them by
    its class's gpu_count, else its description's accelerators_per_node, else this machine's GPUs; with none, they
    stay one GPU's and the source says why. What its own class sets is the whole system's."""
    @register
    class CountlessBox(H200_SXM_141GB):
        pass

    per_gpu = first_engine(H200_SXM_141GB, "offline_expected_qps")
    rate = f"H200_SXM_141GB engine_ladder[{H200_SXM_141GB.engine_ladder[0].name}]"
    monkeypatch.setattr(systems, "SYSTEMS_DIR", tmp_path)
    monkeypatch.setattr(systems, "this_machine", lambda: DetectedSystem())  # no GPU here
    alone = resolve(Benchmark.BERT, Scenario.Offline, "CountlessBox")
    assert (alone["offline_expected_qps"], alone.sources["offline_expected_qps"]) == (per_gpu, (
        f"{rate}, one GPU's: CountlessBox states no GPU count and this machine has no GPU: set gpu_count in its class "
        "(make add_system SYSTEM=CountlessBox GPU_MODEL=<model> GPU_COUNT=<count> writes it) or "
        "accelerators_per_node in systems/CountlessBox.json"))

    h200 = GpuInfo("NVIDIA H200", 141 * 2**30, (9, 0))
    monkeypatch.setattr(systems, "this_machine", lambda: DetectedSystem(gpus=(h200,) * 4))
    here = resolve(Benchmark.BERT, Scenario.Offline, "CountlessBox")
    assert (here["offline_expected_qps"], here.sources["offline_expected_qps"]) == (
        4 * per_gpu, f"{rate} x 4 GPUs (this machine's GPUs, which a run uses)")

    description = tmp_path / "CountlessBox.json"
    description.write_text(json.dumps({"accelerators_per_node": "8"}))
    described = resolve(Benchmark.BERT, Scenario.Offline, "CountlessBox")
    assert (described["offline_expected_qps"], described.sources["offline_expected_qps"]) == (
        8 * per_gpu, f"{rate} x 8 GPUs (accelerators_per_node of {shown(description)})")

    @register
    class CountedBox(H200_SXM_141GB):  # what make add_system writes for MyBox with GPU_COUNT=2
        gpu_count = 2

    @register
    class OwnRateBox(H200_SXM_141GB):
        gpu_count = 2
        offline_expected_qps = 1234.0

    counted = resolve(Benchmark.BERT, Scenario.Offline, "CountedBox")
    assert (counted["offline_expected_qps"], counted.sources["offline_expected_qps"]) == (
        2 * per_gpu, f"{rate} x 2 GPUs")
    own = resolve(Benchmark.BERT, Scenario.Offline, "OwnRateBox")  # the whole system's, as it is
    assert (own["offline_expected_qps"], own.sources["offline_expected_qps"]) == (1234.0, "OwnRateBox")
    assert resolve(Benchmark.BERT, Scenario.Offline, CPU_SYSTEM).sources["offline_expected_qps"] == CPU_SYSTEM


def test_run_args_beat_the_scaled_rate():
    config = resolve(Benchmark.GPTJ, Scenario.Server, "H100_SXM_80GBx4", overrides={"server_target_qps": 3.0})
    assert (config["server_target_qps"], config.sources["server_target_qps"]) == (3.0, "RUN_ARGS")


def test_a_run_on_part_of_the_gpus_expects_their_share_of_the_systems_rate():
    """``--devices``: values stay the whole system's; the run scales them by the share of GPUs it uses."""
    from code.config.resolve import device_share, scales_qps
    from code.mlperf.user_conf import user_conf_entries

    config = resolve(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx8")
    per_gpu = first_engine(H200_SXM_141GB, "offline_expected_qps")
    assert config["offline_expected_qps"] == 8 * per_gpu and scales_qps(config)
    share = device_share(["cuda:0", "cuda:1"], 8)
    entries = user_conf_entries(config, 10833, device_share=share)
    assert float(entries["target_qps"]) == 2 * per_gpu


def test_an_unknown_gpu_model_names_make_add_system(monkeypatch):
    monkeypatch.setattr("code.common.systems.this_machine", lambda: DetectedSystem())  # a machine without GPUs
    with pytest.raises(ConfigError) as caught:
        resolve(Benchmark.BERT, Scenario.Offline, "Future_GPU_300GBx2")
    message = str(caught.value)
    assert message.startswith("no config for system Future_GPU_300GBx2 (nor for its GPU model Future_GPU_300GB), "
                              "bert/Offline, custom_k_99_MaxP; configured: CPU, H100_SXM_80GB, H200_SXM_141GB")
    assert "a GPU model's class serves any count of it" in message and "`make add_system`" in message


def test_a_known_model_without_the_workload_lists_the_models_configs():
    with pytest.raises(ConfigError, match=r"no config for system H200_SXM_141GBx2 \(nor for its GPU model "
                                          r"H200_SXM_141GB\).*H200_SXM_141GB has configs for: custom_k_99_9_MaxP, "
                                          r"custom_k_99_MaxP"):
        resolve_config(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx2",
                       WorkloadSetting(power_setting=PowerSetting.MaxQ), {})


def test_a_scaled_rate_out_of_range_names_the_class_and_count(scratch_registry):
    @register
    class Huge_GPU_80GB(OfflineBaseConfig):
        gpu_batch_size = 8
        offline_expected_qps = 600_000.0

    assert resolve(Benchmark.BERT, Scenario.Offline, "Huge_GPU_80GBx1")["offline_expected_qps"] == 600_000.0
    with pytest.raises(FieldError, match=r"config class Huge_GPU_80GB x 2 GPUs: field 'offline_expected_qps' = "
                                         r"1200000.0 is out of range"):
        resolve(Benchmark.BERT, Scenario.Offline, "Huge_GPU_80GBx2")
