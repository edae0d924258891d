"""Fetch a round's LoadGen C++ sources into build/harness/<round>/: a PyPI sdist, or the round's tag of
mlcommons/inference that the user cloned.

LoadGen's sources are never committed: MLPerf rules require an unmodified LoadGen of a released revision. Each
round pins its LoadGen (code/common/rounds.py), and the seeds in its ``mlperf.conf`` are checked against the ones
the round's checker expects, so a wrong pin fails here rather than in the checker.

- A release (v5.0): the PyPI sdist of the pinned version, checked against its pinned sha256; ``mlperf_conf.h``
  (mlperf.conf as the C string LoadGen compiles in) is regenerated as the sdist's setup.py does it. Machines
  without network can point ``MLPERF_LOADGEN_SDIST`` at a copy of the round's tarball.
- A source tree (v4.1): ``LOADGEN_SRC`` names a clone of mlcommons/inference at the round's tag (or its
  ``loadgen/`` folder). Every file the build uses is checked against the tag's sha256 (code/harness/loadgen_sources/)
  and copied here with ``mlperf.conf``, which this LoadGen reads at run time; the tree's own
  ``version_generator.py`` describes the clone, as LoadGen's own build does (a clone with local LoadGen changes
  logs the error the checker rejects).

Idempotent: once the tree is in place and its marker records the pin, nothing is downloaded, copied or re-hashed.
The sdist is kept in build/downloads/, which ``make clean`` keeps, so the tree comes back without network.

Usage: ``python -m code.harness.fetch_loadgen --round=v6.1`` prints the source directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from code.common.download import DownloadError, download, file_checksum
from code.common.paths import DOWNLOADS_DIR, harness_build_dir
from code.common.rounds import CLONE_URL, ROUNDS, LoadgenSource, RngSeeds, Round, RoundError, get_round

# Fallback when the pinned URL moves: the PEP 691 JSON simple index lists every file of the project.
SIMPLE_INDEX_URL = "https://pypi.org/simple/mlcommons-loadgen/"
SDIST_ENV_VAR = "MLPERF_LOADGEN_SDIST"
SOURCE_ENV_VAR = "LOADGEN_SRC"
# Per source-built round, the sha256 of each file its build uses, as at the round's tag (paths from the clone's root).
MANIFESTS_DIR = Path(__file__).resolve().parent / "loadgen_sources"

# Files the build needs; checked after extraction so a truncated tree fails here, not deep inside CMake.
LOADGEN_FILES = ("early_stopping.cc", "issue_query_controller.cc", "loadgen.cc", "logging.cc",
                 "test_settings_internal.cc", "utils.cc", "version.cc", "results.cc", "generated/version_generated.cc",
                 "loadgen.h", "query_sample.h", "query_sample_library.h", "system_under_test.h", "test_settings.h",
                 "mlperf.conf")

MARKER_NAME = ".harness-verified"


class FetchError(RuntimeError):
    """The round's LoadGen sources could not be obtained or do not match the pin."""


def source_dir(round_: Round, build_dir: Path | None = None) -> Path:
    """Where the round's LoadGen sources live (extracted from its sdist, or copied from its tag's clone)."""
    loadgen = round_.loadgen
    name = f"loadgen-{loadgen.tag}" if isinstance(loadgen, LoadgenSource) else f"mlcommons_loadgen-{loadgen.version}"
    return (build_dir or harness_build_dir(round_.name)) / name


