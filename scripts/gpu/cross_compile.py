"""The product's Triton kernels as data, and ``triton.compile`` of that data for GPU architectures other than the one
a run is on (scripts/gpu/check_cross_compile.py; documentation/gpu_architectures.md).

Why as data: which specializations a kernel gets (pointer dtypes, constexpr flags, 16-byte divisibility of pointers
and integers, warps, stages) is only known once the product has launched it, which needs a GPU. Compiling one
specialization needs no GPU at all: ``triton.compile(ASTSource, target=GPUTarget("cuda", 80, 32))`` runs the
frontend, LLVM and the ptxas bundled with Triton on the host CPU. So a GPU run records each specialization it
compiled (``capture``) as JSON, and any machine with Triton can compile those records for any target (``compile_one``),
the same Triton on both sides.

Nothing here imports triton or torch at module level: the tests of the pure parts run without them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
import re
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The architectures the product claims (documentation/gpu_architectures.md): A100; A10 / RTX 30xx; L4, L40S,
# RTX 4090; H100, H200, GH200; B200.
TARGETS: dict[str, int] = {"sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90, "sm_100": 100}
# The most shared memory one block may opt in to, per compute capability (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability": 163 KB on 8.0, 99 KB on 8.6 and 8.9, 227 KB on 9.0 and 10.0). A kernel
# that needs more compiles but never launches: Triton raises OutOfResources when it loads it.
MAX_SHARED_BYTES: dict[int, int] = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024}
# The packages whose modules may define kernels: every module under them is imported before the kernels are
# listed, so a new kernel file (code/bert/packed/int8_gemm.py) is found without naming it anywhere.
KERNEL_PACKAGES = ("code.bert.packed", "code.gptj.inflight", "code.llm", "code.numerics")
# The launch options a compiled kernel's metadata keeps that a caller can set; the target-dependent ones
# (arch, supported_fp8_dtypes, ptx_version, ...) are left for the target's own defaults.
OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
               "launch_pdl", "debug")
FLOAT_POINTEE = re.compile(r"^\*(fp|bf)\d")
FORMAT = 1  # of the spec files; a reader refuses others


class StaleSpec(Exception):
    """A recorded specialization that no longer matches its kernel's arguments (the kernel changed since)."""


# -- finding the kernels -------------------------------------------------------------------------------------------
def import_kernel_modules(packages: Iterable[str] = KERNEL_PACKAGES) -> dict[str, str]:
    """Import every module under ``packages`` whose source mentions triton (the others hold no kernel, and some need
    packages a GPU machine may lack, e.g. code.llm.rouge's nltk); returns ``{module: error}`` for those that failed
    to import (their kernels then go unlisted, which the caller reports)."""
    failed: dict[str, str] = {}
    for package in packages:
        try:
            root = importlib.import_module(package)
        except Exception as error:  # noqa: BLE001 - reported, the other packages still count
            failed[package] = f"{type(error).__name__}: {error}"
            continue
        for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=f"{package}.",
                                          onerror=lambda name: failed.setdefault(name, "could not be walked")):
            spec = importlib.util.find_spec(info.name)
            origin = Path(spec.origin) if spec is not None and spec.origin else None
            if origin is None or origin.suffix != ".py" or "triton" not in origin.read_text(errors="replace"):
                continue
            try:
                importlib.import_module(info.name)
            except Exception as error:  # noqa: BLE001 - as above
                failed[info.name] = f"{type(error).__name__}: {error}"
    return failed


def unwrap(obj: Any) -> Any:
    """The JITFunction under an Autotuner / Heuristics (each keeps the function it wraps as ``fn``), or ``obj``."""
    from triton.runtime.jit import JITFunction, KernelInterface

    while isinstance(obj, KernelInterface) and not isinstance(obj, JITFunction):
        obj = getattr(obj, "fn", None)
    return obj


def find_kernels(prefix: str = "code.") -> dict[str, Any]:
    """``{"module.function": JITFunction}`` of every Triton function defined at module level in a loaded module
    whose name starts with ``prefix`` (autotuned ones unwrapped), helpers that only other kernels call included."""
    from triton.runtime.jit import JITFunction

    found: dict[str, Any] = {}
    for name, module in sorted(sys.modules.items()):
        if module is None or not name.startswith(prefix):
            continue
        for obj in list(vars(module).values()):
            fn = unwrap(obj)
            if isinstance(fn, JITFunction) and fn.module == name:
                found[f"{name}.{fn.fn.__qualname__}"] = fn
    return found


