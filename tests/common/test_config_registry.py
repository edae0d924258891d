"""The config registry: validation at registration, lookup errors, and RUN_ARGS > config > default."""

import pytest

from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.common.systems import DetectedSystem
from code.config.classes import shared_values
from code.config.registry import ConfigRegistry
from code.config.resolve import resolve_config
from code.config.resolved import ConfigError, WorkloadSetting
from configs.bert.Offline import OfflineBaseConfig
from configs.bert.Server import ServerBaseConfig

register = ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
register_999 = ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99_9, PowerSetting.MaxP)
# CPU, and each GPU model with a class at some of the counts its class serves.
SHIPPED_SYSTEMS = ["CPU", "H100_SXM_80GBx1", "H100_SXM_80GBx2", "H100_SXM_80GBx8", "H200_SXM_141GBx1",
                   "H200_SXM_141GBx4", "H200_SXM_141GBx8"]


@pytest.mark.parametrize("scenario", list(Scenario))
@pytest.mark.parametrize("system", SHIPPED_SYSTEMS)
@pytest.mark.parametrize("target", list(AccuracyTarget))
def test_every_shipped_system_resolves(system, scenario, target):
    config = resolve_config(Benchmark.BERT, scenario, system, WorkloadSetting(accuracy_target=target), {})
    assert config["gpu_batch_size"] >= 1
    assert config.benchmark_name == f"bert-{target.suffix}"
    configured_by = system.rpartition("x")[0] or system  # a GPU system's class is its GPU model's
    assert config.config_class == configured_by + ("_HighAccuracy" if target is AccuracyTarget.k_99_9 else "")
    if system != "CPU":  # the tanh GELU epilogue keeps >= 99% span agreement, not 99.9%
                         # (documentation/notes/journal/2026-11-22.md)
        assert config["gelu_in_gemm"] is (target is AccuracyTarget.k_99)


def test_unknown_field_names_class_and_field():
    with pytest.raises(ConfigError, match=r"Typo_x1: unknown field 'gpu_batch_sise'"):
        @register
        class Typo_x1(OfflineBaseConfig):
            gpu_batch_sise = 8
            offline_expected_qps = 1.0


def test_wrong_type_names_field():
    with pytest.raises(ConfigError, match=r"WrongType_x1.*'gpu_batch_size' must be int"):
        @register
        class WrongType_x1(OfflineBaseConfig):
            gpu_batch_size = "8"
            offline_expected_qps = 1.0


def test_bad_choice_lists_valid_ones():
    with pytest.raises(ConfigError, match=r"precision.*valid choices: fp32, fp16, bf16"):
        @register
        class BadChoice_x1(OfflineBaseConfig):
            gpu_batch_size = 8
            offline_expected_qps = 1.0
            precision = "int3"


def test_field_set_twice_is_an_error():
    with pytest.raises(ConfigError, match=r"Twice_x1: field 'gpu_batch_size' is set twice"):
        class Twice_x1(OfflineBaseConfig):
            gpu_batch_size = 8
            gpu_batch_size = 16  # noqa: PIE794


def test_missing_required_field():
    with pytest.raises(ConfigError, match=r"Missing_x1: required field 'offline_expected_qps' is missing"):
        @register
        class Missing_x1(OfflineBaseConfig):
            gpu_batch_size = 8


def test_field_of_another_scenario_is_rejected():
    with pytest.raises(ConfigError, match=r"'server_target_qps' does not apply to bert/Offline"):
        @register
        class OtherScenario_x1(OfflineBaseConfig):
            gpu_batch_size = 8
            offline_expected_qps = 1.0
            server_target_qps = 5.0


def test_duplicate_registration():
    @register
    class Dup_x1(ServerBaseConfig):
        gpu_batch_size = 8
        server_target_qps = 1.0

    with pytest.raises(ConfigError, match="already registered by Dup_x1"):
        register(type("Dup_x1", (Dup_x1,), {}))


