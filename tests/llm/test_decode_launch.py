"""The decode launch's split rule (code/llm/paged_attention.py: ``decode_launch_for``) and the engine's use of it
(code/llm/inflight_engine.py): the SPLITS chosen at Llama 3.1 8B's and GPT-J 6B's shapes for few and many slots on
GPUs of 132 SMs (H100/H200) and 58 (L4-class), and that each engine's steps, eager or captured, run its slots' launch.
The kernel's result for any SPLITS is tests/gptj/test_decode_kernel.py's (Triton's interpreter on the CPU)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from code.gptj.inflight.layers import InflightModel
from code.gptj.memory_plan import TYPICAL_PROMPT_TOKENS as GPTJ_TYPICAL
from code.gptj.model import GPTJ_CONFIGS
from code.gptj.model import random_weights as gptj_weights
from code.llama31.architecture import LLAMA_CONFIGS
from code.llama31.backends.pytorch import generation_config
from code.llama31.inflight_model import InflightLlama, decode_launch
from code.llama31.memory_plan import TYPICAL_PROMPT_TOKENS as LLAMA_TYPICAL
from code.llama31.model import random_weights as llama_weights
from code.llm import inflight_engine, paged_attention
from code.llm.cache_shape import CacheShape
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineOptions, InflightEngine, sm_count
from code.llm.kv_cache import KVCache
from code.llm.memory_plan import PAGE_SIZE
from code.llm.paged_attention import (
    CUDA_LAUNCH,
    DECODE_LAUNCH,
    PROGRAMS_PER_SM,
    decode_launch_for,
    head_groups,
    kernel_launch,
)
from code.numerics.fp8 import E4M3

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LLAMA_8B = LLAMA_CONFIGS["8b"]
# (base launch, key/value head groups a slot, typical prompt) of each model at its real shape
MODELS = {
    "llama": (decode_launch(LLAMA_8B.n_kv_heads), LLAMA_8B.n_kv_heads // decode_launch(LLAMA_8B.n_kv_heads)["HEADS"],
              LLAMA_TYPICAL),
    "gptj": (DECODE_LAUNCH, GPTJ_CONFIGS["6b"].n_head // DECODE_LAUNCH["HEADS"], GPTJ_TYPICAL),
}


def splits(model: str, slots: int, sms: int) -> int:
    base, groups, typical = MODELS[model]
    return decode_launch_for(slots, groups, sms, base, prompt_tokens=typical, page_size=PAGE_SIZE)["SPLITS"]


# slots -> SPLITS. Llama 3.1 8B: 2 head groups (8 key/value heads, 4 a program), base SPLITS 2, at most 15 splits
# (1,000-token prompts in blocks of lcm(64-token pages, 32 keys)). GPT-J 6B: 8 head groups (16 heads, 2 a
# program), base SPLITS 1, at most 14 (930 tokens).
EXPECTED = {
    ("llama", 132): {1: 15, 4: 15, 16: 8, 64: 2, 256: 2},
    ("gptj", 132): {1: 14, 4: 8, 16: 2, 64: 1, 256: 1},
    ("llama", 58): {1: 15, 4: 14, 16: 3, 64: 2, 256: 2},
    ("gptj", 58): {1: 14, 4: 3, 16: 1, 64: 1, 256: 1},
}


@pytest.mark.parametrize(("model", "sms"), list(EXPECTED))
def test_splits_for_few_and_many_slots(model, sms):
    assert {slots: splits(model, slots, sms) for slots in EXPECTED[model, sms]} == EXPECTED[model, sms]


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("sms", [58, 78, 108, 132, 148])  # L4, H20, A100, H100/H200, B200
def test_the_rule_keeps_the_tuned_launch_at_many_slots_and_only_raises_splits(model, sms):
    """At 64 slots and more (Offline's and Server's engines) the launch is the model's own on every one of these
    GPUs; fewer slots only ever raise SPLITS, within two programs an SM and a whole block of a typical prompt per
    split; every other key stays."""
    base, groups, typical = MODELS[model]
    for slots in range(1, 513):
        launch = decode_launch_for(slots, groups, sms, base, prompt_tokens=typical, page_size=PAGE_SIZE)
        assert {k: v for k, v in launch.items() if k != "SPLITS"} == {k: v for k, v in base.items() if k != "SPLITS"}
        assert launch["SPLITS"] >= base["SPLITS"]
        if launch["SPLITS"] > base["SPLITS"]:
            assert slots * groups * launch["SPLITS"] <= PROGRAMS_PER_SM * sms
            assert launch["SPLITS"] * np.lcm(PAGE_SIZE, base["KEYS"]) <= typical
        if slots >= 64:
            assert launch == base, (slots, launch)


def test_no_gpu_or_a_short_prompt_keeps_the_base_launch():
    base, groups, _ = MODELS["llama"]
    assert decode_launch_for(1, groups, 0, base, prompt_tokens=1000, page_size=PAGE_SIZE) == base
    assert decode_launch_for(1, groups, 132, base, prompt_tokens=64, page_size=PAGE_SIZE) == base  # one block
    with pytest.raises(ValueError, match="slots >= 1"):
        decode_launch_for(0, groups, 132, base, prompt_tokens=1000, page_size=PAGE_SIZE)


def test_sm_count_is_the_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(multi_processor_count=132))
    assert sm_count(torch.device("cuda", 0)) == 132
    assert sm_count(torch.device("cpu")) == 0


class LaunchSpy:
    """Records the launch of every ``decode_attention`` call a decode step makes, then attends as before."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.launches: list[dict[str, int]] = []
        attend = paged_attention.decode_attention

        def recording(*args, **kwargs) -> torch.Tensor:  # noqa: ANN002, ANN003 - decode_attention's own signature
            self.launches.append(dict(args[5]))
            return attend(*args, **kwargs)

        monkeypatch.setattr(paged_attention, "decode_attention", recording)