def helpers(kernels: dict[str, Any]) -> set[str]:
    """The kernels another kernel calls by name: inlined into their callers, never launched nor compiled alone."""
    called = set()
    for key in kernels:
        name = key.rpartition(".")[2]
        if any(re.search(rf"\b{re.escape(name)}\s*\(", other.src) for k, other in kernels.items() if k != key):
            called.add(key)
    return called


# -- specializations as data ---------------------------------------------------------------------------------------
def encode(value: Any) -> Any:
    """A constexpr value as JSON: numbers, bools, strings and None as they are, a Triton dtype as
    ``{"dtype": name}``."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        return encode(value.value)
    if isinstance(value, tl.dtype):
        return {"dtype": value.name}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a constexpr of type {type(value).__name__} has no JSON form here: {value!r}")


def decode(value: Any) -> Any:
    import triton.language as tl

    return tl.dtype(value["dtype"]) if isinstance(value, dict) else value


def spec_of(kernel: str, compiled: Any) -> dict[str, Any]:
    """One compiled kernel (a JIT cache entry) as a JSON-able record: its ASTSource's signature, constexprs and
    attributes, its launch options, and the native compilation's target, hash and shared memory."""
    src, meta = compiled.src, compiled.metadata
    options = {key: getattr(meta, key) for key in OPTION_KEYS if getattr(meta, key, None) is not None}
    return {
        "kernel": kernel,
        "signature": dict(src.signature),
        "constants": [[list(path), encode(value)] for path, value in src.constants.items()],
        "attrs": [[list(path), value] for path, value in src.attrs.items()],
        "options": options,
        "native": {"arch": meta.target.arch, "hash": compiled.hash, "shared": meta.shared},
    }


def capture(kernels: dict[str, Any]) -> list[dict[str, Any]]:
    """Every specialization the JIT compiled in this process, on any device, one record each (``spec_of``).

    Triton 3.6 keeps them per device in ``JITFunction.device_caches[device]``: a tuple whose first element maps a
    launch key to its ``CompiledKernel`` (a future of one under async compilation)."""
    specs, seen = [], set()
    for kernel, fn in sorted(kernels.items()):
        for cache in list(fn.device_caches.values()):
            for compiled in list(cache[0].values()):
                if hasattr(compiled, "result"):
                    compiled = compiled.result()
                if compiled is None or (kernel, compiled.hash) in seen:
                    continue
                seen.add((kernel, compiled.hash))
                try:
                    specs.append(spec_of(kernel, compiled))
                except TypeError as error:  # a constexpr with no JSON form: the kernel shows as not exercised
                    warnings.warn(f"{kernel}: a specialization left out: {error}", stacklevel=2)
    return specs


def source_of(spec: dict[str, Any]) -> Any:
    """The ASTSource a record describes, over the kernel as the installed code defines it now."""
    from triton.compiler import ASTSource

    module, _, name = spec["kernel"].rpartition(".")
    try:
        fn = unwrap(getattr(importlib.import_module(module), name, None))
    except ModuleNotFoundError as error:
        raise StaleSpec(f"{spec['kernel']}: {error}") from error
    if fn is None:
        raise StaleSpec(f"{spec['kernel']} is no longer defined")
    if list(spec["signature"]) != list(fn.arg_names):
        raise StaleSpec(f"{spec['kernel']} now takes ({', '.join(fn.arg_names)}), not the recorded "
                        f"({', '.join(spec['signature'])})")
    constants = {tuple(path): decode(value) for path, value in spec["constants"]}
    attrs = {tuple(path): value for path, value in spec["attrs"]}
    return ASTSource(fn, dict(spec["signature"]), constants, attrs)


