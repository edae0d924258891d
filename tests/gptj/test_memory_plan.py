"""The GPT-J memory plan (code/gptj/memory_plan.py): the slots it gives at the measured points (H100: 96 bf16 and
192 FP8 slots ran; H200: 128 and 256), refusals that name what would fit, and that the plan counts what the engine
allocates: the same weights, per-slot state and KV cache bytes, and the same prompt pool from the same room. Also
the GPU memory the engine sizes from (code/mlperf/devices.py), with a per-process memory fraction, and the table in
documentation/gptj_gpu.md. CPU only, no torch at the plan's import."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from code.gptj.architecture import GPTJ_CONFIGS, GptjConfig
from code.gptj.inflight.layers import Amax, InflightModel
from code.gptj.memory_plan import (
    CUDA_CONTEXT_BYTES,
    GIB,
    MAX_SLOTS,
    MIN_RESERVE_BYTES,
    MIN_USEFUL_SLOTS,
    cache_shape,
    gptj_memory_plan,
    prompt_pool_pages,
    reserve_bytes,
    slot_state_bytes,
    weight_bytes,
)
from code.gptj.model import random_weights
from code.llm import inflight_engine as engine_module
from code.llm.generation import GenerationConfig
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.mlperf import devices
from code.numerics.fp8 import E4M3

MIB = 1 << 20
# torch.cuda.get_device_properties(...).total_memory as GPUs report it (the H200's read on one, the others from
# published logs; the L4's and B200's are nvidia-smi's, which torch may report a little lower)
H100_SXM = 81_090 * MIB
H200_SXM = 150_109_880_320
A100_40GB = 40_536 * MIB
L4 = 23_034 * MIB
RTX_4090 = 24_563 * MIB
B200 = 183_359 * MIB
TINY = GPTJ_CONFIGS["tiny"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def slots(memory: int, precision: str, kv: str = "auto") -> int:
    return gptj_memory_plan(memory, precision, kv).slots


def test_the_plan_imports_no_torch():
    """A config derives its slots without loading torch."""
    code = "import sys; import code.gptj.memory_plan; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_measured_points():
    """H100 SXM: 96 bf16 slots ran with their prompts in the pool, 192 FP8 slots too, 256 outgrew it; H200: 128
    bf16 and 256 FP8 slots ran (320 and 384 fit but gave no more throughput)."""
    assert 96 <= slots(H100_SXM, "bf16") < 112
    assert 192 <= slots(H100_SXM, "fp8", "fp8") < 256
    assert 128 <= slots(H200_SXM, "bf16") < 256
    assert 256 <= slots(H200_SXM, "fp8", "fp8") < MAX_SLOTS


def test_smaller_and_larger_gpus():
    assert MIN_USEFUL_SLOTS <= slots(A100_40GB, "bf16") < slots(H100_SXM, "bf16")  # A100: bf16 runs, no FP8
    assert slots(RTX_4090, "fp8", "fp8") >= 4 * MIN_USEFUL_SLOTS  # 24 GB: FP8 fits tens of samples, bf16 few
    assert MIN_USEFUL_SLOTS <= slots(RTX_4090, "bf16") < 2 * MIN_USEFUL_SLOTS
    assert slots(L4, "bf16") == 0 and slots(L4, "fp8", "fp8") >= 3 * MIN_USEFUL_SLOTS  # L4 reports 22.5 GiB
    assert 240 <= slots(B200, "bf16") and 500 <= slots(B200, "fp8", "fp8") <= MAX_SLOTS


def test_more_memory_never_fewer_slots():
    for precision, kv in (("bf16", "auto"), ("fp8", "auto"), ("fp8", "fp8")):
        counts = [slots(gib * GIB, precision, kv) for gib in range(12, 200, 4)]
        assert counts == sorted(counts)


def test_capped():
    plan = gptj_memory_plan(1024 * GIB, "fp8", "fp8")
    assert (plan.slots, plan.limited_by) == (MAX_SLOTS, "cap")


def test_parts_add_up():
    """Every part fits the GPU, and the pool holds a typical prompt (~930 tokens: 15 pages of 64) for every slot."""
    plan = gptj_memory_plan(H100_SXM, "fp8", "fp8")
    used = (plan.context_bytes + plan.weights_bytes + plan.slot_state_bytes + plan.generated_bytes
            + plan.prompt_pool_bytes + plan.reserve_bytes)
    assert used <= plan.memory_bytes and plan.needed_bytes <= plan.memory_bytes
    assert plan.prompt_pool_pages >= 15 * plan.slots
    assert plan.reserve_bytes == MIN_RESERVE_BYTES  # 7% of 80 GB is under the 6 GiB floor
    assert gptj_memory_plan(H200_SXM, "bf16").reserve_bytes == int(0.07 * H200_SXM)
    # GPT-J 6B's weights: 12.1 GB in bf16, ~6.5 GB with FP8 GEMMs (the embedding and head stay bf16)
    assert 12.0e9 < weight_bytes(GptjConfig(), "bf16") < 12.2e9
    assert 6.3e9 < weight_bytes(GptjConfig(), "fp8") < 6.6e9


def test_refusals_name_what_would_fit():
    bf16 = gptj_memory_plan(16 * GIB, "bf16")
    assert (bf16.slots, bf16.limited_by, bf16.fits) == (0, "refused", False)
    assert bf16.refusal.startswith("GPT-J in bf16 needs about 23 GiB for 8 samples in flight, and this GPU has 16 GiB")
    assert bf16.refusal.endswith("use the FP8 engine (--precision=fp8 --kv_cache_dtype=fp8) or a GPU with more memory")
    without_fp8 = gptj_memory_plan(16 * GIB, "bf16", fp8_available=False).refusal  # an A100-class GPU
    assert without_fp8.endswith("use a GPU with at least 24 GiB, or a GPU of compute capability 8.9 or newer, whose "
                                "FP8 engine fits in this memory")
    assert bf16.needed_bytes > 16 * GIB
    assert gptj_memory_plan(bf16.needed_bytes, "bf16").slots >= MIN_USEFUL_SLOTS  # what it names does fit
    fp8 = gptj_memory_plan(12 * GIB, "fp8", "fp8")
    assert fp8.refusal.endswith(f"use a GPU with at least {-(-fp8.needed_bytes // GIB)} GiB")


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(memory_bytes=0, precision="bf16"), "memory_bytes must be > 0"),
    (dict(memory_bytes=GIB, precision="int8"), "precision must be one of fp32, bf16, fp16, fp8, not 'int8'"),
    (dict(memory_bytes=GIB, precision="bf16", kv_cache_dtype="fp16"), "kv_cache_dtype must be one of auto, fp8"),
    (dict(memory_bytes=GIB, precision="bf16", min_slots=0), "need 1 <= min_slots <= max_slots"),
])
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gptj_memory_plan(**kwargs)


# -- the plan counts what the engine allocates --------------------------------------------------------------------

def tensor_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def model_bytes(model: InflightModel) -> int:
    layers = [t for layer in model.layers for t in (
        layer.norm_weight, layer.norm_bias, layer.w_in, layer.b_in, layer.w_out, layer.b_out,
        *(x for fp8 in (layer.fp8 or {}).values() for x in (fp8.weight_q, fp8.weight_scale, fp8.act_scale)))]
    return tensor_bytes(model.embedding, *layers, model.norm_weight, model.norm_bias, model.head_weight,
                        model.head_bias, model.rope)


@pytest.mark.parametrize(("dtype", "precision"), [(torch.float32, "fp32"), (torch.bfloat16, "bf16"),
                                                  (torch.bfloat16, "fp8")])
def test_weight_bytes_are_what_the_model_holds(dtype, precision):
    model = InflightModel.from_model(random_weights(TINY, 0, dtype), consume=True)
    if precision == "fp8":
        ones = [1.0] * TINY.n_layer
        model.use_fp8_gemms(Amax(gemm_in=ones, gemm_out=ones, k=ones, v=ones))
    assert model_bytes(model) == weight_bytes(TINY, precision, head_row_align=1)  # the CPU pads no head rows


@pytest.mark.parametrize("kv_dtype", [None, E4M3])
def test_state_and_cache_bytes_are_what_the_engine_allocates(kv_dtype):
    model = InflightModel.from_model(random_weights(TINY, 0, torch.bfloat16), consume=True)
    generation = GenerationConfig()
    options = EngineOptions(slots=3, max_prompt_length=40, page_size=8, kv_pages=7, kv_dtype=kv_dtype)
    ones = [1.0] * TINY.n_layer
    engine = InflightEngine(model, generation, options, kv_amax=Amax(k=ones, v=ones) if kv_dtype else None)
    beams = engine.beams
    counted = tensor_bytes(engine.logits, beams.run_tokens, beams.done_tokens, beams.ancestry)
    assert counted == slot_state_bytes(TINY, 3, generation.num_beams, generation.max_new_tokens)
    counted_state = (beams.run_tokens, beams.done_tokens, beams.ancestry)
    others = [t for t in vars(beams).values()
              if isinstance(t, torch.Tensor) and all(t is not c for c in counted_state)]
    everything = counted + tensor_bytes(*others)
    assert everything < 1.01 * counted  # what the plan leaves out is small
    cache, element = engine.cache, (kv_dtype or torch.bfloat16).itemsize
    shape = cache_shape(TINY, 3, generation.num_beams, generation.max_new_tokens, 8, 40)
    assert tensor_bytes(cache.gen_k, cache.gen_v) == shape.generated_bytes(element)
    assert tensor_bytes(cache.prompt_k, cache.prompt_v) == 7 * shape.page_bytes(element)


def cuda_engine(memory_bytes: int = 0, kv_dtype: torch.dtype | None = None) -> SimpleNamespace:
    """What ``InflightEngine._pages_that_fit`` reads of an engine, as on a GPU (nothing is allocated)."""
    options = EngineOptions(slots=192, max_prompt_length=1919, kv_dtype=kv_dtype, memory_bytes=memory_bytes)
    model = SimpleNamespace(device=torch.device("cuda"), dtype=torch.bfloat16, memory_plan=InflightModel.memory_plan)
    return SimpleNamespace(model=model, options=options)


def test_the_engine_sizes_its_pool_as_the_plan_does(monkeypatch):
    """Given the room the plan estimates, the engine allocates the pool the plan counts, within the usable
    memory it is given, whatever the GPU's total."""
    plan = gptj_memory_plan(H100_SXM, "fp8", "fp8")
    room = H100_SXM - CUDA_CONTEXT_BYTES - plan.weights_bytes - plan.slot_state_bytes
    asked = []

    def allocatable(device: torch.device, usable: int) -> int:
        asked.append(usable)
        return room

    monkeypatch.setattr(engine_module, "allocatable_gpu_bytes", allocatable)
    monkeypatch.setattr(engine_module, "usable_gpu_bytes", lambda device: H100_SXM)
    shape = cache_shape(GptjConfig(), plan.slots, 4, 128, 64, 1919)
    assert InflightEngine._pages_that_fit(cuda_engine(0, E4M3), shape) == plan.prompt_pool_pages
    assert InflightEngine._pages_that_fit(cuda_engine(H100_SXM, E4M3), shape) == plan.prompt_pool_pages
    assert asked == [H100_SXM, H100_SXM]


