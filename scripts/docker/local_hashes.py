"""Adds to a pip-compile lock the sha256 of the file this host's pip actually picks for each pin.

pip-compile takes hashes from pypi.org's metadata, but a host may install from a mirror or a local wheel folder
(its pip.conf: extra-index-url, find-links) holding a different file of the same version, a rebuilt wheel with
another hash. pip then refuses it in hash-checking mode ("THESE PACKAGES DO NOT MATCH THE HASHES"). Adding the
picked file's hash keeps the upstream ones, so the lock works here and on a host with plain PyPI alike.

Usage: python -m scripts.docker.local_hashes <lock> [<lock> ...] (scripts/docker/lock.sh runs it).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ \\]+)")


def pins(lock_text: str) -> dict[str, str]:
    """name -> version of every pinned entry of a lock."""
    return {m.group(1): m.group(2) for line in lock_text.splitlines() if (m := PIN.match(line))}


def normalize(name: str) -> str:
    """PEP 503 name, the way wheel and sdist file names spell it (lower case, runs of -_. as _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def add_hashes(lock_text: str, extra: dict[str, str]) -> str:
    """The lock with `--hash=sha256:<h>` added to the entry of each name in extra (name -> hash) that lacks it."""
    out: list[str] = []
    lines = lock_text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = PIN.match(line)
        if not m or normalize(m.group(1)) not in extra:
            out.append(line)
            i += 1
            continue
        entry = [line]
        i += 1
        while i < len(lines) and lines[i].startswith("    --hash="):
            entry.append(lines[i])
            i += 1
        digest = extra[normalize(m.group(1))]
        if not any(digest in e for e in entry):
            entry[-1] = entry[-1].rstrip(" \\") + " \\"
            entry.append(f"    --hash=sha256:{digest}")
        out += entry
    return "\n".join(out) + "\n"


def picked_hashes(lock_text: str) -> dict[str, str]:
    """Download each pin with the host's pip settings (no deps) and hash the file it picked."""
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "pins.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in pins(lock_text).items()))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, "-r", str(reqs)],
                       check=True)
        for path in Path(tmp).iterdir():
            if path.suffix in (".whl", ".gz", ".zip"):
                found[normalize(path.name.split("-")[0])] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def main(paths: list[str]) -> int:
    """Rewrite each lock in place."""
    for name in paths:
        path = Path(name)
        text = path.read_text()
        path.write_text(add_hashes(text, picked_hashes(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
