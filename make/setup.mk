# The native environment (build/venv); the Docker entry point is in make/docker.mk.

# The lock files pin every transitive dependency with hashes (scripts/docker/lock.sh makes them from the
# hand-pinned requirements*.txt); the image installs the same runtime locks (docker/Dockerfile).
LOCKS      := $(addprefix $(REPO_ROOT)/,requirements.lock requirements-dev.lock requirements-assets.lock)
VENV_STAMP := $(VENV)/.installed-$(shell cat $(LOCKS) | cksum | cut -d' ' -f1)
# The lock's torch is PyTorch's CPU build (torch==<version>+cpu), which PyPI does not serve: PyTorch's CPU index does.
# pip asks every index it is given for every package, so only torch's own install step names this one; the lock's
# hash decides which file is accepted, whichever index or wheel folder of the host's pip settings serves it.
# tests/common/test_lock_portable.py checks that every local-version pin of the locks is served by an index named here.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_LOCK  := $(VENV)/torch.lock
# The locks install on Python 3.11 to 3.13; torch hash-checked on the lock's own Python, else pinned by version from
# TORCH_INDEX with a line saying so (scripts/setup_torch.py); another Python is refused before anything is installed.

.PHONY: setup setup_cluster setup_kernel_tests link_dirs
ifdef IN_CONTAINER
setup:
	@echo "[setup] in the container: the image's Python is the environment"
else
setup: $(VENV_STAMP)
endif

# Re-installs only when a lock file changes (the stamp's name carries their checksum). The dev lock (pytest, ruff,
# hadolint, shellcheck, clang-format) is the native environment's only: `make test` runs here, not in the image.
# torch goes first (scripts/setup_torch.py: its lock entry, the pin and its hash lines, on the lock's Python) with
# PyTorch's index added; the locks follow with the host's settings alone, torch then being in place.
$(VENV_STAMP): $(LOCKS)
	@test -x $(VENV)/bin/python || (cd $(REPO_ROOT) && $(SYSTEM_PY) -m scripts.setup_torch check)
	@test -x $(VENV)/bin/python || $(SYSTEM_PY) -m venv $(VENV)
	cd $(REPO_ROOT) && $(VENV)/bin/python -m scripts.setup_torch install requirements.lock $(TORCH_LOCK) $(TORCH_INDEX)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes \
	  -r $(REPO_ROOT)/requirements.lock -r $(REPO_ROOT)/requirements-dev.lock
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
	  -r $(REPO_ROOT)/requirements-assets.lock
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "[setup] build/venv is ready"

# An optional lock installs with --no-deps on top of the environment `setup` made. Its stamp is named
# <prefix>-<the lock's checksum> (lock_stamp), so a changed lock installs again; install_optional_lock, called with
# the prefix, installs the rule's lock ($<) and replaces the previous stamp.
lock_stamp = $(BUILD_DIR)/.$(1)-$(shell cat $(2) | cksum | cut -d' ' -f1)
define install_optional_lock
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r $<
	@rm -f $(BUILD_DIR)/.$(1)-*
	@touch $@
endef

# The optional cluster engine (Ray, documentation/cluster.md): its lock pins ray and what it needs beyond
# requirements.lock. A one-machine run never needs it; CI installs it for the cluster tests
# (tests/actions/test_cluster.py).
CLUSTER_LOCK  := $(REPO_ROOT)/requirements-cluster.lock
CLUSTER_STAMP := $(call lock_stamp,cluster,$(CLUSTER_LOCK))
setup_cluster: $(CLUSTER_STAMP)
$(CLUSTER_STAMP): $(CLUSTER_LOCK) | setup
	$(call install_optional_lock,cluster)
	@echo "[setup] Ray is installed: --cluster=<address> runs on a Ray cluster (documentation/cluster.md)"

# Triton for the kernel tests without a GPU (its CPU interpreter, tests/triton_interpreter.py): without it those
# tests skip. CI installs it; a run never needs it.
KERNELS_LOCK  := $(REPO_ROOT)/requirements-kernels.lock
KERNELS_STAMP := $(call lock_stamp,kernels,$(KERNELS_LOCK))
setup_kernel_tests: $(KERNELS_STAMP)
$(KERNELS_STAMP): $(KERNELS_LOCK) | setup
	$(call install_optional_lock,kernels)
	@echo "[setup] Triton is installed: the kernel tests run in its CPU interpreter"

link_dirs: setup
	$(PY) -m scripts.link_dirs
