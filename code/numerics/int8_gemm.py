# ruff: noqa: ANN001 - Triton kernel arguments are typed by the JIT, not annotations
"""The INT8 GEMM of ``Int8Linear`` on CUDA: ``Y = epilogue(X_int8[M, K] @ W_int8[N, K].T)``, one Triton kernel.

The products accumulate in int32 (``tl.dot`` of int8 tiles, ``out_dtype=tl.int32``: mma.sync s8 on sm_80/sm_86,
wgmma s8 on sm_90, Triton's choice), and the epilogue runs on the accumulator tile in registers:
``acc * dequant_scale[n] + bias[n]`` in float32 (``dequant_scale = act_scale * w_scale[n]``), tanh GELU on request
(the form cuBLASLt's GELU epilogue has, so ``gelu_in_gemm`` means the same for FP8 and INT8 engines), then 16 bits,
or int8 quantized with the consumer's static scale (``w1`` writes ``w2``'s input directly). Why one kernel:
cuBLAS's int8 GEMM (``torch._int_mm``) returns the int32 accumulator, whose ``[M, N]`` write and read back by a
dequantize kernel cost 8 bytes per output element more than the fused epilogue's 2 (1 for an int8 output); at
BERT-large's ``w1`` (85k x 4096 outputs per layer) that is ~2 GB per layer. ``method="int_mm"`` runs that pair (the
epilogue is the same jit function) so the GPU check times both (scripts/gpu/check_bert_packed.py).

Tiles are fixed per range of M (``TILES``) and chosen on the host from M and the GPU's shared memory: no autotuning
at run time, because the packed runner captures a CUDA graph per token bucket and an autotuner would time inside the
capture. Each launch allocates only its output (from the caching allocator, or the graph's pool under capture) and
synchronizes nothing, so it is capturable once compiled; the runner's warm-up compiles it for each bucket's M.
Programs are launched in groups of ``group_m`` row blocks that sweep the column blocks together, so a tile of W is
read from DRAM once per group rather than once per row block (L2 reuse, as Triton's matmul tutorial does). Rows past
M load row ``m % M`` (a valid address; their results are never stored), so the K loop has no masks when K is a
multiple of ``block_k`` (every BERT shape).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from code.numerics.int8 import GEMM_METHODS, INT8, MAX_K, quantize_int8


class Int8Tile(NamedTuple):
    """One launch shape: the program's output tile (``block_m`` x ``block_n``), its K step, the launch group, warps
    and pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the K loop's pipeline: each stage holds an int8 tile of X and one of W."""
        return self.num_stages * (self.block_m + self.block_n) * self.block_k

    def __str__(self) -> str:
        return (f"M{self.block_m}/N{self.block_n}/K{self.block_k}/g{self.group_m}/w{self.num_warps}/"
                f"s{self.num_stages}")


# (largest M, tiles in order of preference): the first whose pipeline fits the GPU's shared memory (less
# SMEM_RESERVE) runs. Few rows (SingleStream, small Server batches): 64 x 64 tiles, so N=1024 still spreads over 16+
# programs per 64 rows. Many rows (Offline, ~85k tokens): 128 x 128 x 128 tiles with 8 warps and 3 stages (96 KB:
# an A10's 99 KB less the reserve takes the next), the fastest of eight shapes timed at BERT's four GEMMs on an H200
# (2.19 ms a layer at 85,008 rows against 2.50 for 128 x 256, 2.96 with 4 stages; scripts/gpu/check_bert_packed.py).
TILES: tuple[tuple[int, tuple[Int8Tile, ...]], ...] = (
    (256, (Int8Tile(64, 64, 128, 8, 4, 4), Int8Tile(64, 64, 128, 8, 4, 2))),
    (4096, (Int8Tile(128, 128, 128, 8, 8, 4), Int8Tile(128, 128, 128, 8, 8, 3), Int8Tile(128, 128, 64, 8, 4, 3))),
    (2**62, (Int8Tile(128, 128, 128, 8, 8, 3), Int8Tile(128, 128, 64, 8, 4, 3))),
)
SMEM_RESERVE = 16 * 1024  # what Triton may add beside the pipeline (barriers, the epilogue's layout changes)


