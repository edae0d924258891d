# What CI runs (.ci/run calls `make test`): lint, then the test suite with tiny models.

.PHONY: test lint
lint: setup
	$(PY) -m ruff check $(REPO_ROOT)

test: lint build
	cd $(REPO_ROOT) && $(PY) -m pytest -q $(PYTEST_ARGS)
