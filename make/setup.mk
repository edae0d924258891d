# The native environment (build/venv); the Docker entry point is in make/docker.mk.

# The lock files pin every transitive dependency with hashes (scripts/docker/lock.sh makes them from the
# hand-pinned requirements*.txt); the image installs the same runtime locks (docker/Dockerfile).
LOCKS      := $(addprefix $(REPO_ROOT)/,requirements.lock requirements-dev.lock requirements-assets.lock)
VENV_STAMP := $(VENV)/.installed-$(shell cat $(LOCKS) | cksum | cut -d' ' -f1)

.PHONY: setup link_dirs
ifdef IN_CONTAINER
setup:
	@echo "[setup] in the container: the image's Python is the environment"
else
setup: $(VENV_STAMP)
endif

# Re-installs only when a lock file changes (the stamp's name carries their checksum). The dev lock (pytest, ruff,
# hadolint, shellcheck, clang-format) is the native environment's only: `make test` runs here, not in the image.
$(VENV_STAMP): $(LOCKS)
	@test -x $(VENV)/bin/python || $(SYSTEM_PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes \
	  -r $(REPO_ROOT)/requirements.lock -r $(REPO_ROOT)/requirements-dev.lock
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
	  -r $(REPO_ROOT)/requirements-assets.lock
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "[setup] build/venv is ready"

link_dirs: setup
	$(PY) -m scripts.link_dirs
