# The C++/pybind11 harness; LoadGen's sources come from the pinned mlcommons-loadgen sdist at build time.

.PHONY: build
build: setup
	$(PY) -m code.harness.build
