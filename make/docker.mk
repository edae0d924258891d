# The Docker entry point (NVIDIA's target names; documentation/docker.md). The logic is in
# scripts/docker/launch.py (host Python, standard library only) and scripts/docker/*.sh.
#   make prebuild                                   build the image, add you to it, open a shell in it
#   make launch_docker DOCKER_COMMAND="make ..."    the same, headless: runs one command and exits with its status
# BASE_IMAGE chooses the base (default: NVIDIA's PyTorch image, for GPU machines); DOCKER_ARGS adds `docker run`
# options (mounts); NVIDIA_VISIBLE_DEVICES picks GPUs; MLPERF_SCRATCH_PATH is mounted at its own path.

DOCKER_IMAGE   ?= mlperf-harness:latest
BASE_IMAGE     ?= nvcr.io/nvidia/pytorch:25.10-py3
# The base `make docker_base` makes locally (mmdebstrap + docker import) where no registry can be reached.
LOCAL_BASE     ?= mlperf-base:bookworm
DOCKER_ARGS    ?=
DOCKER_COMMAND ?=
export DOCKER_ARGS NVIDIA_VISIBLE_DEVICES DOCKER_COMMAND MLPERF_SCRATCH_PATH

DOCKER_LAUNCH := cd $(REPO_ROOT) && $(SYSTEM_PY) -m scripts.docker.launch --image=$(DOCKER_IMAGE)

.PHONY: prebuild build_docker docker_add_user attach_docker launch_docker docker_base test_docker
prebuild: attach_docker

build_docker:
	@$(DOCKER_LAUNCH) build --base=$(BASE_IMAGE)

docker_add_user: build_docker
	@$(DOCKER_LAUNCH) add_user

attach_docker: docker_add_user
	@$(DOCKER_LAUNCH) run

launch_docker: docker_add_user
	@test -n "$$DOCKER_COMMAND" || { echo 'ERROR: give the command: make launch_docker DOCKER_COMMAND="make ..."' >&2; exit 2; }
	@$(DOCKER_LAUNCH) run --command="$$DOCKER_COMMAND"

docker_base:
	@$(REPO_ROOT)/scripts/docker/make_base.sh $(LOCAL_BASE) $(BUILD_DIR)/docker

# End to end with a real engine: the image FROM the local base, then `make build` and the README's first run in it
# as a non-root user; checks that nothing in build/ is root's. SKIPPED (exit 0) where no engine is reachable.
test_docker:
	@$(REPO_ROOT)/scripts/docker/test_docker.sh
