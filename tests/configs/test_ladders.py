"""Engine ladders in config classes (code/config/ladder.py, code/config/registry.py): what a class may list, where a
rung's values sit (RUN_ARGS > tuned > rung > config class > default), how RUN_ARGS choose an engine themselves, the
tuned values of each engine, and the shipped H100/H200 ladders (FP8 first)."""

import pytest

from code.common import paths
from code.common.constants import AccuracyTarget, Benchmark, HarnessType, PowerSetting, Scenario
from code.config import tuned
from code.config.fields import FIELDS, FieldError
from code.config.ladder import Rung, engine_values, same_engine
from code.config.registry import ConfigRegistry
from code.config.resolve import resolve_config
from code.config.resolved import ConfigError, WorkloadSetting
from configs.bert.Offline import OfflineBaseConfig

register = ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
LADDER = (Rung("fast", "FP8 GEMMs", precision="fp8", fp8_fast_accum=True, offline_expected_qps=90.0),
          Rung("safe", "fp16 GEMMs", precision="fp16", fp8_fast_accum=False))


@pytest.fixture
def scratch_registry(monkeypatch):
    """Classes a test registers are gone after it."""
    for scenario in Scenario:
        ConfigRegistry.load(Benchmark.BERT, scenario)
    monkeypatch.setattr(ConfigRegistry, "_classes", dict(ConfigRegistry._classes))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tuned, "code_version", lambda: "v-test")
    monkeypatch.setattr(tuned, "system_id", lambda: "Test CPU, 2 cores; no GPU")
    tuned._warned.clear()


def resolve(system, overrides=None, rung=None, benchmark=Benchmark.BERT, scenario=Scenario.Offline,
            target=AccuracyTarget.k_99):
    return resolve_config(benchmark, scenario, system, WorkloadSetting(accuracy_target=target), overrides or {},
                          rung=rung)


def box(ladder=LADDER, **fields):
    """A GPU model's class with ``ladder``: one GPU's values, its own engine the safe one."""
    body = {"engine_ladder": ladder, "device": "cuda", "precision": "fp16", "gpu_batch_size": 64,
            "offline_expected_qps": 40.0, **fields}
    return register(type("Ladder_Box", (OfflineBaseConfig,), body))


def test_a_rung_sits_between_tuned_values_and_the_class_and_names_itself_as_the_source(scratch_registry, store):
    box()
    first = resolve("Ladder_Boxx2")  # a GPU model's class: its rates (the rung's too) times the count
    assert first.rung.name == "fast" and [rung.name for rung in first.ladder] == ["fast", "safe"]
    assert (first["precision"], first.sources["precision"]) == ("fp8", "Ladder_Box engine_ladder[fast]")
    assert first["fp8_fast_accum"] is True and first["gpu_batch_size"] == 64  # the class's, shared by every rung
    assert (first["offline_expected_qps"], first.sources["offline_expected_qps"]) == (
        180.0, "Ladder_Box engine_ladder[fast] x 2 GPUs")
    safe = resolve("Ladder_Boxx2", rung="safe")  # the rung sets no rate: the class's own
    assert (safe["precision"], safe["offline_expected_qps"], safe.sources["offline_expected_qps"]) == (
        "fp16", 80.0, "Ladder_Box x 2 GPUs")
    assert first.as_dict()["engine_ladder"] == ["fast", "safe"] and first.as_dict()["rung"] == "fast"
    # a tuned value holds for the engine it was measured with
    path = tuned.write_tuned("Ladder_Boxx2", "bert-99", Scenario.Offline, 150.0, "search", engine="fast")
    assert resolve("Ladder_Boxx2").sources["offline_expected_qps"] == f"tuned ({path})"
    assert resolve("Ladder_Boxx2", rung="safe")["offline_expected_qps"] == 80.0
    _, problem = tuned.read_tuned("Ladder_Boxx2", "bert-99", Scenario.Offline, engine="safe")
    assert "it was measured with engine fast, this run uses engine safe" in problem
    with pytest.raises(ConfigError, match=r"engine 'turbo' is not a rung of config class Ladder_Box's "
                                          r"engine_ladder \(fast, safe\)"):
        resolve("Ladder_Boxx2", rung="turbo")


def test_run_args_that_name_an_engine_skip_the_ladder_and_keep_its_rung_values(scratch_registry, store):
    box()
    given = resolve("Ladder_Boxx1", {"precision": "fp8", "fp8_fast_accum": True})
    assert given.engine_given == ("precision", "fp8_fast_accum") and given.rung.name == "fast"
    assert given["offline_expected_qps"] == 90.0 and given.sources["precision"] == "RUN_ARGS"
    safe = resolve("Ladder_Boxx1", {"precision": "fp16"})  # fp8_fast_accum: the class's (default) False, as "safe"
    assert safe.rung.name == "safe" and safe["offline_expected_qps"] == 40.0
    none = resolve("Ladder_Boxx1", {"precision": "bf16"})  # no rung runs bf16: the class's own values
    assert none.rung is None and none.engine_given == ("precision",) and none["offline_expected_qps"] == 40.0
    rate = resolve("Ladder_Boxx1", {"offline_expected_qps": 70.0})  # not an engine field: the ladder stays
    assert rate.rung.name == "fast" and rate.engine_given == () and rate["offline_expected_qps"] == 70.0
    assert engine_values(given.values)["precision"] == "fp8" and "offline_expected_qps" not in engine_values(
        given.values)


