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

import pytest

from code.common.paths import REPO_ROOT
from scripts import setup_torch

LOCKS = ("requirements.lock", "requirements-dev.lock", "requirements-assets.lock")
SETUP_MK = REPO_ROOT / "make" / "setup.mk"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
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


def test_setup_installs_torch_with_the_pytorch_index_then_the_locks(tmp_path):
    """`make setup`'s steps, dry-run: the Python check with the system Python, torch's step with PyTorch's index,
    then the locks in hash-checking mode."""
    build = tmp_path / "build"
    done = subprocess.run(["make", "-n", "--no-print-directory", "setup", f"BUILD_DIR={build}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = done.stdout.replace("\\\n", " ").splitlines()
    assert any("python3 -m scripts.setup_torch check)" in line for line in commands)
    torch_step = next(i for i, line in enumerate(commands) if "-m scripts.setup_torch install" in line)
    assert commands[torch_step].endswith(f"install requirements.lock {build}/venv/torch.lock "
                                         "https://download.pytorch.org/whl/cpu")
    locks = next(i for i, line in enumerate(commands) if "-r " + str(REPO_ROOT / "requirements.lock") in line)
    assert torch_step < locks and "--require-hashes" in commands[locks]


def test_on_the_locks_python_torch_installs_hash_checked_from_its_whole_entry(tmp_path):
    lock = (REPO_ROOT / "requirements.lock").read_text(encoding="utf-8")
    assert setup_torch.lock_python(lock) == "3.11"
    step = setup_torch.torch_step(lock, "3.11", TORCH_INDEX)
    extracted = lock_pins("torch.lock", step.requirements)
    locked = [pin for pin in _all_pins() if pin.name == "torch"]
    assert [(p.name, p.version, p.hashes) for p in extracted] == [(p.name, p.version, p.hashes) for p in locked]
    command = step.pip_command("python", tmp_path / "torch.lock", TORCH_INDEX)
    assert step.hash_checked and "--require-hashes" in command and "--no-deps" in command
    assert command[command.index("--extra-index-url") + 1] == TORCH_INDEX
    assert step.note == "[setup] torch==2.13.0+cpu: hash-checked from requirements.lock"


@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_on_another_python_torch_is_pinned_by_version_and_the_line_says_it_is_not_hash_checked(tmp_path, python):
    lock = (REPO_ROOT / "requirements.lock").read_text(encoding="utf-8")
    assert setup_torch.refusal(python) is None
    step = setup_torch.torch_step(lock, python, TORCH_INDEX)
    assert step.requirements == "torch==2.13.0+cpu\n" and not step.hash_checked
    command = step.pip_command("python", tmp_path / "torch.lock", TORCH_INDEX)
    assert "--require-hashes" not in command and command[command.index("--extra-index-url") + 1] == TORCH_INDEX
    assert step.note == (f"[setup] torch==2.13.0+cpu for Python {python}: pinned by version from {TORCH_INDEX}, NOT "
                         "hash-checked: requirements.lock holds the hash of the Python 3.11 wheel only (the other "
                         "packages are hash-checked)")


@pytest.mark.parametrize("python,why", [
    ("3.10", "numpy 2.4.6, transformers 5.23.0 and matplotlib 3.11.2 of the locks need Python 3.11 or newer"),
    ("3.14", "the locks are not resolved or tested for it")])
def test_setup_refuses_a_python_the_locks_cannot_install_on_with_the_fix(python, why):
    assert setup_torch.refusal(python) == (
        f"ERROR: make setup installs the locks on Python 3.11, 3.12, 3.13, and this is Python {python}: {why}; "
        "install one of them, then run make setup SYSTEM_PY=python3.11 (or another)")


def test_the_lock_pins_versions_that_need_python_3_11_and_no_package_only_3_10_needs():
    # What the refusal of 3.10 rests on: these pins have no release for Python 3.10, and pytest's 3.10-only
    # dependencies (exceptiongroup, tomli) are not in the locks.
    pins = {pin.name: pin.version for pin in _all_pins()}
    assert (pins["numpy"], pins["transformers"], pins["matplotlib"]) == ("2.4.6", "5.23.0", "3.11.2")
    assert "exceptiongroup" not in pins and "tomli" not in pins


def test_the_setup_step_refuses_or_installs_by_the_running_python(tmp_path, monkeypatch, capsys):
    lock, torch_lock = str(REPO_ROOT / "requirements.lock"), tmp_path / "torch.lock"
    monkeypatch.setattr(setup_torch, "running_python", lambda: "3.10")
    assert setup_torch.main(["check"]) == 1
    assert capsys.readouterr().err.startswith("ERROR: make setup installs the locks on Python 3.11, 3.12, 3.13")
    ran = []
    monkeypatch.setattr(setup_torch.subprocess, "run", lambda command: ran.append(command) or
                        subprocess.CompletedProcess(command, 0))
    for python, hashed in (("3.11", True), ("3.12", False)):
        monkeypatch.setattr(setup_torch, "running_python", lambda python=python: python)
        assert setup_torch.main(["check"]) == 0
        assert setup_torch.main(["install", lock, str(torch_lock), TORCH_INDEX]) == 0
        assert ("--hash=sha256:" in torch_lock.read_text()) is hashed
        assert ("--require-hashes" in ran[-1]) is hashed and ran[-1][ran[-1].index("-r") + 1] == str(torch_lock)
        assert ("NOT hash-checked" in capsys.readouterr().out) is not hashed


# The cluster lock's packages whose wheels are built per Python (cpXY tags): each needs one hash per Python that
# make setup installs on, or `make setup_cluster` fails its hash check there.
PER_PYTHON_CLUSTER_PINS = ("charset-normalizer", "msgpack", "ray", "rpds-py")


def test_the_cluster_lock_hashes_a_wheel_of_every_supported_python_for_compiled_packages() -> None:
    pins = {}
    for line in (REPO_ROOT / "requirements-cluster.lock").read_text().splitlines():
        if (match := PIN.match(line)) is not None:
            pins[match.group(1)] = set(HASH.findall(line))
    assert all(pins.values()), "every cluster pin carries its hash"
    for name in PER_PYTHON_CLUSTER_PINS:
        assert len(pins[name]) == len(setup_torch.SUPPORTED), (name, len(pins[name]), setup_torch.SUPPORTED)


def test_the_kernel_tests_lock_hashes_a_triton_wheel_of_every_supported_python() -> None:
    """`make setup_kernel_tests` installs Triton (a cpXY wheel per Python) with --require-hashes on any Python that
    make setup installs on."""
    pins = {match.group(1): set(HASH.findall(line))
            for line in (REPO_ROOT / "requirements-kernels.lock").read_text().splitlines()
            if (match := PIN.match(line)) is not None}
    assert set(pins) == {"triton"} and len(pins["triton"]) == len(setup_torch.SUPPORTED)
