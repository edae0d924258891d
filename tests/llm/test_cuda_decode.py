"""The CUDA decode kernel over the FP8 paged cache (code/llm/cuda/paged_decode_fp8.cu, launched by
code/llm/cuda_decode.py) against ``decode_attention_reference``.

On a GPU (compute capability 8.9 or newer, nvcc present): every shape the source builds (GPT-J's 4 beams of head
dimension 256, Llama 3.1's grouped-query 1 beam x 4 query heads of 128), every launch it builds, splits 1-8 with
poisoned workspaces, and prompts of one token, less than a tile, a page, past a page, several pages, none (a free
slot). Without a GPU: nvcc compiles the source for each architecture the kernel serves (sm_89, sm_90a, sm_100a),
and the launcher's refusals name the fix. Timing: ``python3 -m scripts.gpu.check_gptj_inflight
--steps=decode_cuda``.
"""

from __future__ import annotations

import ctypes
import subprocess

import pytest
import torch

from code.llm import cuda_decode
from code.llm.kv_cache import KVCache
from code.llm.paged_attention import (
    CUDA_LAUNCH,
    DECODE_LAUNCH,
    decode_attention,
    decode_attention_reference,
    kernel_launch,
)
from tests.gptj.test_decode_kernel import random_cache

GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9) and cuda_decode.find_nvcc()
LENGTHS = (1, 5, 64, 65, 300, 0, 47, 256)
PAGE = 64
SHAPES = {"gptj": (256, 4, 1), "llama": (128, 1, 4)}  # head_dim, beams, query heads a key/value head


