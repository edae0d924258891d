"""The locks install on a fresh machine that has only the public indexes (PyPI and the PyTorch index that
make/setup.mk names), offline: no wheel is downloaded and no index is asked.

PyPI refuses versions with a local label (``torch==2.13.0+cpu``), so a lock pin with one comes from another index.
Each such pin must be recorded below with the public index that serves it and the sha256 that index lists for the
file, that index must be one make/setup.mk hands to pip, and the pin's hashes must include that digest: a wheel that
only a host's own wheel folder serves (a rebuild with another hash, or a version no public index has) fails here.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from code.common.paths import REPO_ROOT

LOCKS = ("requirements.lock", "requirements-dev.lock", "requirements-assets.lock")
SETUP_MK = REPO_ROOT / "make" / "setup.mk"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
# An index address assigned in make/setup.mk (`TORCH_INDEX ?= https://...`).
INDEX_VARIABLE = re.compile(r"^([A-Z_]+_INDEX)\s*\??:?=\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class PublicFile:
    """A file of a local-version pin as a public index lists it."""

    index: str
    filename: str
    sha256: str


# Local-version pins and where a user gets them: the digest is the one the index lists for the file (PyTorch's CPU
# index, https://download.pytorch.org/whl/cpu/torch/, for torch 2.13.0+cpu on CPython 3.11, Linux x86_64). A new
# local-version pin gets its row here once its file is seen on a public index.
PUBLIC_LOCAL_FILES: dict[tuple[str, str], tuple[PublicFile, ...]] = {
    ("torch", "2.13.0+cpu"): (
        PublicFile("https://download.pytorch.org/whl/cpu", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                   "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"),
    ),
}


@dataclass(frozen=True)
class Pin:
    """One entry of a lock: the pinned name and version and the sha256 of each file it accepts."""

    lock: str
    name: str
    version: str
    hashes: frozenset[str]


def lock_pins(lock: str, text: str) -> list[Pin]:
    """Every pin of a lock's text, with the hashes on its line and on the continuation lines under it."""
    pins: list[Pin] = []
    entry: list[str] = []

    def close() -> None:
        if entry:
            name, version = PIN.match(entry[0]).groups()
            pins.append(Pin(lock, name.lower(), version, frozenset(HASH.findall(" ".join(entry)))))
            entry.clear()

    for line in text.splitlines():
        if PIN.match(line):
            close()
            entry.append(line)
        elif entry and line.startswith("    --hash="):
            entry.append(line)
        else:
            close()
    close()
    return pins


def setup_indexes(setup_mk: str) -> set[str]:
    """The index addresses make/setup.mk hands to pip."""
    return {address.rstrip("/") for _, address in INDEX_VARIABLE.findall(setup_mk)}


def local_only_problems(pins: list[Pin], indexes: set[str],
                        public: dict[tuple[str, str], tuple[PublicFile, ...]]) -> list[str]:
    """Why each local-version pin may be served by no public index that `make setup` asks; empty when none."""
    problems = []
    for pin in pins:
        if "+" not in pin.version:
            continue
        where = f"{pin.lock}: {pin.name}=={pin.version}"
        files = public.get((pin.name, pin.version))
        if not files:
            problems.append(f"{where} has a local version that PyPI does not serve and no public index is recorded "
                            "for it: pin a version a public index serves, or record its index and file here")
            continue
        unnamed = sorted({f.index for f in files} - indexes)
        if unnamed:
            problems.append(f"{where} comes from {', '.join(unnamed)}, which make/setup.mk does not give pip")
        if not pin.hashes & {f.sha256 for f in files}:
            problems.append(f"{where} accepts none of the files its public index lists "
                            f"({', '.join(f.filename for f in files)}): only a host's own copy would install")
    return problems


def _all_pins() -> list[Pin]:
    return [pin for lock in LOCKS for pin in lock_pins(lock, (REPO_ROOT / lock).read_text(encoding="utf-8"))]


