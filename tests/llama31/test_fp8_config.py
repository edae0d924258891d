"""llama3.1-8b's FP8 through its configuration, as GPT-J's: the inflight backend's switches (``precision=fp8``,
``kv_cache_dtype``, ``fp8_fast_accum``): the H100/H200 classes' engine ladder (FP8 first), RUN_ARGS choosing a rung,
refused on the CPU with the fix named, the memory plan's FP8 bytes, and the engine folder that ``generate_engine``
builds and a run loads."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from code.common.constants import Benchmark, Scenario
from code.config.field_spec import FieldError
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.llama31.architecture import LLAMA_CONFIGS

TINY = LLAMA_CONFIGS["tiny"]
FP8_ARGS = {"precision": "fp8", "kv_cache_dtype": "fp8", "fp8_fast_accum": True}
SWITCHES = ("precision", "kv_cache_dtype", "fp8_fast_accum")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def resolved(system: str, overrides: dict, scenario: Scenario = Scenario.Offline):
    return resolve_config(Benchmark.LLAMA31, scenario, system, WorkloadSetting(), overrides)


@pytest.mark.parametrize("system", ["H100_SXM_80GBx1", "H200_SXM_141GBx8"])
@pytest.mark.parametrize("scenario", [Scenario.Offline, Scenario.Server])
def test_the_gpu_classes_run_fp8_first_and_run_args_choose_another_rung(system, scenario):
    """The classes' first engine is the ladder's FP8 one (GEMMs, cache, fast accumulation) with its 512 slots; an
    engine field in RUN_ARGS chooses the rung it names, which brings its own rates."""
    default = resolved(system, {}, scenario)
    assert default["backend"] == "inflight"
    assert [default[name] for name in SWITCHES] == ["fp8", "fp8", True]
    assert default["gpu_batch_size"] == 512
    bf16 = resolved(system, {"precision": "bf16", "kv_cache_dtype": "auto", "fp8_fast_accum": False}, scenario)
    assert [bf16[name] for name in SWITCHES] == ["bf16", "auto", False]
    assert {bf16.sources[name] for name in SWITCHES} == {"RUN_ARGS"}
    rate = "offline_expected_qps" if scenario is Scenario.Offline else "server_target_qps"
    assert bf16[rate] < default[rate]  # the bf16 rung's own, slower rate


def test_the_switches_are_the_inflight_backends_and_follow_gptjs_rules():
    """Fast accumulation without FP8 GEMMs is refused, as GPT-J's; the pytorch backend runs no FP8."""
    with pytest.raises(FieldError, match="fp8_fast_accum = True sets how FP8 GEMMs accumulate"):
        resolved("H200_SXM_141GBx1", {"precision": "bf16", "fp8_fast_accum": True})
    with pytest.raises(FieldError, match="fp8"):
        resolved("H200_SXM_141GBx1", {"backend": "pytorch", "precision": "fp8"})


@pytest.mark.parametrize("overrides,name", [({"precision": "fp8"}, "precision"),
                                            ({"precision": "fp32", "kv_cache_dtype": "fp8"}, "kv_cache_dtype")])
def test_fp8_on_the_cpu_is_refused_naming_the_fix(overrides, name):
    """The CPU emulates FP8 GEMMs (the backend runs them below), but a run so labelled would not be what an FP8
    engine is on a GPU: the run's device check refuses it before anything loads, naming the fix, as GPT-J's."""
    from code.mlperf.devices import resolve_device

    config = resolved("CPU", {"backend": "inflight", **overrides})
    with pytest.raises(FieldError, match=rf"--{name}=fp8 needs a GPU \(FP8 needs compute capability 8.9.*set "
                                         rf"--{name}=\w+, or run on a GPU"):
        resolve_device(config)


def test_the_memory_plan_fits_more_slots_with_fp8():
    """One byte a cached element and e4m3 GEMM weights: more slots fit an H100 than in bf16 (without the cap, about
    twice as many with both)."""
    from code.llama31.memory_plan import MAX_SLOTS, llama_memory_plan

    h100 = 81_090 << 20
    bf16 = llama_memory_plan(h100, "bf16", "auto")
    gemms = llama_memory_plan(h100, "fp8", "auto")
    cache = llama_memory_plan(h100, "bf16", "fp8")
    both = llama_memory_plan(h100, "fp8", "fp8")
    assert bf16.slots < gemms.slots < cache.slots <= both.slots == MAX_SLOTS
    assert 9.0e9 < gemms.weights_bytes < 9.3e9 < 16.0e9 < bf16.weights_bytes
    uncapped = {kv: llama_memory_plan(h100, "fp8" if kv == "fp8" else "bf16", kv, max_slots=4096).slots
                for kv in ("auto", "fp8")}
    assert uncapped["fp8"] > 2 * uncapped["auto"]
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8"):
        llama_memory_plan(h100, "bf16", "int8")


