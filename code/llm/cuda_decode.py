"""The CUDA decode attention kernel over the FP8 paged KV cache (``code/llm/cuda/paged_decode_fp8.cu``): built by
nvcc into a cubin for the GPU's architecture, loaded through the CUDA driver, launched on PyTorch's current stream.

Why the driver and not a PyTorch extension: the kernel takes one parameter block and no PyTorch type, so a cubin
and four driver calls serve it without compiling PyTorch's headers (minutes) or matching its ABI; a launch on a
stream that PyTorch is capturing goes into the CUDA graph like any other. The cubin is built once per source and
architecture into ``build/cuda/`` (``MLPERF_CUDA_CACHE`` moves it) and reused.

Modules and functions belong to a device's context, so they are kept per device (``kernels(device)``), never in
one process-wide handle.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).resolve().parent / "cuda" / "paged_decode_fp8.cu"
TILE = 16  # keys a tile of the kernel (its split alignment is lcm(page size, TILE))
SHAPES = {(256, 4, 1), (128, 1, 4)}  # (head_dim, beams, group) the source instantiates
# (warps, stages, blocks) the source instantiates: warps a block, tile buffers a warp, blocks an SM that the
# register cap (__launch_bounds__' minimum) allows
LAUNCHES = {(4, 3, 1), (4, 2, 1), (4, 2, 4), (8, 2, 1)}
STAGED_WORDS = 256 + 512  # page numbers and ancestry rows a block stages (STAGED_PAGES + STAGED_IDS)
_ATTRIBUTE_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class DecodeParams(ctypes.Structure):
    """The kernel's parameter block, field for field as ``DecodeParams`` in the source."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in ("q", "pk", "pv", "table", "lengths", "gk", "gv", "ancestry", "counts",
                                              "out", "acc", "stats")),
        *((name, ctypes.c_int64) for name in (
            "stride_q_row", "stride_q_head", "stride_k_page", "stride_k_pos", "stride_k_head", "stride_table",
            "stride_g_slot", "stride_g_beam", "stride_g_col", "stride_g_head", "stride_a_slot", "stride_a_beam",
            "stride_o_row", "stride_o_head", "stride_w_split", "stride_w_row", "stride_w_head", "stride_s_kind",
            "stride_s_split", "stride_s_row")),
        ("scale_log2", ctypes.c_float), ("v_scale", ctypes.c_float),
        ("splits", ctypes.c_int32), ("align", ctypes.c_int32), ("page", ctypes.c_int32),
        ("heads_first", ctypes.c_int32),
    ]


def cache_dir() -> Path:
    return Path(os.environ.get("MLPERF_CUDA_CACHE", Path(__file__).resolve().parents[2] / "build" / "cuda"))


def architecture(device: torch.device) -> str:
    """nvcc's name for the device's architecture: the ``a`` variant on Hopper and Blackwell (their
    architecture-specific instructions), the plain one elsewhere."""
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        raise ValueError(f"the FP8 decode kernel needs e4m3 conversions (compute capability 8.9 or newer); this GPU "
                         f"is {major}.{minor}: use the Triton kernel (a decode launch without CUDA)")
    suffix = "a" if major in (9, 10) else ""
    return f"sm_{major}{minor}{suffix}"