def test_variant_inherits_and_registers_under_the_same_system():
    @register
    class Variant_x2(OfflineBaseConfig):
        gpu_batch_size = 8
        offline_expected_qps = 3.0

    @register_999
    class Variant_x2_HighAccuracy(Variant_x2):
        precision = "fp16"

    config = resolve_config(Benchmark.BERT, Scenario.Offline, "Variant_x2",
                            WorkloadSetting(accuracy_target=AccuracyTarget.k_99_9), {})
    assert config["offline_expected_qps"] == 3.0 and config["precision"] == "fp16"


def test_shared_values_set_fields_on_the_class_they_decorate():
    @register_999
    @shared_values(precision="fp32", gelu_in_gemm=False)
    class Shared_x3(OfflineBaseConfig):
        gpu_batch_size = 8
        offline_expected_qps = 3.0

    config = resolve_config(Benchmark.BERT, Scenario.Offline, "Shared_x3",
                            WorkloadSetting(accuracy_target=AccuracyTarget.k_99_9), {})
    assert (config["precision"], config.sources["precision"]) == ("fp32", "Shared_x3")
    assert config["gelu_in_gemm"] is False


def test_shared_values_refuse_a_field_the_class_sets_or_an_unknown_one():
    with pytest.raises(ConfigError, match=r"config class Both sets precision, which its shared values set too"):
        @shared_values(precision="fp32")
        class Both(OfflineBaseConfig):
            precision = "fp16"
    with pytest.raises(ConfigError, match=r"shared_values: unknown field\(s\) precisoin"):
        shared_values(precisoin="fp32")


def test_precedence_run_args_over_config_over_default():
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(),
                            {"gpu_batch_size": 3})
    assert (config["gpu_batch_size"], config.sources["gpu_batch_size"]) == (3, "RUN_ARGS")
    assert config.sources["precision"].startswith("CPU: this CPU has ")  # the CPU class's, chosen by the CPU
    assert config.sources["model_name"] == "BertBaseConfig"
    assert (config["seed"], config.sources["seed"]) == (0, "default")
    assert "server_target_qps" not in config.values  # not applicable to Offline


def test_cpu_threads_leave_server_a_free_core(monkeypatch):
    from code.mlperf import devices

    def threads(scenario, **overrides):
        config = resolve_config(Benchmark.BERT, scenario, "CPU", WorkloadSetting(), overrides)
        return devices.resolve_cpu_threads(config)

    monkeypatch.setattr(devices, "default_cpu_threads", lambda: 4)
    assert threads(Scenario.Server) == 3
    assert threads(Scenario.Offline) == 4 and threads(Scenario.SingleStream) == 4
    assert threads(Scenario.Server, cpu_threads=2) == 2  # an explicit value wins, in every scenario
    monkeypatch.setattr(devices, "default_cpu_threads", lambda: 1)
    assert threads(Scenario.Server) == 1
    with pytest.raises(ValueError, match=r"cpu_threads must be >= 0"):
        threads(Scenario.Offline, cpu_threads=-1)


def test_more_cpu_threads_than_the_cpus_can_use_is_refused_naming_a_value_that_fits(monkeypatch):
    """Bad input x40: --cpu_threads=4096 on 2 CPUs ended in a MemoryError traceback from thread stacks."""
    from code.config.fields import FieldError
    from code.mlperf import devices

    monkeypatch.setattr(devices, "allowed_cpus", lambda: 2)

    def threads(value):
        config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(), {"cpu_threads": value})
        return devices.resolve_cpu_threads(config)

    assert threads(2 * devices.THREADS_PER_CPU) == 2 * devices.THREADS_PER_CPU  # oversubscribed, but allowed
    with pytest.raises(FieldError) as refused:
        threads(4096)
    assert str(refused.value).startswith(f"--cpu_threads=4096 is more than {devices.THREADS_PER_CPU} threads for "
                                         "each of the 2 CPU(s) this process may use")
    assert "set --cpu_threads=2 (one a CPU), or leave it out" in str(refused.value)


def test_unknown_system_names_the_fix(monkeypatch):
    monkeypatch.setattr("code.common.systems.this_machine", lambda: DetectedSystem())  # a machine without GPUs
    with pytest.raises(ConfigError, match=r"no config for system Future_GPU_300GBx1.*make add_system"):
        resolve_config(Benchmark.BERT, Scenario.Offline, "Future_GPU_300GBx1", WorkloadSetting(), {})


