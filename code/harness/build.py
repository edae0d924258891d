"""Build the C++ harness core of one round: its LoadGen (static, PIC) + the pybind11 module ``_mlperf_harness``.

``python -m code.harness.build --round=v6.1 [--jobs N] [--clean]`` (``make build`` without ``ROUND`` builds the
rounds of a run's tests: code/actions/build_cores.py). Each round has its own LoadGen sources and
CMake folder under build/harness/<round>/ and its module in build/lib/<round>/, so building one round never
rebuilds another. CMake is configured once (Release; Ninja when installed, else Make) and reconfigured from
scratch only when the generator, the Python interpreter, pybind11 or the LoadGen tree change; otherwise the build
tool's own up-to-date check makes a no-op build take about a second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from code.common.file_lock import LockPathError, holding
from code.common.paths import BUILD_DIR, harness_build_dir, harness_lib_dir
from code.common.rounds import ROUNDS, Round, RoundError, get_round
from code.harness.fetch_loadgen import FetchError, fetch_loadgen

SOURCE_DIR = Path(__file__).resolve().parent
MODULE_NAME = "_mlperf_harness"
_CONFIGURE_KEY_FILE = "harness-configure.json"
BUILD_LOCK = ".build.lock"
# Compilers that linked a static C++ runtime -> the compiler that replaced them (per round's build folder).
COMPILER_REPLACEMENTS_FILE = "compiler-replacements.json"


class BuildError(RuntimeError):
    """A tool is missing or a build step failed."""


def module_path(lib_dir: Path) -> Path:
    """Where the built extension lands (its suffix names this interpreter's ABI)."""
    return lib_dir / (MODULE_NAME + sysconfig.get_config_var("EXT_SUFFIX"))


def runtime_mlperf_conf(round_: Round, lib_dir: Path | None = None) -> Path | None:
    """The mlperf.conf the core passes to LoadGen before user.conf, kept beside the module, for a LoadGen that does
    not compile it in (v4.1); None for one that does (a second configuration file would invalidate its runs)."""
    if not round_.loadgen.conf_at_run_time:
        return None
    return (lib_dir or harness_lib_dir(round_.name)) / "mlperf.conf"


# The system compiler comes first: it links the system's shared libstdc++, the one PyTorch loads too. A private
# toolchain earlier on PATH (the GPU machines have one in /opt/gcc) may link libstdc++ statically, which puts two
# copies of the C++ runtime in one process and crashed LoadGen's logging thread as soon as torch was loaded.
SYSTEM_COMPILERS = ("/usr/bin/c++", "/usr/bin/g++")


def _find_compiler() -> str:
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else [*SYSTEM_COMPILERS, "c++", "g++", "clang++"]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    raise BuildError(
        f"no C++17 compiler found (looked for {', '.join(candidates)}): install one, e.g. `apt-get install g++`, "
        "or set CXX"
    )


def _pybind11_cmake_dir() -> str:
    try:
        import pybind11
    except ImportError as exc:
        raise BuildError(f"pybind11 is not installed for {sys.executable}: `pip install pybind11`") from exc
    return str(pybind11.get_cmake_dir())


def _run(command: list[str], what: str) -> None:
    try:
        subprocess.run(command, check=True)
    except subprocess.CalledProcessError as exc:
        raise BuildError(f"{what} failed (exit {exc.returncode}): {' '.join(command)}") from exc


def build(round_name: str, jobs: int = 2, clean: bool = False) -> Path:
    """Fetch the round's LoadGen if needed, configure if needed, build; return the path of the built module.

    A compiler that links libstdc++ statically (CXX may name one) is replaced by the system compiler.
    """
    round_ = get_round(round_name)
    compiler = _find_compiler()
    with _build_lock(round_.name):
        return _build_or_rebuild(round_, compiler, jobs, clean)


@contextmanager
def _build_lock(round_name: str) -> Iterator[None]:
    """Hold the round's build folder alone while it builds: two ``make build`` or test sessions of one checkout
    at once would otherwise compile into the same CMake folder and link the same module, and a run could load a
    half-written one. The other waits for this build to end, then finds it up to date."""
    folder = harness_build_dir(round_name)
    with ExitStack() as stack:
        try:
            stack.enter_context(holding(folder / BUILD_LOCK))  # released when this process ends, however it ends
        except LockPathError as error:
            raise BuildError(str(error)) from None
        except OSError as error:  # a read-only or foreign build/: the build could write nothing there either
            raise BuildError(f"cannot write {folder} ({error.strerror or error}): make build compiles the C++ core "
                             f"there; make {BUILD_DIR} writable (or set MLPERF_BUILD_DIR to a writable folder), "
                             "then run again") from None
        yield


def _build_or_rebuild(round_: Round, compiler: str, jobs: int, clean: bool) -> Path:
    replacements = _replacements(round_.name)
    replacement = replacements.get(os.path.realpath(compiler))
    if isinstance(replacement, str) and shutil.which(replacement) and not clean:
        # This compiler was found to link a static C++ runtime before: build with what replaced it, so the build
        # stays up to date instead of being configured and compiled twice on every `make run`.
        return _build_with(round_, replacement, jobs, clean)
    built = _build_with(round_, compiler, jobs, clean)
    if _has_shared_cxx_runtime(built):
        return built
    others = [c for c in SYSTEM_COMPILERS if shutil.which(c) and os.path.realpath(c) != os.path.realpath(compiler)]
    fallback = others[0] if others else None
    if fallback is None:
        raise BuildError(
            f"{built.name} was linked with a static C++ runtime by {compiler}; that crashes beside PyTorch. "
            "Build with a compiler that links libstdc++ dynamically: CXX=/usr/bin/g++ make build"
        )
    print(f"note: {compiler} links a static C++ runtime, which crashes beside PyTorch; rebuilding with {fallback} "
          "(and using it for this round's later builds)")
    built = _build_with(round_, fallback, jobs, True)
    if not _has_shared_cxx_runtime(built):
        raise BuildError(f"{built.name} still has a static C++ runtime after rebuilding with {fallback}")
    (harness_build_dir(round_.name) / COMPILER_REPLACEMENTS_FILE).write_text(
        json.dumps({**replacements, os.path.realpath(compiler): fallback}, indent=1), encoding="utf-8")
    return built


def _replacements(round_name: str) -> dict:
    """The round's record of compilers that linked a static C++ runtime and the compiler that replaced each."""
    try:
        known = json.loads((harness_build_dir(round_name) / COMPILER_REPLACEMENTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _build_with(round_: Round, compiler: str, jobs: int, clean: bool) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake not found: install it (`apt-get install cmake` or `pip install cmake`)")
    lib_dir = harness_lib_dir(round_.name)
    build_dir = harness_build_dir(round_.name) / "cmake-build"
    try:
        loadgen_dir = fetch_loadgen(round_)
    except FetchError as exc:
        raise BuildError(f"cannot get the LoadGen sources: {exc}") from exc

    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    # What the configured folder depends on: a change in any of them configures it again from scratch.
    key = {"generator": generator, "compiler": compiler, "python": sys.executable,
           "pybind11_dir": _pybind11_cmake_dir(), "loadgen_dir": str(loadgen_dir), "lib_dir": str(lib_dir),
           "source_dir": str(SOURCE_DIR)}
    key_file = build_dir / _CONFIGURE_KEY_FILE
    if clean or not (build_dir / "CMakeCache.txt").is_file() or not key_file.is_file() \
            or json.loads(key_file.read_text(encoding="utf-8")) != key:
        if build_dir.exists():
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True)
        lib_dir.mkdir(parents=True, exist_ok=True)
        _run([cmake, "-S", str(SOURCE_DIR), "-B", str(build_dir), "-G", generator, "-DCMAKE_BUILD_TYPE=Release",
              f"-DCMAKE_CXX_COMPILER={compiler}", f"-DPython_EXECUTABLE={sys.executable}",
              f"-Dpybind11_DIR={key['pybind11_dir']}", f"-DLOADGEN_SOURCE_DIR={loadgen_dir}",
              f"-DHARNESS_LIB_DIR={lib_dir}"], "CMake configure")
        key_file.write_text(json.dumps(key, indent=1), encoding="utf-8")
    _run([cmake, "--build", str(build_dir), "--parallel", str(jobs)], "CMake build")

    built = module_path(lib_dir)
    if not built.is_file():
        raise BuildError(f"the build finished but {built} is missing")
    conf = runtime_mlperf_conf(round_, lib_dir)
    if conf is not None:
        shutil.copy2(loadgen_dir / "mlperf.conf", conf)
    return built


def _has_shared_cxx_runtime(module: Path) -> bool:
    """False for a module with a private (static) libstdc++: it crashes once PyTorch's shared one is loaded too."""
    readelf = shutil.which("readelf")
    if readelf is None or not sys.platform.startswith("linux"):
        return True  # nothing to check with; the build itself succeeded
    dynamic = subprocess.run([readelf, "-d", str(module)], capture_output=True, text=True).stdout
    return "libstdc++" in dynamic or "libc++" in dynamic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", required=True, help=f"one of {', '.join(ROUNDS)}")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="parallel compile jobs (default 2)")
    parser.add_argument("--clean", action="store_true", help="configure and build from scratch")
    args = parser.parse_args(argv)
    try:
        print(f"built {build(args.round, jobs=args.jobs, clean=args.clean)}")
    except (BuildError, RoundError) as exc:
        print(f"code.harness.build: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return interrupted("code.harness.build", args.round)
    return 0


def interrupted(program: str, which: str) -> int:
    """Ctrl-C during `make build` (or `make run`'s build step): one line naming the unfinished round(s), no
    traceback; returns SIGINT's exit status."""
    print(f"{program}: interrupted by SIGINT; the build of round {which} is unfinished: `make build` resumes it",
          file=sys.stderr)
    return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