class _TileChoice:
    """The tile each (GPU, M range) runs: chosen once per GPU from its shared memory, and moved to the next tile of
    the range if Triton finds the first out of resources when it compiles (warm-up, before any graph capture)."""

    _lock = threading.Lock()
    _chosen: dict[tuple[int, int], int] = {}  # (device index, TILES index) -> index into that range's tiles

    @classmethod
    def get(cls, device: torch.device, m: int) -> tuple[tuple[int, int], Int8Tile]:
        band = next(i for i, (limit, _) in enumerate(TILES) if m <= limit)
        if device.type != "cuda":  # Triton's CPU interpreter (tests): no shared memory to fit
            return (-1, band), TILES[band][1][0]
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (index, band)
        with cls._lock:
            if key not in cls._chosen:
                props = torch.cuda.get_device_properties(index)
                budget = getattr(props, "shared_memory_per_block_optin", 48 * 1024) - SMEM_RESERVE
                tiles = TILES[band][1]
                cls._chosen[key] = next((i for i, t in enumerate(tiles) if t.smem_bytes <= budget), len(tiles) - 1)
            return key, TILES[band][1][cls._chosen[key]]

    @classmethod
    def fall_back(cls, key: tuple[int, int]) -> bool:
        """Move ``key`` to its range's next tile; False when there is none."""
        with cls._lock:
            if key not in cls._chosen or cls._chosen[key] + 1 >= len(TILES[key[1]][1]):
                return False
            cls._chosen[key] += 1
            return True


def tile_for(m: int, device: torch.device | None = None) -> Int8Tile:
    """The tile an ``m``-row GEMM runs on ``device`` (default: the current GPU; off CUDA, Triton's interpreter, the
    range's first)."""
    return _TileChoice.get(device or torch.device("cuda"), m)[1]


