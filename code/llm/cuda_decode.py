"""The CUDA decode attention kernel over the FP8 paged KV cache (``code/llm/cuda/paged_decode_fp8.cu``): built by
nvcc into a cubin for the GPU's architecture, loaded through the CUDA driver, launched on PyTorch's current stream.

Why the driver and not a PyTorch extension: the kernel takes one parameter block and no PyTorch type, so a cubin
and four driver calls serve it without compiling PyTorch's headers (minutes) or matching its ABI; a launch on a
stream that PyTorch is capturing goes into the CUDA graph like any other. The cubin is built once per source, nvcc
command and architecture into ``build/cuda/`` (``MLPERF_CUDA_CACHE`` moves it) and reused.

Modules and functions belong to a device's context, so they are kept per device index (``DeviceKernels.get``),
never in one process-wide handle; whether the kernel serves a device is decided once per device (``serves``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

SOURCE = Path(__file__).resolve().parent / "cuda" / "paged_decode_fp8.cu"
TILE = 16  # keys a tile of the kernel (its split alignment is lcm(page size, TILE)); TILE in the source
SHAPES = {(256, 4, 1), (128, 1, 4)}  # (head_dim, beams, group) the source instantiates
# (warps, stages, blocks) the source instantiates: warps a block, tile buffers a warp, blocks an SM that the
# register cap (__launch_bounds__' minimum) allows
LAUNCHES = {(4, 3, 1), (4, 2, 1), (4, 2, 4), (8, 2, 1)}
STAGED_WORDS = 256 + 512  # page numbers and ancestry rows a block stages (STAGED_PAGES + STAGED_IDS in the source)
PARAMS_BYTES = 280  # sizeof(DecodeParams) in the source, which asserts it too
# The engines choose the kernel from compute capability 9.0 (H100, H200, B200), where it was measured; it builds
# for 8.9 (L4, L40S) too, where a launch with CUDA runs it (at head_dim 256 the default launch takes all 99 KB of
# shared memory Ada gives a block, one block an SM: not timed; 8 warps exceed it).
CHOSEN_FROM = (9, 0)
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
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


def refusal(head_dim: int, beams: int, group: int, dtype: torch.dtype, page_size: int) -> str | None:
    """Why the built kernel cannot serve this shape (None: it can): its instantiated shapes, query dtypes, and pages
    of whole tiles (a tile of 16 keys never crosses a page)."""
    if (head_dim, beams, group) not in SHAPES:
        return (f"it is built for (head_dim, beams, query heads a key/value head) in {sorted(SHAPES)}, not "
                f"{(head_dim, beams, group)}")
    if dtype not in DTYPES:
        return f"it takes bf16 or fp16 queries, not {dtype}"
    if page_size % TILE:
        return f"its tiles of {TILE} keys need pages of a multiple of {TILE} tokens, not {page_size}"
    return None


def serves(device: torch.device, head_dim: int, beams: int, group: int, dtype: torch.dtype, page_size: int) -> bool:
    """Whether the engines run the kernel for this shape on ``device``: a shape it is built for (``refusal``), a GPU
    of compute capability ``CHOSEN_FROM`` or newer, and its cubin built and loaded there (once a device; a failure
    warns with the fix and the Triton kernel runs)."""
    if refusal(head_dim, beams, group, dtype, page_size) is not None:
        return False
    if torch.cuda.get_device_capability(device) < CHOSEN_FROM:
        return False
    return DeviceKernels.get(device).ready


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


def nvcc_command(nvcc: str, arch: str, output: Path) -> list[str]:
    return [nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-o", str(output), str(SOURCE)]


def build_cubin(arch: str) -> Path:
    """The cubin of the source for ``arch``, compiled by nvcc unless one of the same source, command and nvcc is
    cached. Raises RuntimeError naming the fix when nvcc is missing or fails."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("the CUDA decode kernel is compiled by nvcc, which is not on PATH nor in CUDA_HOME: "
                           "install the CUDA toolkit (NVIDIA's PyTorch image has it)")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    key = "\n".join([SOURCE.read_text(), " ".join(nvcc_command("nvcc", arch, Path("out"))), version])
    target = cache_dir() / f"paged_decode_fp8-{hashlib.sha256(key.encode()).hexdigest()[:16]}-{arch}.cubin"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, suffix=".tmp")  # unique to this process and thread
    os.close(handle)
    partial = Path(name)
    try:
        result = subprocess.run(nvcc_command(nvcc, arch, partial), capture_output=True, text=True, check=False)
        if result.returncode:
            raise RuntimeError(f"nvcc failed to build {SOURCE.name} for {arch} (a toolkit too old for this GPU? "
                               f"CUDA 12.8 or newer builds every architecture):\n{result.stderr[-4000:]}")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