def test_the_engine_refuses_too_many_slots_naming_the_plan(monkeypatch):
    monkeypatch.setattr(engine_module, "allocatable_gpu_bytes", lambda device, usable: usable - 13 * GIB)
    shape = cache_shape(GptjConfig(), 192, 4, 128, 64, 1919)
    with pytest.raises(ValueError, match=r"of 40\.0 GiB usable\) is too little for 192 slots .* gptj_memory_plan"):
        InflightEngine._pages_that_fit(cuda_engine(40 * GIB), shape)


def test_pool_pages_capped_at_every_slot_at_the_longest_prompt():
    shape = cache_shape(GptjConfig(), 2, 4, 128, 64, 1919)
    assert prompt_pool_pages(1000 * GIB, 1000 * GIB, shape, 2) == 2 * 30
    assert prompt_pool_pages(reserve_bytes(8 * GIB), 8 * GIB, shape, 2) == 0


# -- usable GPU memory ---------------------------------------------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU of 80 GiB: this process holds 12 (10 allocated, 2 cached), its context 1, so 67 are free."""
    gpu = SimpleNamespace(total=80 * GIB, fraction=1.0, free=67 * GIB, allocated=10 * GIB, reserved=12 * GIB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=gpu.total))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda d: gpu.fraction, raising=False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (gpu.free, gpu.total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: gpu.allocated)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: gpu.reserved)
    return gpu