def tiny_llama() -> tuple[InflightLlama, GenerationConfig]:
    config = LLAMA_CONFIGS["tiny"]
    generation = generation_config(config)
    return InflightLlama.from_model(llama_weights(config, seed=3)), GenerationConfig(
        **{**generation.__dict__, "min_new_tokens": 0, "max_new_tokens": 3})


def tiny_gptj() -> tuple[InflightModel, GenerationConfig]:
    return InflightModel.from_model(gptj_weights(GPTJ_CONFIGS["tiny"], 0)), GenerationConfig(min_new_tokens=0,
                                                                                             max_new_tokens=3)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gptj], ids=["llama", "gptj"])
@pytest.mark.parametrize("slots", [1, 4, 64])
def test_the_engine_runs_its_slots_launch_in_every_step(monkeypatch, build, slots):
    """On a GPU of 132 SMs (faked: the tiny models' attention runs the reference path on the CPU, which takes the
    launch and ignores it) an engine of ``slots`` slots runs the rule's launch for that many, every layer of every
    step; one given explicitly (the GPU checks' old launch) replaces it."""
    monkeypatch.setattr(inflight_engine, "sm_count", lambda device: 132)
    model, generation = build()
    options = EngineOptions(slots=slots, max_prompt_length=200, page_size=16)
    engine = InflightEngine(model, generation, options)
    groups = engine.cache.shape.heads // model.decode_launch["HEADS"]
    want = decode_launch_for(slots, groups, 132, model.decode_launch, prompt_tokens=200, page_size=16)
    assert engine.decode_launch == want
    assert want["SPLITS"] > model.decode_launch["SPLITS"] or slots == 64
    spy = LaunchSpy(monkeypatch)
    rng = np.random.default_rng(0)
    engine.generate([rng.integers(0, 1000, size=n).astype(np.int32) for n in (150, 9)])
    assert spy.launches and all(launch == want for launch in spy.launches)

    given = InflightEngine(model, generation, options, decode_launch=model.decode_launch)
    assert given.decode_launch == dict(model.decode_launch)
    spy.launches.clear()
    given.generate([np.arange(1, 20, dtype=np.int32)])
    assert spy.launches and all(launch == dict(model.decode_launch) for launch in spy.launches)


def test_an_engine_off_the_gpu_keeps_the_models_launch():
    model, generation = tiny_llama()
    engine = InflightEngine(model, generation, EngineOptions(slots=1, max_prompt_length=64, page_size=16))
    assert engine.decode_launch == dict(model.decode_launch)


def small_cache(fp8: bool, head_dim: int = 128, beams: int = 1, page: int = 64) -> KVCache:
    shape = CacheShape(layers=1, heads=8, head_dim=head_dim, slots=2, beams=beams, max_new_tokens=4, page_size=page,
                       pages=64 // page, max_prompt_length=64)
    return KVCache(shape, torch.bfloat16, torch.device("cpu"), E4M3 if fp8 else None)


def test_the_cuda_kernel_takes_the_fp8_caches_it_serves(monkeypatch):
    """The engine's launch is ``CUDA_LAUNCH`` (one program a key/value head) only for an FP8 cache of a shape the
    kernel is built for, on a GPU where it is ready; otherwise the model's Triton launch."""
    from code.llm import cuda_decode

    base = decode_launch(8)
    llama = {"group": 4, "dtype": torch.bfloat16}
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert kernel_launch(base, small_cache(True), cpu, **llama) == base
    assert head_groups(base, small_cache(True)) == 8 // base["HEADS"]

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_decode.DeviceKernels, "get", classmethod(lambda cls, device: cls(ctypes.c_void_p(1))))
    assert kernel_launch(base, small_cache(True), gpu, **llama) == CUDA_LAUNCH
    assert head_groups(CUDA_LAUNCH, small_cache(True)) == 8
    for cache, shape in ((small_cache(False), llama), (small_cache(True, head_dim=64), llama),
                         (small_cache(True, page=8), llama), (small_cache(True), {**llama, "group": 2}),
                         (small_cache(True), {**llama, "dtype": torch.float32})):
        assert kernel_launch(base, cache, gpu, **shape) == base  # 16-bit cache, unbuilt shape, page, group, dtype

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    assert kernel_launch(base, small_cache(True), gpu, **llama) == base  # measured from 9.0 only
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_decode.DeviceKernels, "get", classmethod(lambda cls, device: cls(None, "no nvcc")))
    assert kernel_launch(base, small_cache(True), gpu, **llama) == base  # not built: Triton
