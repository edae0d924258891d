"""Compile the in-flight GPT-J engine's Triton kernels for GPUs other than the one at hand, without a GPU.

Triton compiles a kernel for a compute capability ahead of time with the ``ptxas`` its wheel carries; this reports
each kernel's shared memory per program, registers and stack (spills) for each target, and fails when a kernel
does not compile there or needs more shared memory than one block may have on it (an A10 or L4 allows 99 KB, an
A100 163 KB, an H100 227 KB): a launch setting tuned on an H100 must not break the bf16 engine on an A10.

The bf16 and fp16 engines' kernels (decode attention with ``DECODE_LAUNCH``, the prompt-pass rotary and MLP-input
kernels, the KV page write) are compiled for every target; the FP8 engine's (e4m3 loads and stores) for compute
capability 8.9 and newer only, where the backend allows FP8. torch.compile's kernels (the decode step's elementwise
functions) are generated on the GPU at run time and are not covered.

Usage: ``python -m scripts.check_gptj_kernel_targets [--capabilities=80,86,89,90,100,120]`` (exit 1 on a failure).
Run it without ``TRITON_INTERPRET`` set: interpreted kernels cannot be compiled.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Shared memory one block may use (opt-in), bytes, by compute capability (CUDA programming guide's table)
SHARED_MEMORY_PER_BLOCK = {80: 166_912, 86: 101_376, 87: 166_912, 89: 101_376, 90: 232_448, 100: 232_448,
                           120: 101_376}
FP8_FROM = 89  # the backend's FP8_CAPABILITY (code/gptj/memory_plan.py)


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Any  # a triton JITFunction
    signature: dict[str, str]  # non-constexpr arguments not named here are i32 (strides, lengths)
    constexprs: dict[str, Any]
    options: dict[str, int]
    fp8: bool = False  # needs e4m3 (compute capability 8.9+)


def _decode(pointer: str, kv: str, f16: bool) -> tuple[dict[str, str], dict[str, Any], dict[str, int]]:
    from code.gptj.inflight.attention import BEAM_TILE, DECODE_LAUNCH

    launch = dict(DECODE_LAUNCH)
    keys = launch.pop("KEYS")
    launch.pop("SPLITS", None)
    signature = {name: kv for name in ("pk_ptr", "pv_ptr", "gk_ptr", "gv_ptr")}
    signature.update(q_ptr=pointer, out_ptr=pointer, table_ptr="*i32", length_ptr="*i32", ancestry_ptr="*i32",
                     count_ptr="*i64", scale_log2="fp32", v_scale="fp32")
    # GPT-J 6B: 4 beams, heads of 256 (two halves of 128), pages of 64
    constexprs = dict(BEAMS=4, BEAM_TILE=BEAM_TILE, HALF=128, PAGE=64, F16=f16, KEYS=keys, COLUMNS=keys // 4)
    return signature, constexprs, launch


def kernels() -> list[Kernel]:
    from code.gptj.inflight import attention, prefill_kernels
    from code.llm import kv_cache

    found = []
    for dtype in ("bf16", "fp16"):
        pointer = f"*{dtype}"
        found.append(Kernel(f"decode attention, {dtype} cache", attention._decode_kernel,
                            *_decode(pointer, pointer, False)))
        found.append(Kernel(f"prompt rotary, {dtype}", prefill_kernels._rotary_qkv_kernel,
                            {"fused_ptr": pointer, "rope_ptr": pointer, "out_ptr": pointer},
                            dict(HEADS=16, HEAD_DIM=256, ROTARY=64, ROWS=prefill_kernels._ROWS), {"num_warps": 4}))
        found.append(Kernel(f"prompt MLP input, {dtype}", prefill_kernels._mlp_in_kernel,
                            {"fused_ptr": pointer, "att_ptr": pointer, "out_ptr": pointer, "scale_ptr": pointer},
                            dict(WIDTH=4096, HIDDEN=16384, FP8=False, ROWS=prefill_kernels._ROWS,
                                 COLUMNS=prefill_kernels._COLUMNS), {"num_warps": 4}))
        found.append(Kernel(f"KV page write, {dtype}", kv_cache._write_rows_kernel,
                            {"k_ptr": pointer, "v_ptr": pointer, "rows_ptr": "*i64", "k_pool_ptr": pointer,
                             "v_pool_ptr": pointer, "k_inv_scale": "fp32", "v_inv_scale": "fp32"},
                            dict(WIDTH=4096, FP8=False, ROWS=kv_cache._ROWS, COLUMNS=kv_cache._COLUMNS),
                            {"num_warps": 4}))
    found.append(Kernel("decode attention, FP8 cache", attention._decode_kernel,
                        *_decode("*bf16", "*fp8e4nv", True), fp8=True))
    found.append(Kernel("prompt MLP input, FP8", prefill_kernels._mlp_in_kernel,
                        {"fused_ptr": "*bf16", "att_ptr": "*bf16", "out_ptr": "*fp8e4nv", "scale_ptr": "*fp32"},
                        dict(WIDTH=4096, HIDDEN=16384, FP8=True, ROWS=prefill_kernels._ROWS,
                             COLUMNS=prefill_kernels._COLUMNS), {"num_warps": 4}, fp8=True))
    return found


def compile_for(kernel: Kernel, capability: int) -> dict[str, int]:
    """Shared memory (bytes), registers and stack bytes of ``kernel`` compiled for ``capability`` (e.g. 86)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {name: "constexpr" if name in kernel.constexprs else kernel.signature.get(name, "i32")
                 for name in kernel.fn.arg_names}
    compiled = triton.compile(ASTSource(kernel.fn, signature, constexprs=kernel.constexprs),
                              target=GPUTarget("cuda", capability, 32), options=kernel.options)
    usage = {"shared": int(compiled.metadata.shared)}
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if cuobjdump.is_file():
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(compiled.asm["cubin"])
            cubin.flush()
            dump = subprocess.run([str(cuobjdump), "--dump-resource-usage", cubin.name], capture_output=True,
                                  text=True, check=False).stdout
        for key, field in (("registers", "REG"), ("stack", "STACK")):
            found = re.search(rf"{field}:(\d+)", dump)
            if found:
                usage[key] = int(found.group(1))
    return usage


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capabilities", default="80,86,89,90,100,120",
                        help="compute capabilities as major*10+minor, comma-separated")
    args = parser.parse_args(argv)
    capabilities = [int(c) for c in args.capabilities.split(",")]
    unknown = [c for c in capabilities if c not in SHARED_MEMORY_PER_BLOCK]
    if unknown:
        parser.error(f"no shared-memory limit known for {unknown}; known: {sorted(SHARED_MEMORY_PER_BLOCK)}")
    failures = 0
    for capability in capabilities:
        limit = SHARED_MEMORY_PER_BLOCK[capability]
        for kernel in kernels():
            if kernel.fp8 and capability < FP8_FROM:
                continue
            try:
                usage = compile_for(kernel, capability)
            except Exception as error:  # noqa: BLE001 - any compile failure is the finding
                failures += 1
                print(f"sm_{capability} {kernel.name}: FAILED to compile: {str(error).splitlines()[-1][:200]}")
                continue
            verdict = "ok" if usage["shared"] <= limit else "TOO MUCH SHARED MEMORY"
            failures += verdict != "ok"
            extra = "".join(f", {key} {usage[key]}" for key in ("registers", "stack") if key in usage)
            print(f"sm_{capability} {kernel.name}: shared {usage['shared'] / 1024:.1f} of {limit / 1024:.0f} KB"
                  f"{extra}: {verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
