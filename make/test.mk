# What CI runs (.ci/run calls `make test`, then `make test_docker`): lint, then the test suite with tiny models.

# The linters come from requirements-dev.lock (make setup); each takes about a second.
DOCKERFILES   := $(wildcard $(REPO_ROOT)/docker/Dockerfile*)
SHELL_SCRIPTS := $(wildcard $(REPO_ROOT)/scripts/docker/*.sh) $(REPO_ROOT)/.ci/run
# The C++ core in the style of .clang-format; `build/venv/bin/clang-format -i code/harness/src/*` applies it.
CXX_SOURCES   := $(wildcard $(REPO_ROOT)/code/harness/src/*.cc $(REPO_ROOT)/code/harness/src/*.h)

.PHONY: test lint
lint: setup
	$(PY) -m ruff check $(REPO_ROOT)
	$(VENV)/bin/hadolint $(DOCKERFILES)
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)
	$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES)

# pytest's default output names each test file as its first test starts, so progress shows from the start; its
# header says where the official MLCommons tools are read from (tests that need them fail when they are missing).
test: lint build
	cd $(REPO_ROOT) && $(PY) -m pytest $(PYTEST_ARGS)