def test_missing_workload_lists_the_systems_configs():
    with pytest.raises(ConfigError, match=r"CPU has configs for: custom_k_99_9_MaxP, custom_k_99_MaxP"):
        resolve_config(Benchmark.BERT, Scenario.Offline, "CPU",
                       WorkloadSetting(power_setting=PowerSetting.MaxQ), {})


def test_field_table_in_the_docs_is_current():
    from scripts.document_fields import PAGE, rewritten

    text = PAGE.read_text()
    assert rewritten(text) == text, "documentation/configs.md is stale: run `python -m scripts.document_fields`"


def test_backend_field_choices_are_the_declared_backends():
    """The ``backend`` and ``precision`` fields are one table for every benchmark: their choices must cover what
    the benchmarks' backends declare, and name no backend that none declares."""
    from code.config.backends import declarations
    from code.config.fields import FIELDS

    declared = [backend for benchmark in Benchmark for backend in declarations(benchmark)]
    assert set(FIELDS["backend"].choices) == {backend.name for backend in declared}
    for backend in declared:
        assert set(backend.precisions or ()) <= set(FIELDS["precision"].choices), backend.name


def test_run_args_resolve_the_same_config_again():
    """An engine error's rebuild command quotes ``run_args()``: pasted back, it must parse to the same fields."""
    from code.mlperf.arguments import parse_run_args

    workload = WorkloadSetting(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
    given = {"model_name": "tiny", "fast_path": False, "gpu_batch_size": 8}
    config = resolve_config(Benchmark.BERT, Scenario.SingleStream, "CPU", workload, given)
    assert config.run_args() == ("--benchmarks=bert-99 --scenarios=singlestream --fast_path=false "
                                 "--gpu_batch_size=8 --model_name=tiny")
    again = parse_run_args(["--action=generate_engines", *config.run_args().split()])
    assert again.scenarios == [Scenario.SingleStream] and again.overrides == given


def test_gptj_declared_precisions_are_what_the_backends_run():
    from code.gptj.backends import DECLARATIONS
    from code.gptj.backends.inflight import PRECISIONS as INFLIGHT_PRECISIONS
    from code.gptj.backends.pytorch import DTYPES

    declared = {backend.name: backend.precisions for backend in DECLARATIONS}
    assert set(declared["pytorch"]) == set(DTYPES) and set(declared["inflight"]) == set(INFLIGHT_PRECISIONS)


@pytest.mark.parametrize(("source", "error"), [
    ("precision = fp32\n", "NameError: name 'fp32' is not defined"),
    ("import configs.no_such_module\n", "ModuleNotFoundError: No module named 'configs.no_such_module'"),
    ("values = {}\nvalues['gpu_batch_size'] += 1  # a slip\n", "KeyError: 'gpu_batch_size'"),
])
def test_a_slip_in_a_config_file_is_one_line_naming_file_and_line(tmp_path, monkeypatch, source, error):
    """What a hand edit of a config class can raise while its module is imported: one ConfigError naming the file,
    the line, the error and the fix, never a traceback from the importer."""
    from code.config.registry import import_config_module

    package = tmp_path / "edited_configs"
    package.mkdir()
    (package / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = source.count("\n")
    with pytest.raises(ConfigError) as caught:
        import_config_module("edited_configs", package / "__init__.py", "fix that line")
    message = str(caught.value)
    assert message.startswith(f"{package / '__init__.py'} line {line} ("), message
    assert message.endswith(f"raised {error}; fix that line") and "\n" not in message, message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_registry_error_in_a_config_file_passes_unchanged(tmp_path, monkeypatch):
    from code.config.registry import import_config_module

    (tmp_path / "registered_twice.py").write_text(
        "from code.config.registry import ConfigError\nraise ConfigError('class X registers CPU twice')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="^class X registers CPU twice$"):
        import_config_module("registered_twice", tmp_path / "registered_twice.py", "fix")
