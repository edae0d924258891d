"""cuBLASLt GEMMs called through ctypes: FP8 or 16-bit, with bias or bias + GELU in the epilogue, FP8 or 16-bit out.

Why: in an FP8 layer the first FFN GEMM (``w1``, 1024 -> 4096) wrote a 16-bit ``[T, 4096]`` result that a separate
kernel read back to add the bias, apply GELU and write the FP8 input of ``w2``: ~12 KB per token per layer of extra
memory traffic, ~11 of 85 ms per 512 samples on an H200 (documentation/notes/bert_gpu_notes.md). cuBLASLt can do all of
it in the GEMM's epilogue (``CUBLASLT_EPILOGUE_GELU_BIAS``, scaling the result into e4m3 with ``D_SCALE``), which
``torch._scaled_mm`` does not expose. TensorRT fuses the same way. cuBLASLt's GELU is the tanh form. The same call
serves a 16-bit ``w2`` (16-bit output, no ``D_SCALE``) and 16-bit GEMMs, and can list cuBLASLt's candidate
algorithms for a shape (``heuristics``) and run any of them (``run``): the GEMM check times them against torch's
choice (scripts/gpu/check_gemm_algos.py).

No compiled extension: the library torch already loaded is opened with ctypes; descriptors are plain host objects
made once per (rows) and kept; the call itself goes on the current CUDA stream, so it is captured by CUDA graphs like
any torch op. A cuBLASLt handle belongs to the GPU that was current when it was made, so there is one per GPU, and
each (GPU, stream) gets its own workspace: two worker streams must not share one, and the default stream's handle
is 0 on every GPU, so a stream's handle alone names no workspace.

Layout: torch tensors are row-major; cuBLASLt is column-major. ``Y[M, N] = X[M, K] @ W[N, K].T`` is computed as the
column-major ``Y.T[N, M] = W[N, K] @ X.T`` with ``A = W`` (transposed: "T") and ``B = X`` ("N"), the only operand
layout FP8 GEMMs support.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading

import torch
from torch import Tensor

# cudaDataType_t
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUDA_R_8F_E4M3 = 0, 2, 14, 28
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
# cublasLtMatmulDescAttributes_t
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_A_SCALE_POINTER, DESC_B_SCALE_POINTER, DESC_D_SCALE_POINTER = 17, 18, 20
DESC_FAST_ACCUM, DESC_BIAS_DATA_TYPE = 25, 26
# cublasLtEpilogue_t
EPILOGUE_DEFAULT, EPILOGUE_BIAS, EPILOGUE_GELU_BIAS = 1, 4, 36
DTYPES = {torch.float16: CUDA_R_16F, torch.bfloat16: CUDA_R_16BF, torch.float8_e4m3fn: CUDA_R_8F_E4M3}
PREF_MAX_WORKSPACE_BYTES = 1
WORKSPACE_BYTES = 32 * 1024 * 1024  # what NVIDIA's guide recommends for Hopper


class _Heuristic(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: the algorithm (64 opaque bytes) and what it needs."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


class CublasLtError(RuntimeError):
    """A cuBLASLt call failed; the message names the call and its status code."""


def _library() -> ctypes.CDLL:
    """libcublasLt as torch loaded it (the soname resolves to the already-loaded copy), else the wheel's file."""
    names = ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    torch_dir = os.path.dirname(torch.__file__)
    site = os.path.dirname(torch_dir)
    names += sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcublasLt.so*"), recursive=True))
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as error:
            errors.append(f"{name}: {error}")
    raise CublasLtError("libcublasLt not found (tried " + "; ".join(errors[:4]) + ")")


