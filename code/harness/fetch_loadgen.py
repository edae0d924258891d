"""Fetch a round's LoadGen C++ sources (the mlcommons-loadgen sdist from PyPI) into build/harness/<round>/.

LoadGen's sources are never committed: MLPerf rules require an unmodified LoadGen of a released revision, and the
PyPI sdist of a pinned version, checked against a pinned sha256, is exactly that. Each round pins its release
(code/common/rounds.py), and the seeds in the extracted ``mlperf.conf`` are checked against the ones the round's
checker expects, so a wrong pin fails here rather than in the checker. The sdist carries every .cc/.h,
``generated/version_generated.cc`` and ``mlperf.conf``; ``mlperf_conf.h`` (mlperf.conf as a C string, which LoadGen
compiles in) is regenerated from ``mlperf.conf`` if it is missing or stale, the way the sdist's setup.py does it.

Idempotent: once the tree is extracted and its marker records the pinned hash, nothing is downloaded or re-hashed.
Machines without network (the GPU machines) can point ``MLPERF_LOADGEN_SDIST`` at a copy of the round's tarball.

Usage: ``python -m code.harness.fetch_loadgen [--round=v5.0]`` prints the source directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from code.common.download import DownloadError, download, file_checksum
from code.common.paths import harness_build_dir
from code.common.rounds import DEFAULT_ROUND, ROUNDS, RngSeeds, Round, RoundError, get_round

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


def source_dir(round_: Round, build_dir: Path | None = None) -> Path:
    """Where the round's extracted LoadGen sources live."""
    return (build_dir or harness_build_dir(round_.name)) / f"mlcommons_loadgen-{round_.loadgen.version}"


def _url_from_simple_index(sdist_name: str) -> str:
    """Ask PyPI's JSON simple index (PEP 691) for the sdist's URL, in case the pinned one stopped working."""
    request = urllib.request.Request(SIMPLE_INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    for entry in index.get("files", []):
        if entry.get("filename") == sdist_name:
            return str(entry["url"])
    raise FetchError(f"{sdist_name} is not listed on {SIMPLE_INDEX_URL}")


def _obtain_tarball(round_: Round, build_dir: Path) -> Path:
    """Return a verified tarball: a local copy (env var or cache) if it matches, else a fresh download."""
    release = round_.loadgen
    cached = build_dir / release.sdist_name
    local = os.environ.get(SDIST_ENV_VAR)
    if local:
        path = Path(local)
        if not path.is_file():
            raise FetchError(f"{SDIST_ENV_VAR}={local} is not a file")
        if file_checksum(path, "sha256") != release.sha256:
            raise FetchError(f"{SDIST_ENV_VAR}={local} is not the {release.sdist_name} round {round_.name} needs "
                             f"(sha256 {release.sha256}); point it at that file or unset it")
        return path
    if cached.is_file() and file_checksum(cached, "sha256") == release.sha256:
        return cached

    build_dir.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for get_url in (lambda: release.url, lambda: _url_from_simple_index(release.sdist_name)):
        try:
            url = get_url()
            print(f"fetch_loadgen: downloading {url}", file=sys.stderr)
            # The one downloader: resumable, and ``cached`` only ever holds bytes that match the pinned sha256.
            return download(url, cached, sha256=release.sha256, hint="check the pin in code/common/rounds.py")
        except (OSError, ValueError, KeyError, DownloadError) as exc:  # network errors are OSErrors
            errors.append(str(exc))
    raise FetchError(
        f"could not download {release.sdist_name}: {'; '.join(errors)}. Without network, copy the file here and "
        f"set {SDIST_ENV_VAR}=/path/to/{release.sdist_name}"
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


def mlperf_conf_seeds(conf_text: str) -> RngSeeds:
    """The ``*.*.<name>_rng_seed`` values of an mlperf.conf: what LoadGen logs as ``effective_*_rng_seed``."""
    found = {}
    for name in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
        match = re.search(rf"^\*\.\*\.{name}\s*=\s*(\d+)", conf_text, re.MULTILINE)
        if match is None:
            raise FetchError(f"mlperf.conf sets no *.*.{name}")
        found[name] = int(match.group(1))
    return RngSeeds(**found)


def _check_seeds(round_: Round, src: Path) -> None:
    seeds = mlperf_conf_seeds((src / "mlperf.conf").read_text(encoding="utf-8"))
    if seeds != round_.seeds:
        raise FetchError(f"LoadGen {round_.loadgen.version} compiles in the seeds {seeds}, but round {round_.name}'s "
                         f"checker expects {round_.seeds}: the pin in code/common/rounds.py is wrong")


def checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members, refusing what the "data" filter refuses, for a Python without extraction filters.

    Filters came with Python 3.11.4; Debian 12's python3 (3.11.2, the base of `make test_docker`'s image) lacks
    them, so the same refusals are made here: absolute paths, paths or links that leave the tree, devices.
    """
    for member in tar.getmembers():
        names = [member.name] + ([member.linkname] if member.issym() or member.islnk() else [])
        if any(name.startswith("/") or ".." in Path(name).parts for name in names) or member.isdev():
            raise FetchError(f"the sdist holds an unsafe member {member.name!r}: refusing to extract it")
    return tar.getmembers()


def _extract(round_: Round, tarball: Path, build_dir: Path) -> Path:
    dest = source_dir(round_, build_dir)
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory(dir=build_dir) as tmp, tarfile.open(tarball, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")  # "data" refuses absolute paths, links out of the tree, devices
        else:
            tar.extractall(tmp, members=checked_members(tar))
        extracted = Path(tmp) / dest.name
        if not extracted.is_dir():
            raise FetchError(f"{tarball} does not contain {dest.name}/")
        extracted.rename(dest)
    missing = [name for name in LOADGEN_SOURCES + LOADGEN_HEADERS if not (dest / name).is_file()]
    if missing:
        raise FetchError(f"the sdist lacks {', '.join(missing)}")
    _check_seeds(round_, dest)
    _ensure_mlperf_conf_header(dest)
    (dest / MARKER_NAME).write_text(round_.loadgen.sha256 + "\n", encoding="utf-8")
    return dest


def is_fetched(round_: Round, build_dir: Path | None = None) -> bool:
    """True when the round's sources are extracted from its pinned sdist (the marker is written last)."""
    marker = source_dir(round_, build_dir) / MARKER_NAME
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == round_.loadgen.sha256


def fetch_loadgen(round_: Round, build_dir: Path | None = None) -> Path:
    """Make sure the round's LoadGen sources are extracted (default: build/harness/<round>/); return their folder."""
    build_dir = build_dir or harness_build_dir(round_.name)
    if is_fetched(round_, build_dir):
        return source_dir(round_, build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    return _extract(round_, _obtain_tarball(round_, build_dir), build_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", default=DEFAULT_ROUND, help=f"one of {', '.join(ROUNDS)} (default {DEFAULT_ROUND})")
    args = parser.parse_args(argv)
    try:
        print(fetch_loadgen(get_round(args.round)))
    except (FetchError, RoundError) as exc:
        print(f"fetch_loadgen: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