def _url_from_simple_index(sdist_name: str) -> str:
    """Ask PyPI's JSON simple index (PEP 691) for the sdist's URL, in case the pinned one stopped working."""
    request = urllib.request.Request(SIMPLE_INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    for entry in index.get("files", []):
        if entry.get("filename") == sdist_name:
            return str(entry["url"])
    raise FetchError(f"{sdist_name} is not listed on {SIMPLE_INDEX_URL}")


def _obtain_tarball(round_: Round, build_dir: Path, downloads: Path) -> Path:
    """A verified tarball: the one ``MLPERF_LOADGEN_SDIST`` names, the cached one, or a fresh download."""
    release = round_.loadgen
    cached = downloads / release.sdist_name
    earlier = build_dir / release.sdist_name  # where builds before the cache kept it; `make clean` deletes it there
    if earlier.is_file() and not cached.exists():
        downloads.mkdir(parents=True, exist_ok=True)
        earlier.replace(cached)
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

    downloads.mkdir(parents=True, exist_ok=True)
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


def mlperf_conf_seeds(conf_text: str) -> RngSeeds:
    """The ``*.*.<name>_rng_seed`` values of an mlperf.conf: what LoadGen logs as ``effective_*_rng_seed``."""
    found = {}
    for name in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
        match = re.search(rf"^\*\.\*\.{name}\s*=\s*(\d+)", conf_text, re.MULTILINE)
        if match is None:
            raise FetchError(f"mlperf.conf sets no *.*.{name}")
        found[name] = int(match.group(1))
    return RngSeeds(**found)


def _finish(round_: Round, src: Path) -> Path:
    """Check the tree's seeds against the round's, then write the marker that says the tree is in place."""
    seeds = mlperf_conf_seeds((src / "mlperf.conf").read_text(encoding="utf-8"))
    if seeds != round_.seeds:
        raise FetchError(f"LoadGen {round_.loadgen.version} carries the seeds {seeds}, but round {round_.name}'s "
                         f"checker expects {round_.seeds}: the pin in code/common/rounds.py is wrong")
    (src / MARKER_NAME).write_text(_pin(round_) + "\n", encoding="utf-8")
    return src


def _emptied(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    return folder


def checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members, refusing what the "data" filter refuses (absolute paths, paths or links that leave the tree,
    devices), for a Python without filters: Debian 12's 3.11.2, the base of `make test_docker`'s image."""
    for member in tar.getmembers():
        names = [member.name] + ([member.linkname] if member.issym() or member.islnk() else [])
        if any(name.startswith("/") or ".." in Path(name).parts for name in names) or member.isdev():
            raise FetchError(f"the sdist holds an unsafe member {member.name!r}: refusing to extract it")
    return tar.getmembers()


def _extract(round_: Round, tarball: Path, build_dir: Path) -> Path:
    dest = _emptied(source_dir(round_, build_dir))
    with tempfile.TemporaryDirectory(dir=build_dir) as tmp, tarfile.open(tarball, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")  # "data" refuses absolute paths, links out of the tree, devices
        else:
            tar.extractall(tmp, members=checked_members(tar))
        extracted = Path(tmp) / dest.name
        if not extracted.is_dir():
            raise FetchError(f"{tarball} does not contain {dest.name}/")
        extracted.rename(dest)
    missing = [name for name in LOADGEN_FILES if not (dest / name).is_file()]
    if missing:
        raise FetchError(f"the sdist lacks {', '.join(missing)}")
    (dest / "mlperf_conf.h").write_text(mlperf_conf_header((dest / "mlperf.conf").read_text(encoding="utf-8")),
                                        encoding="utf-8")
    return _finish(round_, dest)


def manifest(source: LoadgenSource) -> dict[str, str]:
    """The tag's sha256 of each file a source-built LoadGen uses, by its path from the clone's root."""
    lines = (MANIFESTS_DIR / source.manifest).read_text(encoding="utf-8").splitlines()
    return {path: digest for digest, path in (line.split(maxsplit=1) for line in lines if line.strip())}


def _pin(round_: Round) -> str:
    """What the marker of a fetched tree records: the sdist's sha256, or the tag and the digest of its manifest."""
    loadgen = round_.loadgen
    if isinstance(loadgen, LoadgenSource):
        listed = (MANIFESTS_DIR / loadgen.manifest).read_bytes()
        return f"{loadgen.tag} {hashlib.sha256(listed).hexdigest()}"
    return loadgen.sha256


def is_fetched(round_: Round, build_dir: Path | None = None) -> bool:
    """True when the round's sources are in place from its pin (the marker is written last)."""
    marker = source_dir(round_, build_dir) / MARKER_NAME
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == _pin(round_)


def fetch_loadgen(round_: Round, build_dir: Path | None = None, downloads: Path | None = None) -> Path:
    """Make sure the round's LoadGen sources are in place (default: build/harness/<round>/, the sdist cached in
    build/downloads/); return their folder."""
    build_dir = build_dir or harness_build_dir(round_.name)
    if is_fetched(round_, build_dir):
        return source_dir(round_, build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(round_.loadgen, LoadgenSource):
        return _copy_source(round_, round_.loadgen, _source_tree(round_, round_.loadgen), build_dir)
    return _extract(round_, _obtain_tarball(round_, build_dir, downloads or DOWNLOADS_DIR), build_dir)


def _source_tree(round_: Round, source: LoadgenSource) -> Path:
    """The clone ``LOADGEN_SRC`` names (its root, or its loadgen/ folder given instead), checked file by file
    against the tag; an error that says how to get one otherwise."""
    clone = f"git clone --branch {source.tag} {CLONE_URL} <folder>"
    given = os.environ.get(SOURCE_ENV_VAR)
    if not given:
        raise FetchError(
            f"round {round_.name} builds LoadGen from mlcommons/inference at tag {source.tag} (no LoadGen release on "
            f"PyPI runs {round_.name}'s audits as its tools need), which is not downloaded here: `{clone}`, then "
            f"set {SOURCE_ENV_VAR}=<folder> (make build ROUND={round_.name} {SOURCE_ENV_VAR}=<folder>)")
    tree = Path(given).expanduser().resolve()
    if tree.name == "loadgen" and (tree.parent / "mlperf.conf").is_file():
        tree = tree.parent
    if not (tree / "loadgen" / "loadgen.h").is_file():
        raise FetchError(f"{SOURCE_ENV_VAR}={given} is not a clone of mlcommons/inference (no loadgen/loadgen.h in "
                         f"it): `{clone}` and point {SOURCE_ENV_VAR} at <folder>")
    differ = [path for path, digest in manifest(source).items()
              if not (tree / path).is_file() or file_checksum(tree / path, "sha256") != digest]
    if differ:
        listed = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
        raise FetchError(
            f"{SOURCE_ENV_VAR}={given} is not mlcommons/inference at tag {source.tag} (commit {source.commit[:10]}): "
            f"{listed} differ from the tag's (or are missing). Check the tag out, unmodified: "
            f"`git -C {tree} checkout {source.tag}`")
    return tree


def _copy_source(round_: Round, source: LoadgenSource, tree: Path, build_dir: Path) -> Path:
    """Copy the checked files here and have the tree's own version generator describe the clone."""
    dest = _emptied(source_dir(round_, build_dir))
    (dest / "generated").mkdir(parents=True)
    for path in manifest(source):
        shutil.copy2(tree / path, dest / Path(path).name)
    loadgen = tree / "loadgen"
    # LoadGen's version generator, run as its own build runs it: from the loadgen folder, so that its `git status
    # .` covers LoadGen's files; it writes only the file it is given.
    generate = ("import sys; sys.path.insert(0, sys.argv[2]); from version_generator import "
                "generate_loadgen_version_definitions as generate; generate(sys.argv[1], sys.argv[2])")
    done = subprocess.run([sys.executable, "-c", generate, str(dest / "generated" / "version_generated.cc"),
                           str(loadgen)], cwd=loadgen, capture_output=True, text=True)
    if done.returncode != 0:
        raise FetchError(f"{loadgen / 'version_generator.py'} failed (exit {done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-500:]}")
    return _finish(round_, dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", required=True, help=f"one of {', '.join(ROUNDS)}")
    args = parser.parse_args(argv)
    try:
        print(fetch_loadgen(get_round(args.round)))
    except (FetchError, RoundError) as exc:
        print(f"fetch_loadgen: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