def fp8_case(head_dim: int, beams: int, group: int, seed: int = 0
             ) -> tuple[KVCache, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Triton kernel's test cache (pages handed out in reverse, one slot with no generated token yet) in FP8 at
    a model's shape, with pages of 64 tokens, the engines' (a tile of 16 keys never crosses one)."""
    return random_cache(True, seed, heads=2, beams=beams, group=group, head_dim=head_dim, page=PAGE,
                        lengths=LENGTHS)


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


@pytest.mark.skipif(not GPU, reason="needs a GPU of compute capability 8.9+ and nvcc")
@pytest.mark.parametrize("model", SHAPES)
@pytest.mark.parametrize("launch", sorted(cuda_decode.LAUNCHES), ids=lambda w: "w{}s{}m{}".format(*w))
@pytest.mark.parametrize("splits", [1, 2, 3, 8])
@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_cuda_kernel_matches_reference(monkeypatch, model, launch, splits, order, dtype):
    empty = torch.empty

    def poisoned(*args, **kwargs) -> torch.Tensor:  # noqa: ANN002, ANN003 - torch.empty's own signature
        tensor = empty(*args, **kwargs)
        return tensor.fill_(float("nan")) if tensor.dtype == torch.float32 else tensor

    cache, ancestry, counts, q = fp8_case(*SHAPES[model])
    q = q.to(dtype)
    want = decode_attention_reference(q, cache, 0, ancestry, counts)
    warps, stages, blocks = launch
    head_dim, beams, group = SHAPES[model]
    needed = cuda_decode.shared_bytes(head_dim, beams * group, warps, stages)
    if needed > torch.cuda.get_device_properties(0).shared_memory_per_block_optin:
        pytest.skip(f"{needed} B of shared memory a block: more than this GPU gives")
    settings = {**CUDA_LAUNCH, "num_warps": warps, "num_stages": stages, "BLOCKS": blocks, "SPLITS": splits,
                "ORDER": order}
    monkeypatch.setattr(torch, "empty", poisoned)  # the split workspace: the merge reads only what was written
    got = decode_attention(q, cache, 0, ancestry, counts, settings)
    assert got.dtype == q.dtype and got.shape == q.shape and bool(got.isfinite().all())
    assert rel_error(got, want) < 5e-3
    per_row = (got.float() - want.float()).norm(dim=-1) / want.float().norm(dim=-1)
    assert float(per_row.max()) < 2e-2  # every row and head, the one-token prompt's and the free slot's included


@pytest.mark.skipif(not GPU, reason="needs a GPU of compute capability 8.9+ and nvcc")
def test_cuda_kernel_replays_in_a_cuda_graph():
    cache, ancestry, counts, q = fp8_case(*SHAPES["gptj"], seed=3)
    eager = decode_attention(q, cache, 0, ancestry, counts, CUDA_LAUNCH)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        decode_attention(q, cache, 0, ancestry, counts, CUDA_LAUNCH)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        captured = decode_attention(q, cache, 0, ancestry, counts, CUDA_LAUNCH)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


@pytest.mark.skipif(not GPU or torch.cuda.get_device_capability() < cuda_decode.CHOSEN_FROM,
                    reason="needs a GPU of compute capability 9.0+ and nvcc")
@pytest.mark.parametrize("model", SHAPES)
def test_the_engines_choose_it_on_this_gpu(model):
    """What an engine's launch resolves to (``kernel_launch``) for each model's FP8 cache: the CUDA kernel, built and
    loaded on this GPU; a 16-bit cache keeps the Triton launch."""
    cache, _, _, _ = fp8_case(*SHAPES[model])
    group = SHAPES[model][2]
    device = torch.device("cuda", torch.cuda.current_device())
    assert kernel_launch(DECODE_LAUNCH, cache, device, group=group, dtype=torch.bfloat16) == CUDA_LAUNCH
    assert kernel_launch(DECODE_LAUNCH, cache, device, group=group, dtype=torch.float32) == DECODE_LAUNCH


def nvcc_architectures() -> str:
    nvcc = cuda_decode.find_nvcc()
    if nvcc is None:
        return ""
    return subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=False).stdout


@pytest.mark.skipif(cuda_decode.find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_89", "sm_90a", "sm_100a"])
def test_the_source_compiles_for_every_fp8_architecture(tmp_path, monkeypatch, arch):
    """nvcc builds every entry point for each architecture with e4m3 conversions that our users own: L4 and L40S
    (sm_89), H100 and H200 (sm_90a), B200 (sm_100a)."""
    if f"compute_{arch[3:].rstrip('a')}" not in nvcc_architectures():
        pytest.skip(f"this nvcc does not build {arch} (CUDA 12.8 or newer builds them all)")
    monkeypatch.setenv("MLPERF_CUDA_CACHE", str(tmp_path))
    cubin = cuda_decode.build_cubin(arch)
    assert cubin.exists() and cubin.stat().st_size > 0
    names = {cuda_decode.entry_name(*shape, *launch, dtype).encode()
             for shape in cuda_decode.SHAPES for launch in cuda_decode.LAUNCHES
             for dtype in (torch.bfloat16, torch.float16)}
    data = cubin.read_bytes()
    assert all(name in data for name in names)


def test_the_parameter_block_matches_the_sources():
    """The source asserts sizeof(DecodeParams) == 280; the ctypes mirror must have the same size (a field missing or
    of another width would shift every field after it)."""
    assert ctypes.sizeof(cuda_decode.DecodeParams) == cuda_decode.PARAMS_BYTES
    assert f"sizeof(DecodeParams) == {cuda_decode.PARAMS_BYTES}" in cuda_decode.SOURCE.read_text()


def test_unbuilt_shapes_and_launches_name_the_fix():
    with pytest.raises(ValueError, match="Triton kernel"):
        cuda_decode.entry_name(64, 4, 1, 4, 3, 1, torch.bfloat16)
    with pytest.raises(ValueError, match="num_warps"):
        cuda_decode.entry_name(256, 4, 1, 16, 3, 1, torch.bfloat16)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        cuda_decode.entry_name(256, 4, 1, 4, 3, 1, torch.float32)


def test_nvcc_failure_is_reported_with_its_message(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPERF_CUDA_CACHE", str(tmp_path))
    monkeypatch.setattr(cuda_decode, "find_nvcc", lambda: "/bin/false")
    with pytest.raises(RuntimeError, match="nvcc failed to build"):
        cuda_decode.build_cubin("sm_90a")
    monkeypatch.setattr(cuda_decode, "find_nvcc", lambda: None)
    with pytest.raises(RuntimeError, match="install the CUDA toolkit"):
        cuda_decode.build_cubin("sm_90a")
    assert not list(tmp_path.iterdir())  # nothing half-written is left to be taken for a cubin