class _Lt:
    """One GPU's cuBLASLt handle (made with that GPU current) and its workspaces; the function table is the
    process's (created on first use)."""

    _instances: dict[int, _Lt] = {}
    _lock = threading.Lock()

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.lib = _library()
        self.handle = ctypes.c_void_p()
        with torch.cuda.device(device):
            self.check("cublasLtCreate", self.lib.cublasLtCreate(ctypes.byref(self.handle)))
        # Every size_t/int64 argument typed: untyped, ctypes passes a 32-bit int whose upper register half is garbage.
        lib, vp, sz = self.lib, ctypes.c_void_p, ctypes.c_size_t
        lib.cublasLtMatmul.argtypes = [vp] * 12 + [vp, vp, sz, vp]
        lib.cublasLtMatmulDescCreate.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        lib.cublasLtMatmulDescSetAttribute.argtypes = [vp, ctypes.c_int, vp, sz]
        lib.cublasLtMatrixLayoutCreate.argtypes = [vp, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]
        lib.cublasLtMatmulPreferenceCreate.argtypes = [vp]
        lib.cublasLtMatmulPreferenceSetAttribute.argtypes = [vp, ctypes.c_int, vp, sz]
        lib.cublasLtMatmulAlgoGetHeuristic.argtypes = [vp] * 7 + [ctypes.c_int, vp, vp]
        self.workspaces: dict[int, Tensor] = {}

    @classmethod
    def get(cls, device: torch.device) -> _Lt:
        """The handle of ``device`` (a CUDA device; its index resolved against the current one)."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        with cls._lock:
            if index not in cls._instances:
                cls._instances[index] = cls(torch.device("cuda", index))
            return cls._instances[index]

    @staticmethod
    def check(call: str, status: int) -> None:
        if status != 0:
            raise CublasLtError(f"{call} returned cublasStatus {status}")

    def workspace(self, stream: torch.cuda.Stream) -> Tensor:
        """One workspace per stream of this GPU, allocated outside any graph capture (the warm-up runs first)."""
        key = stream.cuda_stream
        if key not in self.workspaces:
            self.workspaces[key] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        return self.workspaces[key]

    def set_attr(self, desc: ctypes.c_void_p, attr: int, value: ctypes._SimpleCData) -> None:
        self.check(
            "cublasLtMatmulDescSetAttribute",
            self.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), ctypes.sizeof(value)),
        )

    def layout(self, dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        self.check(
            "cublasLtMatrixLayoutCreate",
            self.lib.cublasLtMatrixLayoutCreate(
                ctypes.byref(out), dtype, ctypes.c_uint64(rows), ctypes.c_uint64(cols), ctypes.c_int64(ld)
            ),
        )
        return out


class LtGemm:
    """``Y = epilogue(X @ W.T * sx * sw (+ b))`` for ``X [M, K]`` and ``W [N, K]``, both e4m3 or both 16-bit.

    FP8: ``weight_scale``/``act_scale`` are float32 one-element device tensors (as ``Fp8Linear`` keeps them), and
    ``out_scale`` (the static input scale of the output's consumer) makes the output e4m3, ``q(y / out_scale)``;
    without it the output is 16-bit (``out_dtype``, default the bias's dtype). 16-bit: the output has the inputs'
    dtype. ``bias``: 16-bit ``[N]``, added in the epilogue, with GELU (tanh form) after it when ``gelu``.
    """

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        *,
        gelu: bool = False,
        weight_scale: Tensor | None = None,
        act_scale: Tensor | None = None,
        out_scale: float | None = None,
        out_dtype: torch.dtype | None = None,
        fast_accum: bool = False,
    ) -> None:
        if weight.dtype not in DTYPES or not weight.is_cuda or not weight.is_contiguous() or weight.dim() != 2:
            raise ValueError(f"LtGemm needs a contiguous e4m3/fp16/bf16 CUDA weight [N, K], got {weight.dtype}")
        if bias is not None and bias.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"bias must be fp16 or bf16, got {bias.dtype}")
        if gelu and bias is None:
            raise ValueError("cuBLASLt's GELU epilogue here is GELU_BIAS: pass the bias")
        self.fp8 = weight.dtype == torch.float8_e4m3fn
        if self.fp8 and (weight_scale is None or act_scale is None):
            raise ValueError("an FP8 LtGemm needs weight_scale and act_scale")
        if not self.fp8 and (out_scale or weight_scale is not None or act_scale is not None):
            raise ValueError("scales apply to FP8 GEMMs only")
        self.lt = _Lt.get(weight.device)
        self.weight, self.weight_scale, self.act_scale = weight, weight_scale, act_scale
        self.bias = bias.contiguous() if bias is not None else None
        self.n, self.k = weight.shape
        self.in_type = DTYPES[weight.dtype]
        self.d_scale = (
            torch.tensor([1.0 / out_scale], dtype=torch.float32, device=weight.device) if out_scale else None
        )
        if out_scale:
            self.out_dtype = torch.float8_e4m3fn
        elif self.fp8:
            self.out_dtype = out_dtype or (bias.dtype if bias is not None else torch.float16)
        else:
            self.out_dtype = weight.dtype
        self.out_type = DTYPES[self.out_dtype]
        # C is never read (beta 0, pointer NULL) but its layout must have a 16-bit type, also for an FP8 output.
        bias_dtype = bias.dtype if bias is not None else torch.float16
        self.c_type = self.out_type if self.out_type != CUDA_R_8F_E4M3 else DTYPES[bias_dtype]
        self.epilogue = EPILOGUE_GELU_BIAS if gelu else (EPILOGUE_BIAS if bias is not None else EPILOGUE_DEFAULT)
        self.desc = self._descriptor(fast_accum)
        self.layout_a = self.lt.layout(self.in_type, self.k, self.n, self.k)  # W.T viewed column-major
        self.plans: dict[int, tuple] = {}
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _descriptor(self, fast_accum: bool) -> ctypes.c_void_p:
        lt, desc = self.lt, ctypes.c_void_p()
        lt.check(
            "cublasLtMatmulDescCreate",
            lt.lib.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
        )
        lt.set_attr(desc, DESC_TRANSA, ctypes.c_int32(CUBLAS_OP_T))
        lt.set_attr(desc, DESC_TRANSB, ctypes.c_int32(CUBLAS_OP_N))
        lt.set_attr(desc, DESC_EPILOGUE, ctypes.c_uint32(self.epilogue))
        if self.bias is not None:
            lt.set_attr(desc, DESC_BIAS_POINTER, ctypes.c_void_p(self.bias.data_ptr()))
            lt.set_attr(desc, DESC_BIAS_DATA_TYPE, ctypes.c_int32(DTYPES[self.bias.dtype]))
        if self.fp8:
            lt.set_attr(desc, DESC_A_SCALE_POINTER, ctypes.c_void_p(self.weight_scale.data_ptr()))
            lt.set_attr(desc, DESC_B_SCALE_POINTER, ctypes.c_void_p(self.act_scale.data_ptr()))
            lt.set_attr(desc, DESC_FAST_ACCUM, ctypes.c_int8(1 if fast_accum else 0))
        if self.d_scale is not None:
            lt.set_attr(desc, DESC_D_SCALE_POINTER, ctypes.c_void_p(self.d_scale.data_ptr()))
        return desc

    def _layouts(self, m: int) -> tuple[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]:
        lt = self.lt
        return (
            lt.layout(self.in_type, self.k, m, self.k),
            lt.layout(self.c_type, self.n, m, self.n),
            lt.layout(self.out_type, self.n, m, self.n),
        )

    def heuristics(self, m: int, count: int = 1) -> list[_Heuristic]:
        """cuBLASLt's candidate algorithms for ``m`` rows, best guess first (at most ``count``)."""
        lt = self.lt
        layout_b, layout_c, layout_d = self._layouts(m)
        pref = ctypes.c_void_p()
        lt.check("cublasLtMatmulPreferenceCreate", lt.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)))
        size = ctypes.c_uint64(WORKSPACE_BYTES)
        lt.check(
            "cublasLtMatmulPreferenceSetAttribute",
            lt.lib.cublasLtMatmulPreferenceSetAttribute(
                pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(size), ctypes.sizeof(size)
            ),
        )
        results, found = (_Heuristic * count)(), ctypes.c_int(0)
        lt.check(
            "cublasLtMatmulAlgoGetHeuristic",
            lt.lib.cublasLtMatmulAlgoGetHeuristic(
                lt.handle, self.desc, self.layout_a, layout_b, layout_c, layout_d, pref, count, results,
                ctypes.byref(found),
            ),
        )  # fmt: skip
        return [results[i] for i in range(found.value) if results[i].state == 0]

    def _plan(self, m: int) -> tuple:
        """Layouts and the heuristic's best algorithm for ``m`` rows (kept: the buckets repeat). The heuristic's first
        guess is used, not the fastest candidate by timing: in a full forward the first guess is as fast as the best
        (scripts/gpu/check_gemm_algos.py; figures in documentation/notes/journal/2026-11-22.md)."""
        plan = self.plans.get(m)
        if plan is None:
            found = self.heuristics(m)
            if not found:
                raise CublasLtError(
                    f"cuBLASLt has no algorithm for M={m}, N={self.n}, K={self.k} ({self.weight.dtype}, epilogue "
                    f"{self.epilogue})"
                )
            plan = (*self._layouts(m), found[0])
            self.plans[m] = plan
        return plan

    def run(self, x: Tensor, heuristic: _Heuristic | None = None, out: Tensor | None = None) -> Tensor:
        """One GEMM on the current stream with the given algorithm (default: the heuristic's best for ``M``)."""
        if x.dtype != self.weight.dtype or x.dim() != 2 or x.shape[1] != self.k or not x.is_contiguous():
            raise ValueError(
                f"expected a contiguous {self.weight.dtype} [M, {self.k}] input, got {x.dtype} {tuple(x.shape)}"
            )
        m = x.shape[0]
        if out is None:
            out = torch.empty((m, self.n), dtype=self.out_dtype, device=x.device)
        if m == 0:
            return out
        layout_b, layout_c, layout_d, best = self._plan(m)
        algo = heuristic if heuristic is not None else best
        if x.device != self.lt.device:
            raise ValueError(f"the input is on {x.device}, the GEMM's weight on {self.lt.device}")
        stream = torch.cuda.current_stream(x.device)
        workspace = self.lt.workspace(stream)
        status = self.lt.lib.cublasLtMatmul(
            self.lt.handle,
            self.desc,
            ctypes.byref(self.alpha),
            ctypes.c_void_p(self.weight.data_ptr()),
            self.layout_a,
            ctypes.c_void_p(x.data_ptr()),
            layout_b,
            ctypes.byref(self.beta),
            None,  # C: not read (beta 0); NULL, as it may not alias an FP8 D
            layout_c,
            ctypes.c_void_p(out.data_ptr()),
            layout_d,
            ctypes.byref(algo.algo),
            ctypes.c_void_p(workspace.data_ptr()),
            WORKSPACE_BYTES,
            ctypes.c_void_p(stream.cuda_stream),
        )
        self.lt.check("cublasLtMatmul", status)
        return out

    __call__ = run


def fp8_gelu_gemm(
    weight_q: Tensor,
    weight_scale: Tensor,
    act_scale: Tensor,
    bias: Tensor,
    out_scale: float | None,
    fast_accum: bool = False,
) -> LtGemm:
    """``w1`` of an FP8 layer: e4m3 in, bias + GELU, e4m3 out scaled for ``w2`` (or 16-bit out when ``out_scale``
    is None, for a 16-bit ``w2``)."""
    return LtGemm(
        weight_q,
        bias,
        gelu=True,
        weight_scale=weight_scale,
        act_scale=act_scale,
        out_scale=out_scale,
        fast_accum=fast_accum,
    )