@triton.jit
def _gelu_tanh(y):
    """GELU, tanh form: ``0.5 y (1 + tanh(0.79788456 (y + 0.044715 y**3)))`` with ``tanh(u) = 1 - 2 / (exp(2u) + 1)``
    (exact at both ends: exp's overflow to inf gives 1, its underflow to 0 gives -1)."""
    u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    return 0.5 * y * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, y_ptr, stride_ym, scale_ptr, bias_ptr, inv_out_scale,
              HAS_BIAS: tl.constexpr, GELU: tl.constexpr, OUT_INT8: tl.constexpr):
    """Dequantize an int32 accumulator tile, add the bias, GELU, and store 16 bits or int8 (rows < M only)."""
    n_ok = offs_n < N
    y = acc.to(tl.float32) * tl.load(scale_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if GELU:
        y = _gelu_tanh(y)
    ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    mask = (offs_m < M)[:, None] & n_ok[None, :]
    if OUT_INT8:
        tl.store(ptrs, quantize_int8(y, inv_out_scale), mask=mask)
    else:
        tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _int8_gemm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    scale_ptr,
    bias_ptr,
    inv_out_scale,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GELU: tl.constexpr,
    OUT_INT8: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * grid_n
    first_m = (pid // in_group) * GROUP_M
    group_size = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_size
    pid_n = (pid % in_group) // group_size
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = offs_m % M  # past M (or N): a valid row whose results are never stored
    cols = offs_n % N
    x_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + cols.to(tl.int64)[None, :] * stride_wn + offs_k[:, None]  # W.T's tile [BLOCK_K, BLOCK_N], K-major
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_ok = offs_k < K - k * BLOCK_K
            a = tl.load(x_ptrs, mask=k_ok[None, :], other=0)
            b = tl.load(w_ptrs, mask=k_ok[:, None], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    _epilogue(acc, offs_m, offs_n, M, N, y_ptr, stride_ym, scale_ptr, bias_ptr, inv_out_scale, HAS_BIAS, GELU,
              OUT_INT8)


@triton.jit
def _dequant_kernel(acc_ptr, y_ptr, scale_ptr, bias_ptr, inv_out_scale, M, N, stride_am, stride_ym,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, GELU: tl.constexpr,
                    OUT_INT8: tl.constexpr):
    """The epilogue of ``method="int_mm"`` over an int32 accumulator in memory."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    acc = tl.load(acc_ptr + offs_m.to(tl.int64)[:, None] * stride_am + offs_n[None, :], mask=mask, other=0)
    _epilogue(acc, offs_m, offs_n, M, N, y_ptr, stride_ym, scale_ptr, bias_ptr, inv_out_scale, HAS_BIAS, GELU,
              OUT_INT8)


def _check(xq: Tensor, weight_q: Tensor, dequant_scale: Tensor, bias: Tensor | None, out_scale: float | None,
           out_dtype: torch.dtype) -> None:
    if xq.dtype != INT8 or weight_q.dtype != INT8 or xq.dim() != 2 or weight_q.dim() != 2:
        raise ValueError(f"int8_gemm takes int8 matrices, got x {xq.dtype} {tuple(xq.shape)}, "
                         f"W {weight_q.dtype} {tuple(weight_q.shape)}")
    n, k = weight_q.shape
    if xq.shape[1] != k or xq.stride(1) != 1 or not weight_q.is_contiguous():
        raise ValueError(f"expected a row-major int8 X [M, {k}] and a contiguous W [{n}, {k}], got X "
                         f"{tuple(xq.shape)} with strides {xq.stride()}")
    if k > MAX_K:
        raise ValueError(f"K={k} overflows the int32 accumulator (at most {MAX_K})")
    if dequant_scale.dtype != torch.float32 or dequant_scale.shape != (n,) or not dequant_scale.is_contiguous():
        raise ValueError(f"dequant_scale must be a contiguous float32 [{n}] vector (act_scale * w_scale[n])")
    if bias is not None and (bias.shape != (n,) or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous [{n}] vector, got {tuple(bias.shape)}")
    if not out_scale and out_dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"a dequantized output is fp16, bf16 or float32, not {out_dtype}; for int8 give out_scale")
    devices = {t.device for t in (xq, weight_q, dequant_scale, *([bias] if bias is not None else []))}
    if len(devices) != 1:
        raise ValueError(f"int8_gemm's tensors are on several devices: {sorted(map(str, devices))}")


def int8_gemm(xq: Tensor, weight_q: Tensor, dequant_scale: Tensor, bias: Tensor | None = None, *, gelu: bool = False,
              out_scale: float | None = None, out_dtype: torch.dtype = torch.float16, method: str = "triton",
              tile: Int8Tile | None = None) -> Tensor:
    """``reference_gemm``'s arithmetic on the GPU (``code.numerics.int8``): int8 ``xq [M, K]`` and ``weight_q
    [N, K]``, float32 ``dequant_scale [N]``, 16-bit ``bias [N]``; returns ``[M, N]`` int8 (``out_scale``) or
    ``out_dtype``. ``method``: ``triton`` (one fused kernel) or ``int_mm`` (cuBLAS's int8 GEMM, then the epilogue as
    a second kernel; M <= 16 runs ``triton``, which cuBLAS does not take). ``tile``: a launch shape instead of the one
    ``TILES`` gives M (the GPU check times the alternatives)."""
    _check(xq, weight_q, dequant_scale, bias, out_scale, out_dtype)
    if method not in GEMM_METHODS:
        raise ValueError(f"method={method!r}: expected one of {', '.join(GEMM_METHODS)}")
    m, (n, k) = xq.shape[0], weight_q.shape
    y = torch.empty((m, n), dtype=INT8 if out_scale else out_dtype, device=xq.device)
    if m == 0:
        return y
    epilogue = {"HAS_BIAS": bias is not None, "GELU": gelu, "OUT_INT8": bool(out_scale)}
    inv_out_scale = 1.0 / out_scale if out_scale else 1.0
    bias_arg = bias if bias is not None else dequant_scale  # never read without HAS_BIAS
    if method == "int_mm" and m > 16 and k % 8 == 0 and n % 8 == 0:
        acc = torch._int_mm(xq, weight_q.t())
        grid = (triton.cdiv(m, 64), triton.cdiv(n, 128))
        _dequant_kernel[grid](acc, y, dequant_scale, bias_arg, inv_out_scale, m, n, acc.stride(0), y.stride(0),
                              BLOCK_M=64, BLOCK_N=128, num_warps=8, **epilogue)
        return y
    key, chosen = _TileChoice.get(xq.device, m) if tile is None else (None, tile)
    while True:
        try:
            _launch(xq, weight_q, y, dequant_scale, bias_arg, inv_out_scale, chosen, epilogue)
            return y
        except triton.runtime.errors.OutOfResources:
            if key is None or not _TileChoice.fall_back(key):
                raise
            key, chosen = _TileChoice.get(xq.device, m)


def _launch(xq: Tensor, weight_q: Tensor, y: Tensor, scale: Tensor, bias: Tensor, inv_out_scale: float,
            tile: Int8Tile, epilogue: dict[str, bool]) -> None:
    m, (n, k) = xq.shape[0], weight_q.shape
    grid = (triton.cdiv(m, tile.block_m) * triton.cdiv(n, tile.block_n),)
    _int8_gemm_kernel[grid](
        xq, weight_q, y, scale, bias, inv_out_scale, m, n, k, xq.stride(0), weight_q.stride(0), y.stride(0),
        BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, GROUP_M=tile.group_m,
        EVEN_K=k % tile.block_k == 0, num_warps=tile.num_warps, num_stages=tile.num_stages, **epilogue,
    )


__all__ = ["TILES", "Int8Tile", "int8_gemm", "tile_for"]
