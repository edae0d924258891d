"""Fetch the LoadGen C++ sources (the mlcommons-loadgen sdist from PyPI) into build/harness/.

LoadGen's sources are never committed: MLPerf rules require an unmodified LoadGen of a released revision, and the
PyPI sdist of a pinned version, checked against a pinned sha256, is exactly that. The sdist carries every .cc/.h,
``generated/version_generated.cc`` and ``mlperf.conf``; ``mlperf_conf.h`` (mlperf.conf as a C string, which LoadGen
compiles in) is regenerated from ``mlperf.conf`` if it is missing or stale, the way the sdist's setup.py does it.

Idempotent: once the tree is extracted and its marker records the pinned hash, nothing is downloaded or re-hashed.
Machines without network (the GPU machines) can point ``MLPERF_LOADGEN_SDIST`` at a copy of the tarball.

Usage: ``python -m code.harness.fetch_loadgen`` prints the source directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from code.common.paths import HARNESS_BUILD_DIR

LOADGEN_VERSION = "6.0.17"
SDIST_NAME = f"mlcommons_loadgen-{LOADGEN_VERSION}.tar.gz"
# Looked up once on PyPI (simple index, 2026-11-22) and pinned: a changed file must never build silently.
SDIST_SHA256 = "a2e85d09e3cc0c606f89bfe1fbf97537c8b5b238ae0afbd923ad9c710fcf2ca8"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/a5/bf/f48063c9cada7fab76044acfa7b424a9cec2a13878c64c8c4532bca4572b/"
    + SDIST_NAME
)
# Fallback when the pinned URL moves: the PEP 691 JSON simple index lists every file of the project.
SIMPLE_INDEX_URL = "https://pypi.org/simple/mlcommons-loadgen/"
SDIST_ENV_VAR = "MLPERF_LOADGEN_SDIST"

# Files the build needs; checked after extraction so a truncated tree fails here, not deep inside CMake.
LOADGEN_SOURCES = (
    "early_stopping.cc",
    "issue_query_controller.cc",
    "loadgen.cc",
    "logging.cc",
    "test_settings_internal.cc",
    "utils.cc",
    "version.cc",
    "results.cc",
    "generated/version_generated.cc",
)
LOADGEN_HEADERS = ("loadgen.h", "query_sample.h", "query_sample_library.h", "system_under_test.h", "test_settings.h")

MARKER_NAME = ".harness-verified"


class FetchError(RuntimeError):
    """The LoadGen sdist could not be obtained or did not match the pinned hash."""


def source_dir(build_dir: Path = HARNESS_BUILD_DIR) -> Path:
    """Where the extracted LoadGen sources live."""
    return build_dir / f"mlcommons_loadgen-{LOADGEN_VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, dest: Path, accept: str | None = None) -> None:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=60) as response, dest.open("wb") as f:
        shutil.copyfileobj(response, f)


def _url_from_simple_index() -> str:
    """Ask PyPI's JSON simple index (PEP 691) for the sdist's URL, in case the pinned one stopped working."""
    request = urllib.request.Request(SIMPLE_INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    for entry in index.get("files", []):
        if entry.get("filename") == SDIST_NAME:
            return str(entry["url"])
    raise FetchError(f"{SDIST_NAME} is not listed on {SIMPLE_INDEX_URL}")


def _obtain_tarball(build_dir: Path) -> Path:
    """Return a verified tarball: a local copy (env var or cache) if it matches, else a fresh download."""
    cached = build_dir / SDIST_NAME
    local = os.environ.get(SDIST_ENV_VAR)
    if local:
        path = Path(local)
        if not path.is_file():
            raise FetchError(f"{SDIST_ENV_VAR}={local} is not a file")
        if _sha256(path) != SDIST_SHA256:
            raise FetchError(f"{SDIST_ENV_VAR}={local} does not match the pinned sha256 {SDIST_SHA256}")
        return path
    if cached.is_file() and _sha256(cached) == SDIST_SHA256:
        return cached

    build_dir.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for get_url in (lambda: SDIST_URL, _url_from_simple_index):
        with tempfile.NamedTemporaryFile(dir=build_dir, suffix=".part", delete=False) as tmp:
            tmp_path = Path(tmp.name)
        try:
            url = get_url()
            print(f"fetch_loadgen: downloading {url}", file=sys.stderr)
            _download(url, tmp_path)
            actual = _sha256(tmp_path)
            if actual != SDIST_SHA256:
                raise FetchError(f"sha256 mismatch for {url}: got {actual}, pinned {SDIST_SHA256}")
            tmp_path.replace(cached)
            return cached
        except (OSError, ValueError, KeyError, FetchError) as exc:  # network errors are OSErrors
            errors.append(str(exc))
        finally:
            tmp_path.unlink(missing_ok=True)
    raise FetchError(
        f"could not download {SDIST_NAME}: {'; '.join(errors)}. Without network, copy the file here and set "
        f"{SDIST_ENV_VAR}=/path/to/{SDIST_NAME}"
    )


def mlperf_conf_header(conf_text: str) -> str:
    """mlperf.conf as the C string that LoadGen includes (same escaping as the sdist's setup.py)."""
    escaped = conf_text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", '\\n"\n"')
    return f'const char* mlperf_conf =\n"{escaped}";\n'


def _ensure_mlperf_conf_header(src: Path) -> None:
    conf = src / "mlperf.conf"
    if not conf.is_file():
        raise FetchError(f"{conf} is missing from the sdist")
    header = src / "mlperf_conf.h"
    wanted = mlperf_conf_header(conf.read_text(encoding="utf-8"))
    if not header.is_file() or header.read_text(encoding="utf-8") != wanted:
        header.write_text(wanted, encoding="utf-8")


def _extract(tarball: Path, build_dir: Path) -> Path:
    dest = source_dir(build_dir)
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory(dir=build_dir) as tmp, tarfile.open(tarball, "r:gz") as tar:
        tar.extractall(tmp, filter="data")  # "data" refuses absolute paths, links out of the tree, devices
        extracted = Path(tmp) / dest.name
        if not extracted.is_dir():
            raise FetchError(f"{tarball} does not contain {dest.name}/")
        extracted.rename(dest)
    missing = [name for name in LOADGEN_SOURCES + LOADGEN_HEADERS if not (dest / name).is_file()]
    if missing:
        raise FetchError(f"the sdist lacks {', '.join(missing)}")
    _ensure_mlperf_conf_header(dest)
    (dest / MARKER_NAME).write_text(SDIST_SHA256 + "\n", encoding="utf-8")
    return dest


def is_fetched(build_dir: Path = HARNESS_BUILD_DIR) -> bool:
    """True when the sources are extracted from the pinned sdist (the marker is written last)."""
    marker = source_dir(build_dir) / MARKER_NAME
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == SDIST_SHA256


def fetch_loadgen(build_dir: Path = HARNESS_BUILD_DIR) -> Path:
    """Make sure the pinned LoadGen sources are extracted under build_dir; return their directory."""
    if is_fetched(build_dir):
        return source_dir(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    return _extract(_obtain_tarball(build_dir), build_dir)


def main() -> int:
    try:
        print(fetch_loadgen())
    except FetchError as exc:
        print(f"fetch_loadgen: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