def test_a_subclass_keeps_its_own_rate_and_may_end_or_replace_the_ladder(scratch_registry, store):
    parent = box()

    @register
    class Ladder_Boxx4(parent):  # a system's own class: its rate is the whole system's, for whatever engine
        offline_expected_qps = 500.0

    config = resolve("Ladder_Boxx4")
    assert config.rung.name == "fast" and (config["offline_expected_qps"], config.sources["offline_expected_qps"]) \
        == (500.0, "Ladder_Boxx4")

    @register
    class Ladder_Boxx8(parent):
        engine_ladder = ()
        precision = "bf16"

    plain = resolve("Ladder_Boxx8")
    assert plain.ladder == () and plain.rung is None and plain["precision"] == "bf16"


@pytest.mark.parametrize("ladder,words", [
    ([LADDER[0]], "engine_ladder must be a tuple of Rung"),
    ((Rung("Fast!", "x", precision="fp8"),), "rung name 'Fast!' must be lower-case"),
    ((LADDER[0], LADDER[0]), "names rung 'fast' twice"),
    ((Rung("fast", "", precision="fp8"),), "rung 'fast' has no description"),
    ((Rung("fast", "x", precission="fp8"),), "rung 'fast': unknown field 'precission'"),
    ((Rung("fast", "x", kv_cache_dtype="fp8"),), "field 'kv_cache_dtype' does not apply to bert/Offline"),
    ((Rung("fast", "x", precision="fp4"),), "'precision' = 'fp4'; valid choices"),
    ((Rung("fast", "x", offline_expected_qps=9.0),), "rung 'fast' sets no field that makes an engine"),
])
def test_a_ladder_that_could_not_run_is_refused_naming_the_rung(scratch_registry, ladder, words):
    with pytest.raises(ConfigError, match="config class Ladder_Box") as caught:
        box(ladder)
    assert words in str(caught.value)


def test_an_engine_field_below_the_ladder_is_refused(scratch_registry):
    parent = box()
    with pytest.raises(ConfigError, match=r"config class Ladder_Boxx2 sets precision, an engine field the rungs of "
                                          r"the engine_ladder it inherits from Ladder_Box set: every rung would run "
                                          r"the same engine"):
        register(type("Ladder_Boxx2", (parent,), {"precision": "fp16"}))


SYSTEMS = ("H100_SXM_80GBx1", "H200_SXM_141GBx8")


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("scenario", list(Scenario))
def test_the_shipped_gpu_ladders_start_with_fp8_and_end_with_a_16_bit_engine(system, scenario):
    # FP8 attention tops bert-99's ladders; the e4m3 residual alone is a rung where it is measured (H200 Offline and
    # Server); INT8 sits under the FP8 engines, where its throughput on an H200 puts it
    expected = {("bert", AccuracyTarget.k_99): ["fp8-attention", "fp8-fast-accum", "int8", "fp16"],
                ("bert", AccuracyTarget.k_99_9): ["fp8-fast-accum", "fp8-exact-attention", "fp8", "fp16"],
                ("gptj", AccuracyTarget.k_99): ["fp8-fast-accum", "fp8", "fp8-gemms", "bf16"],
                ("gptj", AccuracyTarget.k_99_9): ["fp8-fast-accum", "fp8", "fp8-gemms", "bf16"]}
    if system.startswith("H200") and scenario is not Scenario.SingleStream:
        expected[("bert", AccuracyTarget.k_99)] = ["fp8-attention", "fp8-residual", "fp8-fast-accum", "int8", "fp16"]
    for (name, target), names in expected.items():
        benchmark = Benchmark(name)
        config = resolve(system, benchmark=benchmark, scenario=scenario, target=target)
        assert [rung.name for rung in config.ladder] == names
        assert config.rung is config.ladder[0] and config["precision"] == "fp8"
        if benchmark is Benchmark.GPTJ:
            assert config["kv_cache_dtype"] == "fp8"  # FP8 GEMMs and KV cache, as NVIDIA's submissions run
        last = resolve(system, benchmark=benchmark, scenario=scenario, target=target, rung=names[-1])
        assert last["precision"] in ("fp16", "bf16")
        # the last rung is the class's own engine: what it runs with is the class's own values (times the count)
        config_class = ConfigRegistry.get(benchmark, scenario, system, WorkloadSetting(accuracy_target=target))
        count = int(system.rpartition("x")[2])
        for field in ("precision", "offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns",
                      "gpu_batch_size", "batch_timeout_us"):
            if field in last.values:
                scale = count if FIELDS[field].system_rate else 1
                assert last[field] == getattr(config_class, field) * scale, (name, target, field)
        if benchmark is Benchmark.BERT:
            assert config["gelu_in_gemm"] is (target is AccuracyTarget.k_99)  # erf GELU for 99.9 on every rung


