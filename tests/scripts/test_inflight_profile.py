"""scripts/gpu/inflight_profile.py, the profile step check_llama_inflight and check_gptj_inflight share: the kinds of
the GPU's kernel names, a token's GEMM FLOPs from either model's weights, the prefill pass's packing and the
summary rows (the whole step runs on the CPU in each script's tests)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from code.gptj.inflight.layers import InflightModel
from code.gptj.model import GPTJ_CONFIGS
from code.gptj.model import random_weights as gptj_weights
from code.llama31.architecture import LlamaConfig
from code.llama31.inflight_model import InflightLlama
from code.llama31.model import random_weights as llama_weights
from scripts.gpu.inflight_profile import gemm_flops_per_token, kernel_kind, prefill_pass, profile_rows


def test_kernel_names_fall_into_their_kinds():
    assert kernel_kind("sm90_xmma_gemm_e4m3f32_e4m3f32_f32_tn_n_tilesize128x128x128") == "gemm"
    assert kernel_kind("nvjet_tst_128x256_64x4_2x1_v_bz_TNT") == "gemm"
    assert kernel_kind("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>") == "attention"
    assert kernel_kind("_decode_split_kernel") == "attention" and kernel_kind("_merge_kernel") == "attention"
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, cutlass::bfloat16_t>>"
    assert kernel_kind(flash) == "attention"  # its name holds "cutlass": attention is matched first
    assert kernel_kind("triton_poi_fused_mul_silu_0") == "other"
    assert kernel_kind("_rotary_qkv_kernel") == "other" and kernel_kind("_write_rows_kernel") == "other"  # GPT-J's


def test_a_tokens_gemm_flops_are_twice_each_layers_gemm_weights():
    """Llama: QKV, the output projection, gate and up, down; GPT-J: ``[wqkv; w1]`` and ``[wo | w2]`` (two GEMMs a
    layer); the LM head is not counted."""
    llama = LlamaConfig.from_name("tiny")
    q, kv = llama.n_heads * llama.head_dim, 2 * llama.n_kv_heads * llama.head_dim
    shapes = [
        (q + kv, llama.dim),
        (llama.dim, q),
        (2 * llama.intermediate_size, llama.dim),
        (llama.dim, llama.intermediate_size),
    ]
    model = InflightLlama.from_model(llama_weights(llama, 0, torch.float32, torch.device("cpu")))
    assert gemm_flops_per_token(model) == 2 * llama.n_layers * sum(o * i for o, i in shapes)
    gptj = GPTJ_CONFIGS["tiny"]
    width, inner = gptj.n_embd, gptj.n_inner
    model = InflightModel.from_model(gptj_weights(gptj, 0))
    assert gemm_flops_per_token(model) == 2 * gptj.n_layer * ((3 * width + inner) * width + width * (width + inner))


@pytest.mark.parametrize(("lengths", "limit", "packed"), [([5, 7, 9], 12, 12), ([5, 7, 9], 100, 21), ([30, 2], 12, 30)])
def test_a_prefill_pass_packs_prompts_up_to_the_engines_limit(lengths, limit, packed):
    """As the engine admits them: prompts in order while they fit, and a first prompt alone even when longer."""
    engine = SimpleNamespace(
        model=SimpleNamespace(device=torch.device("cpu")), options=SimpleNamespace(prefill_tokens=limit)
    )
    _, tokens = prefill_pass(engine, [np.zeros(n, dtype=np.int32) for n in lengths])  # type: ignore[arg-type]
    assert tokens == packed


def test_the_rows_name_the_beams_where_there_are_several():
    one = {
        "total_ms": 4.0,
        "kinds": {"attention": 1.0, "gemm": 2.0, "other": 1.0},
        "gemm_tflops": 500.0,
        "top": [("nvjet_tst", 2.0), ("_decode_kernel", 1.0)],
    }
    results = {"prefill": {**one, "tokens": 100}, "step": {**one, "slots": 8, "beams": 4}}
    rows = profile_rows(results, on_gpu=True)
    assert rows[0] == (
        "profile (FP8 GEMMs with fast accumulation, FP8 KV cache; prefill 100 tokens, step 8 slots x "
        "4 beams; ms of GPU time and share):"
    )
    assert rows[1] == (
        "  prefill  total 4.00  attention 1.00 (25%)  gemm 2.00 (50%)  other 1.00 (25%)  GEMMs 500 TFLOP/s"
    )
    assert rows[2] == "       2.000  nvjet_tst" and len(rows) == 7  # a heading; each pass: a row, its top kernels
    del results["step"]["beams"]
    assert "step 8 slots; ms" in profile_rows(results, on_gpu=False)[0]