def test_the_plan_counts_the_fp8_engines_weights():
    """``weight_bytes(config, "fp8")`` is what ``use_fp8_gemms`` leaves held: e4m3 GEMM weights with their float32
    scales, the rest bf16."""
    from code.llama31.inflight_model import InflightLlama
    from code.llama31.memory_plan import weight_bytes
    from code.llama31.model import random_weights

    model = InflightLlama.from_model(random_weights(TINY, 0, torch.bfloat16), consume=True)
    model.use_fp8_gemms(model.collect_amax([torch.arange(1, 20)]))
    held = [model.embedding, model.norm_weight, model.head_weight, model.rope]
    for layer in model.layers:
        held += [t for t in vars(layer).values() if isinstance(t, torch.Tensor)]
        held += [t for gemm in layer.fp8.values() for t in (gemm.weight_q, gemm.weight_scale, gemm.act_scale)]
    assert sum(t.numel() * t.element_size() for t in held) == weight_bytes(TINY, "fp8")


def backend_context(tmp_path, device: str = "cpu"):
    from code.llama31.backends import BackendContext

    return BackendContext(device=device, cpu_threads=1, checkpoint="random", engines_dir=tmp_path,
                          max_prompt_length=40)


def test_generate_engine_builds_the_folder_a_run_loads_and_bf16_builds_none(tmp_path, monkeypatch):
    """Through the benchmark, as ``make generate_engines`` and a run reach it: an FP8 config's description names
    its engine folder (``<engines>/<system>/llama31/<Scenario>/<key>/``) and says its scales come from synthetic
    prompts; ``generate_engine`` builds it once and reuses it, and the backend's options load it. A bf16 config has
    none. FP8 needs a GPU, so the device check is stood in for (the engine itself builds on the CPU)."""
    from code.common.constants import TestMode
    from code.llama31 import benchmark
    from code.llama31.backends import backend_class

    monkeypatch.setattr(benchmark, "resolve_devices", lambda config: ["cpu"])
    monkeypatch.setattr(benchmark, "ENGINES_DIR", tmp_path / "engines")
    common = {"backend": "inflight", "model_name": "tiny", "seed": 3}
    bf16 = resolved("CPU", {**common, "precision": "bf16"})
    assert "engine" not in benchmark.describe_inputs(bf16, TestMode.PerformanceOnly)
    assert benchmark.generate_engine(bf16)["engine"].startswith("none: the inflight llama3.1-8b backend in bf16")

    fp8 = resolved("CPU", {**common, **FP8_ARGS})
    expected = tmp_path / "engines" / fp8.system / "llama31" / "Offline" / "tiny-fp8-kvfp8-random-s3"
    described = benchmark.describe_inputs(fp8, TestMode.PerformanceOnly)
    assert described["engine"] == str(expected)
    assert "FP8 scales calibrated on synthetic prompts, not the MLPerf calibration list" in \
        described["invalid_because"]
    report = benchmark.generate_engine(fp8)
    assert report["engine"] == str(expected) and report["built"] == "yes" and (expected / "engine.json").is_file()
    assert benchmark.generate_engine(fp8)["built"].startswith("no: reused")
    options = backend_class("inflight").options_from(fp8, backend_context(tmp_path / "engines" / fp8.system /
                                                                          "llama31" / "Offline"))
    assert (options.engine_dir, options.engine_spec.kv_cache_dtype, options.fp8_fast_accum) == (expected, "fp8", True)
    assert "--precision=fp8" in options.run_args


def test_an_fp8_run_through_the_backend_generates_as_many_tokens_as_bf16(tmp_path):
    """The tiny model's random weights never choose EOS, so every sample generates 128 tokens in bf16 and with FP8
    GEMMs and an FP8 KV cache alike (CPU: FP8 emulated in float32 from the quantized operands, bf16 between the
    GEMMs as on a GPU); options from the resolved configs, as a run builds them (its device check aside)."""
    from code.llama31.backends import backend_class

    cls = backend_class("inflight")
    context = backend_context(tmp_path)
    prompts = [np.random.default_rng(n).integers(0, 128000, size=n).astype(np.int32) for n in (5, 40, 17)]
    counts = {}
    for name, overrides in (("bf16", {}), ("fp8", {"precision": "fp8", "kv_cache_dtype": "fp8"})):
        config = resolved("CPU", {"backend": "inflight", "model_name": "tiny", "precision": "bf16", **overrides})
        cls.generate_engine(config, context)
        options = dataclasses.replace(cls.options_from(config, context), max_batch_size=2)
        backend = cls(options)
        assert backend.engine.model.uses_fp8_gemms == (name == "fp8") == backend.engine.cache.is_fp8
        counts[name] = [len(tokens) for tokens in backend.run_batch(np.arange(len(prompts)), prompts)]
    assert counts["fp8"] == counts["bf16"] == [128] * len(prompts)