def test_usable_memory_follows_the_per_process_fraction(fake_gpu, monkeypatch):
    assert devices.usable_gpu_bytes("cuda") == 80 * GIB
    fake_gpu.fraction = 0.5  # a stand-in for a 40 GB GPU
    assert devices.usable_gpu_bytes("cuda:0") == 40 * GIB
    assert devices.allocatable_gpu_bytes("cuda") == 29 * GIB  # 40, less the allocated 10 and the context's 1
    fake_gpu.fraction = 0.0  # never set (0 would leave nothing)
    assert devices.usable_gpu_bytes("cuda") == 80 * GIB
    monkeypatch.delattr(torch.cuda, "get_per_process_memory_fraction")  # a PyTorch before 2.9
    assert devices.usable_gpu_bytes("cuda") == 80 * GIB


def test_allocatable_memory_counts_cached_blocks(fake_gpu):
    assert devices.allocatable_gpu_bytes("cuda") == 69 * GIB  # free + cached
    fake_gpu.free = 66 * GIB  # another process took a GiB
    assert devices.allocatable_gpu_bytes("cuda", usable=100 * GIB) == 68 * GIB


# -- the documentation's table ------------------------------------------------------------------------------------

def test_documented_table_is_the_plans():
    from scripts.gptj_memory_table import PAGE, rewritten

    text = PAGE.read_text()
    assert rewritten(text) == text, "documentation/gptj_gpu.md is stale: run `python -m scripts.gptj_memory_table`"


@pytest.mark.parametrize(("capability", "values", "message"), [
    ((7, 5), {"backend": "inflight", "precision": "fp16"}, "kernels need compute capability 8.0, the GPU has 7.5"),
    ((8, 0), {"backend": "inflight", "precision": "fp8"}, "need compute capability 8.9, the GPU has 8.0"),
])
def test_a_gpu_the_engine_cannot_run_on_is_refused_before_loading(capability, values, message):
    """The in-flight engine's needs (its declaration) against the GPU, checked before a run loads anything: a clear
    error instead of a kernel failing mid-run."""
    from code.common.constants import Benchmark
    from code.common.gpu_models import GpuModel
    from code.config.capabilities import check_runs_on
    from code.config.fields import FieldError

    gpu = GpuModel("Old_GPU", (), capability, 16.0, 40, 70, 0.3)
    with pytest.raises(FieldError, match=message):
        check_runs_on(Benchmark.GPTJ, values, {"precision": "RUN_ARGS"}, gpu, "cuda:0")
