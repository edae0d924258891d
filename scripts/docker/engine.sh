#!/usr/bin/env bash
# .ci/run's Docker engine: `start` makes one reachable if it can within a few minutes, `stop` ends only what
# `start` started (by the PID it recorded). On the CI machines (root, Debian 12) that means installing docker.io and
# mmdebstrap from the apt mirror when missing and starting dockerd by hand (no systemd), storage driver overlay2.
# Exit status of start: 0 when an engine is reachable, 1 when none could be had (test_docker then says SKIPPED).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
state="$repo/build/docker"
pidfile="$state/dockerd.pid"
mkdir -p "$state"

start() {
  if docker info >/dev/null 2>&1; then
    echo "[engine] a Docker engine is already reachable; leaving it as it is"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "[engine] no engine, and starting dockerd needs root"
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || { echo "[engine] no dockerd and no apt-get to install it"; return 1; }
    echo "[engine] installing docker.io and mmdebstrap"
    if ! timeout 600 apt-get install -y -q docker.io mmdebstrap >"$state/apt.log" 2>&1; then
      timeout 300 apt-get update -q >>"$state/apt.log" 2>&1 || true
      timeout 600 apt-get install -y -q docker.io mmdebstrap >>"$state/apt.log" 2>&1 \
        || { echo "[engine] apt-get install failed: $state/apt.log"; return 1; }
    fi
  fi
  if docker info >/dev/null 2>&1; then
    echo "[engine] the package started an engine; leaving it as it is"
    return 0
  fi
  dockerd --storage-driver=overlay2 >"$state/dockerd.log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
      echo "[engine] started dockerd (PID $(cat "$pidfile"))"
      return 0
    fi
    sleep 1
  done
  echo "[engine] dockerd did not answer within 60 s: $state/dockerd.log"
  stop
  return 1
}

stop() {
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 30); do
    kill -0 "$pid" 2>/dev/null || { echo "[engine] stopped dockerd (PID $pid)"; return 0; }
    sleep 1
  done
  kill -9 "$pid" 2>/dev/null || true
  echo "[engine] dockerd (PID $pid) killed after 30 s"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