def test_a_stored_miss_holds_for_a_field_that_applied_only_later_at_its_default():
    """A miss recorded before a field applied to the benchmark (GPT-J's fp8_fast_accum) lacks it: the engine ran
    at its default, so the miss stands for a rung at that default, and not for one that sets it otherwise."""
    then = {"backend": "inflight", "kv_cache_dtype": "fp8", "num_beams": 4, "precision": "fp8"}
    assert same_engine(then, {**then, "fp8_fast_accum": False})
    assert not same_engine(then, {**then, "fp8_fast_accum": True})
    assert not same_engine({**then, "precision": "bf16"}, {**then, "fp8_fast_accum": False})
    assert same_engine({**then, "fp8_fast_accum": True}, {**then, "fp8_fast_accum": True})


def test_an_engine_field_a_lower_rung_cannot_take_is_refused_up_front():
    """--fp8_residual beside a ladder that has no such rung (bert-99.9's) applies to every rung; the fp16 rung the
    accuracy gate may fall back to cannot take it, so the run is refused before anything runs, naming that rung and
    the fix."""
    high = AccuracyTarget.k_99_9
    with pytest.raises(FieldError, match=r"--fp8_residual applies to every engine of the ladder \(fp8-fast-accum, "
                                         r"fp8-exact-attention, fp8, fp16\), and its 'fp16' engine, which the "
                                         r"accuracy gate may fall back to, cannot take it .*name it whole"):
        resolve("H100_SXM_80GBx1", {"fp8_residual": True}, target=high)
    whole = resolve("H100_SXM_80GBx1", {"precision": "fp8", "fp8_fast_accum": True, "fp8_residual": True},
                    target=high)
    assert whole.rung.name == "fp8-fast-accum" and whole["fp8_residual"] is True  # named whole: the ladder skipped
    first = resolve("H200_SXM_141GBx1", {})  # where rungs set it, the ladder starts there as usual
    assert first.rung.name == "fp8-attention" and first["fp8_residual"] is True


@pytest.mark.parametrize("benchmark", [Benchmark.BERT, Benchmark.GPTJ])
def test_fast_accumulation_without_fp8_gemms_is_refused_with_the_fix(benchmark):
    overrides = {"precision": "bf16" if benchmark is Benchmark.GPTJ else "fp16", "fp8_fast_accum": True}
    with pytest.raises(FieldError, match=rf"--fp8_fast_accum = True sets how FP8 GEMMs accumulate, and --precision = "
                                         rf"'{overrides['precision']}' runs none: add --precision=fp8, or leave "
                                         r"fp8_fast_accum out"):
        resolve("H200_SXM_141GBx1", overrides, benchmark=benchmark)
    chosen = resolve("H200_SXM_141GBx1", {"precision": "fp8", "kv_cache_dtype": "fp8", "fp8_fast_accum": True},
                     benchmark=Benchmark.GPTJ)
    assert chosen.rung.name == "fp8-fast-accum" and chosen["gpu_batch_size"] == 256


def test_fp8_attention_without_an_fp8_qkv_gemm_is_refused_with_the_fix():
    """fp8_attention has the FP8 QKV GEMM write e4m3 for the triton kernel: without an FP8 qkv GEMM (or with the
    flash kernel) there is nothing to write it, and the error names the fix."""
    named = {"precision": "fp8", "fp8_fast_accum": True, "fp8_attention": True}
    for wrong in ({"fp8_gemms": "wo+w1+w2"}, {"attention_kernel": "flash"}):
        with pytest.raises(FieldError, match=r"--fp8_attention = True has the FP8 QKV GEMM write e4m3 for the triton "
                                             r"attention kernel: add --precision=fp8, qkv in --fp8_gemms and "
                                             r"--attention_kernel=triton"):
            resolve("H100_SXM_80GBx1", named | wrong)
    chosen = resolve("H100_SXM_80GBx1", named, target=AccuracyTarget.k_99_9)
    assert chosen["fp8_attention"] is True and chosen.rung is None  # fast accumulation + FP8 attention: no rung


def test_the_engine_line_names_every_engine_field_run_args_give():
    """RUN_ARGS naming an engine whole may set engine fields the ladder's rungs never set (--fp8_attention beside
    bert-99.9's SingleStream ladder): the line that says which engine runs names them too, not only the rung's."""
    from code.tuning.accuracy_gate import plan

    overrides = {"precision": "fp8", "fp8_fast_accum": True, "fp8_residual": True, "fp8_attention": True}
    config = resolve("H100_SXM_80GBx1", overrides, scenario=Scenario.SingleStream, target=AccuracyTarget.k_99_9)
    summary = plan(config, overrides).config.engine_choice["summary"]
    assert summary == ("given in RUN_ARGS (--precision=fp8 --fp8_fast_accum=true --fp8_attention=true "
                       "--fp8_residual=true): the engine ladder (fp8-fast-accum, fp8-exact-attention, fp8, fp16) and "
                       "its accuracy gate are skipped")
