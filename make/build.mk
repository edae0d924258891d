# The C++/pybind11 harness of one round (ROUND, else --round in RUN_ARGS), else of the rounds the tests of the run
# are for: each test's default round (documentation/rounds.md), of the target's HARNESS_ARGS (make run, ...) or of
# RUN_ARGS (make build alone; no RUN_ARGS: make run's default tests). LoadGen's sources come from the round's pinned
# mlcommons-loadgen sdist at build time, or (v4.1) from the clone of mlcommons/inference at the round's tag that
# LOADGEN_SRC names. Rounds build side by side under build/harness/<round>/.
LOADGEN_SRC ?=
export LOADGEN_SRC

.PHONY: build
build: setup | $(BUILD_AFTER)
	$(if $(BUILD_ROUND),$(PY) -m code.harness.build --round=$(BUILD_ROUND),$(PY) -m code.actions.build_cores $(or $(HARNESS_ARGS),$(RUN_ARGS)))