_driver: ctypes.CDLL | None = None


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


@dataclass
class DeviceKernels:
    """The kernel's module on one device (its primary context) and its functions by name; ``ready`` False when it
    could not be built or loaded there (``error`` says why)."""

    module: ctypes.c_void_p | None
    error: str = ""
    functions: dict[str, ctypes.c_void_p] = field(default_factory=dict)
    _by_device: ClassVar[dict[int, DeviceKernels]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.module is not None

    @classmethod
    def get(cls, device: torch.device) -> DeviceKernels:
        """The device's module, built and loaded on first use; a failure is kept (and warned once), not raised,
        so the caller chooses the Triton kernel."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        with cls._lock:
            if index not in cls._by_device:
                cls._by_device[index] = cls._load(index)
            return cls._by_device[index]

    @classmethod
    def _load(cls, index: int) -> DeviceKernels:
        try:
            cubin = build_cubin(architecture(torch.device("cuda", index))).read_bytes()
            with torch.cuda.device(index):  # cudaSetDevice makes the device's primary context current
                module = ctypes.c_void_p()
                check(driver().cuModuleLoadData(ctypes.byref(module), cubin),
                      "cuModuleLoadData (a driver older than the toolkit that built the cubin?)")
            return cls(module)
        except (OSError, RuntimeError, ValueError) as error:
            warnings.warn(f"the CUDA decode kernel is not available on cuda:{index}, so the slower Triton decode "
                          f"kernel runs: {error}", stacklevel=3)
            return cls(None, str(error))

    def function(self, name: str, shared_bytes: int, device: torch.device) -> ctypes.c_void_p:
        if not self.ready:
            raise RuntimeError(f"the CUDA decode kernel is not available on {device}: {self.error}")
        if name not in self.functions:
            optin = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
            if shared_bytes > optin:
                raise ValueError(f"the CUDA decode launch {name} takes {shared_bytes} B of shared memory a block, "
                                 f"more than this GPU's {optin}: choose fewer warps or buffers")
            handle = ctypes.c_void_p()
            check(driver().cuModuleGetFunction(ctypes.byref(handle), self.module, name.encode()),
                  f"cuModuleGetFunction({name})")
            check(driver().cuFuncSetAttribute(handle, _ATTRIBUTE_MAX_DYNAMIC_SHARED, shared_bytes),
                  f"cuFuncSetAttribute({name}, {shared_bytes} B shared)")
            self.functions[name] = handle
        return self.functions[name]


def shared_bytes(head_dim: int, rows: int, warps: int, stages: int) -> int:
    """A block's shared memory: its warps' rings of key and value tiles (reused for the warps' merge), then its
    staged page numbers and ancestry rows."""
    return max(warps * stages * 2 * TILE * head_dim, warps * rows * (head_dim + 2) * 4) + 4 * STAGED_WORDS


def entry_name(head_dim: int, beams: int, group: int, warps: int, stages: int, blocks: int,
               dtype: torch.dtype) -> str:
    reason = refusal(head_dim, beams, group, dtype, TILE)
    if reason is not None:
        raise ValueError(f"the CUDA decode kernel cannot serve this shape: {reason}; the Triton kernel can")
    if (warps, stages, blocks) not in LAUNCHES:
        raise ValueError(f"the CUDA decode kernel is built for (num_warps, num_stages, BLOCKS) in "
                         f"{sorted(LAUNCHES)}, not {(warps, stages, blocks)}")
    return f"paged_decode_fp8_d{head_dim}_b{beams}_g{group}_w{warps}_s{stages}_m{blocks}_{DTYPES[dtype]}"


def launch(params: DecodeParams, grid: tuple[int, int, int], q: Tensor, head_dim: int, beams: int, group: int,
           warps: int, stages: int, blocks: int) -> None:
    """One launch on PyTorch's current stream of ``q``'s device."""
    smem = shared_bytes(head_dim, beams * group, warps, stages)
    name = entry_name(head_dim, beams, group, warps, stages, blocks, q.dtype)
    handle = DeviceKernels.get(q.device).function(name, smem, q.device)
    stream = ctypes.c_void_p(torch.cuda.current_stream(q.device).cuda_stream)
    arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    check(driver().cuLaunchKernel(handle, *grid, warps * 32, 1, 1, smem, stream, arguments, None), "cuLaunchKernel")