def find_nvcc() -> str | None:
    """nvcc on PATH, else in CUDA_HOME (default /usr/local/cuda); None when neither has it."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidate = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def cubin_path(arch: str) -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"paged_decode_fp8-{digest}-{arch}.cubin"


def available(device: torch.device) -> bool:
    """Whether the kernel can run on ``device``: e4m3 conversions (compute capability 8.9 or newer) and its cubin
    built already or nvcc to build it. Without nvcc a warning names the fix once, and the caller runs the Triton
    kernel."""
    if torch.cuda.get_device_capability(device) < (8, 9):
        return False
    if cubin_path(architecture(device)).exists() or find_nvcc():
        return True
    warnings.warn("the CUDA decode kernel needs nvcc to build it (install the CUDA toolkit, or set CUDA_HOME); the "
                  "slower Triton decode kernel runs instead", stacklevel=2)
    return False


def build_cubin(arch: str) -> Path:
    """The cubin of the source for ``arch``, compiled by nvcc unless one of the same source is cached."""
    target = cubin_path(arch)
    if target.exists():
        return target
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("the CUDA decode kernel is compiled by nvcc, which is not on PATH nor in CUDA_HOME: "
                           "install the CUDA toolkit, or choose the Triton decode kernel (a launch without CUDA)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    command = [nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-o", str(partial), str(SOURCE)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(f"nvcc failed to build {SOURCE.name} for {arch}:\n{result.stderr[-4000:]}")
    partial.replace(target)
    return target


@dataclass
class DeviceKernels:
    """The loaded module of one device and its functions by name."""

    module: ctypes.c_void_p
    functions: dict[str, ctypes.c_void_p]


_driver: ctypes.CDLL | None = None
_loaded: dict[int, DeviceKernels] = {}  # by device index: a module belongs to that device's context


def driver() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def check(status: int, what: str) -> None:
    if status:
        name = ctypes.c_char_p()
        driver().cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeError(f"CUDA driver: {what} failed: {(name.value or b'?').decode()} ({status})")


def kernels(device: torch.device) -> DeviceKernels:
    """The device's module, loaded (and built) on first use in the device's primary context, which PyTorch's
    runtime makes current."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _loaded:
        cubin = build_cubin(architecture(device)).read_bytes()
        with torch.cuda.device(index):
            torch.cuda.synchronize()  # the runtime makes the device's primary context current on this thread
            module = ctypes.c_void_p()
            check(driver().cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        _loaded[index] = DeviceKernels(module, {})
    return _loaded[index]


def function(device: torch.device, name: str, shared_bytes: int) -> ctypes.c_void_p:
    loaded = kernels(device)
    if name not in loaded.functions:
        handle = ctypes.c_void_p()
        check(driver().cuModuleGetFunction(ctypes.byref(handle), loaded.module, name.encode()),
              f"cuModuleGetFunction({name})")
        check(driver().cuFuncSetAttribute(handle, _ATTRIBUTE_MAX_DYNAMIC_SHARED, shared_bytes),
              f"cuFuncSetAttribute({name}, {shared_bytes} B shared)")
        loaded.functions[name] = handle
    return loaded.functions[name]


def shared_bytes(head_dim: int, rows: int, warps: int, stages: int) -> int:
    """A block's shared memory: its warps' rings of key and value tiles (reused for the warps' merge), then its
    staged page numbers and ancestry rows."""
    return max(warps * stages * 2 * TILE * head_dim, warps * rows * (head_dim + 2) * 4) + 4 * STAGED_WORDS


def entry_name(head_dim: int, beams: int, group: int, warps: int, stages: int, blocks: int,
               dtype: torch.dtype) -> str:
    if (head_dim, beams, group) not in SHAPES:
        raise ValueError(f"the CUDA decode kernel is built for (head_dim, beams, group) in {sorted(SHAPES)}, not "
                         f"{(head_dim, beams, group)}: use the Triton kernel (a decode launch without CUDA)")
    if (warps, stages, blocks) not in LAUNCHES:
        raise ValueError(f"the CUDA decode kernel is built for (num_warps, num_stages, BLOCKS) in "
                         f"{sorted(LAUNCHES)}, not {(warps, stages, blocks)}")
    names = {torch.bfloat16: "bf16", torch.float16: "f16"}
    if dtype not in names:
        raise ValueError(f"the CUDA decode kernel takes bf16 or fp16 queries, not {dtype}")
    return f"paged_decode_fp8_d{head_dim}_b{beams}_g{group}_w{warps}_s{stages}_m{blocks}_{names[dtype]}"


def launch(params: DecodeParams, grid: tuple[int, int, int], q: Tensor, head_dim: int, beams: int, group: int,
           warps: int, stages: int, blocks: int) -> None:
    """One launch on PyTorch's current stream of ``q``'s device."""
    smem = shared_bytes(head_dim, beams * group, warps, stages)
    handle = function(q.device, entry_name(head_dim, beams, group, warps, stages, blocks, q.dtype), smem)
    stream = ctypes.c_void_p(torch.cuda.current_stream(q.device).cuda_stream)
    arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    check(driver().cuLaunchKernel(handle, *grid, warps * 32, 1, 1, smem, stream, arguments, None), "cuLaunchKernel")
