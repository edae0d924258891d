# The C++/pybind11 harness of one round (ROUND, else --round in RUN_ARGS, else v5.0); LoadGen's sources come from
# the round's pinned mlcommons-loadgen sdist at build time, or (v4.1) from the clone of mlcommons/inference at the
# round's tag that LOADGEN_SRC names. Rounds build side by side under build/harness/<round>/.
LOADGEN_SRC ?=
export LOADGEN_SRC

.PHONY: build
build: setup | $(BUILD_AFTER)
	$(PY) -m code.harness.build $(if $(BUILD_ROUND),--round=$(BUILD_ROUND))