# -- compiling -----------------------------------------------------------------------------------------------------
def reason(error: BaseException) -> str:
    """The line of a compile error that says what went wrong: the error under a CompilationError (whose own text
    starts with the kernel's source), ptxas's own error line, else the first line."""
    from triton.compiler.errors import CompilationError

    inner = error
    while isinstance(inner, CompilationError) and (inner.__cause__ or inner.__context__) is not None:
        inner = inner.__cause__ or inner.__context__
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    if isinstance(inner, CompilationError) and lines:
        lines = lines[-1:]  # the error's own message comes after the source excerpt
    said = next((line for line in lines if re.match(r"ptxas\b.*\b(error|fatal)\b", line, re.IGNORECASE)), None)
    return f"{type(inner).__name__}: {said or (lines[0] if lines else '')}"[:400]


def compile_one(spec: dict[str, Any], target: str) -> dict[str, Any]:
    """Compile one record for ``target`` (a key of ``TARGETS``): ``{"ok", "error", "seconds"}``, plus ``shared``
    (bytes) and ``hash`` when it compiled. A kernel needing more shared memory than the target gives a block is
    not ok: it would not launch there."""
    import triton
    from triton.backends.compiler import GPUTarget

    arch = TARGETS[target]
    started = time.perf_counter()
    try:
        kernel = triton.compile(source_of(spec), target=GPUTarget("cuda", arch, 32), options=dict(spec["options"]))
    except StaleSpec as error:
        return {"ok": False, "error": f"stale: {error}", "seconds": 0.0, "stale": True}
    except Exception as error:  # noqa: BLE001 - the failure is the result
        return {"ok": False, "error": reason(error), "seconds": round(time.perf_counter() - started, 2)}
    result: dict[str, Any] = {"ok": True, "error": None, "seconds": round(time.perf_counter() - started, 2),
                              "shared": kernel.metadata.shared, "hash": kernel.hash}
    limit = MAX_SHARED_BYTES.get(arch)
    if limit is not None and kernel.metadata.shared > limit:
        result.update(ok=False, error=f"OutOfResources: shared memory {kernel.metadata.shared} B > {limit} B, the "
                                      f"most a block may take on {target}")
    return result


def init_worker(cache_dir: str) -> None:
    """A compile worker process: its own empty Triton cache, so that every compile is a real one, no interpreter
    mode, and the kernels imported before the first task is timed."""
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ.pop("TRITON_INTERPRET", None)
    import_kernel_modules()


def ready() -> int:
    """A no-op task: submitting one per worker starts them all at once."""
    return os.getpid()


def compile_task(index: int, spec: dict[str, Any], target: str) -> tuple[int, str, dict[str, Any]]:
    """``compile_one`` for a worker process (picklable arguments and result)."""
    return index, target, compile_one(spec, target)


def ptxas_versions(targets: Iterable[str]) -> dict[str, str]:
    """Which ptxas compiles for each target (Triton takes its ptxas-blackwell for sm_100 and newer), and its
    release; or why there is none."""
    out = {}
    for target in targets:
        try:
            from triton.backends.nvidia.compiler import get_ptxas

            tool = get_ptxas(TARGETS[target])
            out[target] = f"{tool.path} (CUDA {tool.version})"
        except Exception as error:  # noqa: BLE001 - reported in the table's place
            out[target] = f"none: {type(error).__name__}: {error}"
    return out


# -- naming and showing --------------------------------------------------------------------------------------------
def row_names(specs: list[dict[str, Any]]) -> list[str]:
    """A short, unique row name per record: ``module.function[tag]`` without ``code.``, the tag being the float
    dtypes it points at, then what tells it from the same kernel's other records: constexprs that differ among
    them (a true flag by its name, other values as NAME=value) and warps/stages where they differ."""
    by_kernel: dict[str, list[int]] = defaultdict(list)
    for i, spec in enumerate(specs):
        by_kernel[spec["kernel"]].append(i)
    names = [""] * len(specs)
    for kernel, members in by_kernel.items():
        constants = [_named_constants(specs[i]) for i in members]
        varying = [k for k in dict.fromkeys(k for c in constants for k in c)
                   if len({json.dumps(c.get(k)) for c in constants}) > 1]
        launches = [(specs[i]["options"].get("num_warps"), specs[i]["options"].get("num_stages")) for i in members]
        tags = []
        for i, named, launch in zip(members, constants, launches, strict=True):
            dtypes = dict.fromkeys(t[1:] for t in specs[i]["signature"].values() if FLOAT_POINTEE.match(t))
            parts = ["+".join(dtypes) or "-"]
            for key in varying:
                value = named.get(key)
                if value is True:
                    parts.append(key)
                elif value is not False and value is not None:
                    parts.append(f"{key}={value}")
            if len(set(launches)) > 1:
                parts.append(f"w{launch[0]}s{launch[1]}")
            tags.append(" ".join(parts))
        seen: dict[str, int] = defaultdict(int)
        for i, tag in zip(members, tags, strict=True):
            seen[tag] += 1
            suffix = f" #{seen[tag]}" if tags.count(tag) > 1 else ""
            names[i] = f"{kernel.removeprefix('code.')}[{tag}{suffix}]"
    return names