def test_every_local_version_pin_of_the_locks_is_served_by_a_public_index_setup_names():
    pins = _all_pins()
    assert {pin.name for pin in pins} >= {"torch", "numpy", "pytest"}, "the locks were not parsed"
    assert any("+" in pin.version for pin in pins), "no local-version pin: drop this file's torch row and the index"
    assert local_only_problems(pins, setup_indexes(SETUP_MK.read_text(encoding="utf-8")), PUBLIC_LOCAL_FILES) == []


def test_a_local_version_no_public_index_serves_is_refused_with_the_fix():
    lock = ("numpy==2.4.6 \\\n    --hash=sha256:" + "a" * 64 + "\n"
            "mylib==1.0+local \\\n    --hash=sha256:" + "b" * 64 + "\n    # via -r requirements.txt\n"
            "torch==2.13.0+cpu \\\n    --hash=sha256:" + "c" * 64 + "\n")
    problems = local_only_problems(lock_pins("requirements.lock", lock), {"https://download.pytorch.org/whl/cpu"},
                                   PUBLIC_LOCAL_FILES)
    assert problems == [
        "requirements.lock: mylib==1.0+local has a local version that PyPI does not serve and no public index is "
        "recorded for it: pin a version a public index serves, or record its index and file here",
        "requirements.lock: torch==2.13.0+cpu accepts none of the files its public index lists "
        "(torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl): only a host's own copy would install",
    ]


def test_a_public_index_that_setup_does_not_name_is_refused():
    torch = PUBLIC_LOCAL_FILES[("torch", "2.13.0+cpu")][0]
    pins = [Pin("requirements.lock", "torch", "2.13.0+cpu", frozenset({torch.sha256}))]
    assert local_only_problems(pins, set(), PUBLIC_LOCAL_FILES) == [
        "requirements.lock: torch==2.13.0+cpu comes from https://download.pytorch.org/whl/cpu, which make/setup.mk "
        "does not give pip"]


def test_single_line_entries_of_the_assets_lock_are_read_with_their_hash():
    pins = lock_pins("requirements-assets.lock", "# header\nsome-data==1.2 --hash=sha256:" + "d" * 64 + "\n")
    assert pins == [Pin("requirements-assets.lock", "some-data", "1.2", frozenset({"d" * 64}))]


def test_setup_installs_the_locked_torch_entry_with_the_pytorch_index(tmp_path):
    """`make setup`'s torch step, dry-run: it hands pip PyTorch's index and a file holding the lock's whole torch
    entry (the pin and every hash), in hash-checking mode; running its extraction line gives exactly that entry."""
    build = tmp_path / "build"
    done = subprocess.run(["make", "-n", "--no-print-directory", "setup", f"BUILD_DIR={build}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = done.stdout.replace("\\\n", " ").splitlines()
    torch_lock = build / "venv" / "torch.lock"
    install = next(line for line in commands if f"-r {torch_lock}" in line)
    assert "--require-hashes" in install and "--extra-index-url https://download.pytorch.org/whl/cpu" in install
    extract = next(line for line in commands if line.startswith("awk") and str(torch_lock) in line)
    torch_lock.parent.mkdir(parents=True)
    subprocess.run(["bash", "-c", extract], check=True, timeout=60)
    extracted = lock_pins("torch.lock", torch_lock.read_text(encoding="utf-8"))
    locked = [pin for pin in _all_pins() if pin.name == "torch"]
    assert [(p.name, p.version, p.hashes) for p in extracted] == [(p.name, p.version, p.hashes) for p in locked]


def test_setup_refuses_a_python_the_locks_are_not_for_before_installing(tmp_path):
    build = tmp_path / "build"
    done = subprocess.run(["make", "--no-print-directory", "setup", f"BUILD_DIR={build}", "LOCK_PYTHON=3.99"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert re.search(r"ERROR: the locks are for Python 3\.99 and python3 is Python \d+\.\d+: install Python 3\.99, "
                     r"then run make setup SYSTEM_PY=python3\.99", done.stderr), done.stderr
    assert not build.exists()
