#!/usr/bin/env bash
# Makes a Debian 12 (bookworm) base image locally: mmdebstrap from the host's apt mirror, then `docker import`.
# No registry image can be pulled on the development machines, so `make test_docker` builds FROM this base.
# The rootfs tarball is cached under build/docker/ and reused; the image is imported again only when it is missing.
#
# Usage: scripts/docker/make_base.sh <image-tag> <cache-dir>
set -euo pipefail

tag=${1:?usage: make_base.sh <image-tag> <cache-dir>}
cache=${2:?usage: make_base.sh <image-tag> <cache-dir>}
suite=bookworm
# The base carries what the Dockerfile would otherwise fetch with apt (Python, a compiler, CMake): the
# Dockerfile then finds them installed and skips apt, which keeps the image build off the network for them.
packages=ca-certificates,python3,python3-venv,python3-dev,g++,make,cmake,ninja-build,git
tarball="$cache/debian-$suite-base.tar"

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "[make_base] $tag exists"
  exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "ERROR: mmdebstrap is not installed: apt-get install mmdebstrap (or give BASE_IMAGE=<an image you have>)" >&2
  exit 2
fi
mkdir -p "$cache"
if [ ! -f "$tarball" ]; then
  # No mirror is named: mmdebstrap then takes deb.debian.org (with -updates and -security), as the host's apt does.
  start=$(date +%s)
  echo "[make_base] mmdebstrap $suite -> $tarball (a few minutes, once)"
  # --format=tar: mmdebstrap picks the format from the name, and "*.part" would give a directory.
  part=$(mktemp "$tarball.XXXXXX.part")  # a name of its own, so two runs at once never write one file
  trap 'rm -f "$part"' EXIT
  # shellcheck disable=SC2016 # the hook's $1 (the rootfs) is expanded by mmdebstrap, not by this shell
  mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$suite" "$part"
  chmod 644 "$part"  # mktemp made it private; the rootfs has nothing secret
  mv "$part" "$tarball"
  echo "[make_base] rootfs made in $(( $(date +%s) - start )) s ($(du -h "$tarball" | cut -f1 | tail -1))"
fi
docker import --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
echo "[make_base] imported $tag"