def _named_constants(spec: dict[str, Any]) -> dict[str, Any]:
    args = list(spec["signature"])
    return {args[path[0]] + "".join(f"[{p}]" for p in path[1:]): value for path, value in spec["constants"]}


def short_reason(error: str) -> str:
    """A table cell's reason: a few words for the failures the kernels are known to meet, else the start of it."""
    if "fp8e4nv not supported" in error:
        return "no e4m3"
    if match := re.search(r"shared memory (\d+) B > (\d+) B", error):
        return f"smem {int(match[1]) // 1024}K>{int(match[2]) // 1024}K"
    if error.startswith("stale:"):
        return "stale record"
    if error.startswith("CompilerCrash"):
        return "compiler crashed"
    text = " ".join(error.split(": ", 1)[-1].split())
    return text[:28] + ("..." if len(text) > 28 else "")


def table(results: dict[str, dict[str, dict[str, Any]]], targets: list[str]) -> list[str]:
    """Rows of kernels, a column per target, cells ``ok`` or ``FAIL(reason)``."""
    if not results:
        return ["(no kernels)"]
    cells = {row: [("ok" if r[t]["ok"] else f"FAIL({short_reason(r[t]['error'])})") if t in r else "-"
                   for t in targets] for row, r in results.items()}
    first = max(len(row) for row in results)
    widths = [max(len(t), *(len(c[i]) for c in cells.values())) for i, t in enumerate(targets)]
    lines = [f"{'kernel':<{first}}  " + "  ".join(f"{t:<{w}}" for t, w in zip(targets, widths, strict=True))]
    for row in results:
        lines.append(f"{row:<{first}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells[row], widths, strict=True)))
    return lines


# -- spec files ----------------------------------------------------------------------------------------------------
def write_specs(path: Path, specs: list[dict[str, Any]], rows: list[str], results: dict[str, dict[str, Any]],
                source: str) -> None:
    """Records with their row names and the outcome of each target (``expected``: what a later compile of the same
    record with the same Triton should give)."""
    import triton

    entries = [{**spec, "row": row, "expected": {t: {"ok": r["ok"], "error": r["error"]}
                                                 for t, r in results.get(row, {}).items()}}
               for spec, row in zip(specs, rows, strict=True)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "triton": triton.__version__, "source": source, "specs": entries},
                               indent=1) + "\n")


def read_specs(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: spec file format {data.get('format')!r}, this reader knows {FORMAT}")
    return data


def pick_for_record(specs: list[dict[str, Any]], rows: list[str], results: dict[str, dict[str, Any]]
                    ) -> list[int]:
    """A small subset worth keeping for the CPU test: per kernel, its first record that compiled everywhere and
    its first that failed somewhere (each kind of failure once), in row order. A record not compiled (a discovery-
    only run) counts by the float dtypes it points at instead, as those decide where it compiles (e4m3 from 8.9
    on)."""
    chosen: list[int] = []
    kinds: dict[str, set[str]] = defaultdict(set)
    for i in sorted(range(len(specs)), key=lambda i: rows[i]):
        outcome = results.get(rows[i], {})
        failures = {short_reason(r["error"]) for r in outcome.values() if not r["ok"]}
        kind = "ok" if not failures else " / ".join(sorted(failures))
        if not outcome:
            kind = "not compiled: " + "+".join(sorted({t[1:] for t in specs[i]["signature"].values()
                                                        if FLOAT_POINTEE.match(t)}))
        if kind not in kinds[specs[i]["kernel"]]:
            kinds[specs[i]["kernel"]].add(kind)
            chosen.append(i)
    return chosen


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
