#!/usr/bin/env bash
# make test_docker: the Docker path end to end on a machine with a container engine.
#   1. a Debian 12 base made locally (scripts/docker/make_base.sh, cached under build/docker/);
#   2. the harness image FROM it (make build_docker), and the user image (docker_add_user);
#   3. in a container, as a non-root user over a bind mount of a copy of this working tree: `make build` and the
#      README's first run;
#   4. nothing in the copy's build/ may be owned by root afterwards.
# The copy (build/docker/e2e/repo) keeps the run away from this checkout's own build/ and lets a root caller hand
# it to an unprivileged uid (TEST_DOCKER_UID, default 4242): the check means nothing when the caller is root.
# Where no engine is reachable it says so and exits 0 with SKIPPED in its last line.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=${SYSTEM_PY:-python3}
base=${LOCAL_BASE:-mlperf-base:bookworm}
image=${TEST_DOCKER_IMAGE:-mlperf-harness:test}
run_cmd='make build && make run RUN_ARGS="--benchmarks=bert --scenarios=offline --test_run"'
start=$(date +%s)

skip() {
  echo "[test_docker] $1"
  echo "SKIPPED: test_docker: $1"
  exit 0
}
command -v docker >/dev/null 2>&1 || skip "no docker command here (apt-get install docker.io)"
docker info >/dev/null 2>&1 || skip "no Docker engine is reachable (start one: sudo dockerd &, or systemctl start docker)"

"$repo/scripts/docker/make_base.sh" "$base" "$repo/build/docker"

uid=$(id -u)
gid=$(id -g)
if [ "$uid" = 0 ]; then
  uid=${TEST_DOCKER_UID:-4242}
  gid=${TEST_DOCKER_GID:-4242}
fi
work="$repo/build/docker/e2e"
rm -rf "$work"
mkdir -p "$work/repo" "$work/scratch"
# Tracked and untracked-but-not-ignored files, as a fresh clone with local edits would have them.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf -) | tar -C "$work/repo" -xf -
if [ "$(id -u)" = 0 ]; then
  chown -R "$uid:$gid" "$work"
fi

build_start=$(date +%s)
make -C "$repo" --no-print-directory build_docker DOCKER_IMAGE="$image" BASE_IMAGE="$base"
build_s=$(( $(date +%s) - build_start ))
cd "$repo"
"$py" -m scripts.docker.launch --image="$image" add_user --uid="$uid" --gid="$gid"

run_start=$(date +%s)
status=0
MLPERF_SCRATCH_PATH="$work/scratch" "$py" -m scripts.docker.launch --image="$image" run \
  --repo="$work/repo" --uid="$uid" --gid="$gid" --command="$run_cmd" || status=$?
run_s=$(( $(date +%s) - run_start ))

size_mb=$(( $(docker image inspect --format '{{.Size}}' "$image") / 1000000 ))
root_owned=$(find "$work/repo/build" "$work/scratch" -user 0 | head -5)
summary=$(find "$work/repo/build/logs" -name summary.txt 2>/dev/null | head -1)
echo "[test_docker] image $image FROM $base: ${size_mb} MB; build_docker ${build_s} s; make build + run ${run_s} s"
if [ "$status" != 0 ]; then
  echo "FAILED: test_docker: the run in the container exited $status (above)"
  exit 1
fi
if [ -z "$summary" ]; then
  echo "FAILED: test_docker: the run wrote no summary under build/logs"
  exit 1
fi
if [ -n "$root_owned" ]; then
  echo "FAILED: test_docker: files owned by root after the run, e.g.:"
  echo "$root_owned"
  exit 1
fi
echo "PASSED: test_docker in $(( $(date +%s) - start )) s (uid $uid:$gid, nothing in build/ owned by root; ${summary#"$work/repo/"})"
