# MLPerf Inference harness for BERT and GPT-J. `make help` lists the targets; documentation/commands.md explains
# the flow. Fragments in make/ hold the details: paths and tools, setup, data, build, run, test.

include make/const.mk
include make/setup.mk
include make/data.mk
include make/build.mk
include make/run.mk
include make/test.mk
include make/bench.mk

.DEFAULT_GOAL := help

.PHONY: help
help:
	@echo "MLPerf Inference harness (BERT, GPT-J). Typical flow:"
	@echo "  make setup                 native environment in build/venv (pinned requirements)"
	@echo "  make prebuild              Docker entry point (needs a Docker engine)"
	@echo "  make link_dirs             build/{data,models,preprocessed_data} -> \$$MLPERF_SCRATCH_PATH when set"
	@echo "  make download_data   BENCHMARKS=\"bert\""
	@echo "  make download_model  BENCHMARKS=\"bert\""
	@echo "  make preprocess_data BENCHMARKS=\"bert\""
	@echo "  make build [ROUND=v4.1]    compile the C++/pybind11 LoadGen harness for a round (default v5.0)"
	@echo "  make generate_engines RUN_ARGS=\"...\""
	@echo "  make run_harness      RUN_ARGS=\"...\""
	@echo "  make run              RUN_ARGS=\"--benchmarks=bert --scenarios=offline --test_run\"   (= both)"
	@echo "  make info             RUN_ARGS=\"...\"   detected system and resolved config"
	@echo "  make add_system            stub config classes for this machine"
	@echo "  make test                  lint + tests (what CI runs)"
	@echo "  make clean | clean_all     remove build outputs (clean_all: also venv, data, models)"
	@echo "ROUND=v4.1|v5.0 picks the MLPerf round of build and run targets (documentation/rounds.md)"
	@echo "RUN_ARGS help: make run RUN_ARGS=--help"

.PHONY: clean clean_all
# clean keeps what is slow to get again: the venv and downloaded or preprocessed data and models.
clean:
	rm -rf $(BUILD_DIR)/harness $(BUILD_DIR)/lib $(BUILD_DIR)/engines $(BUILD_DIR)/loadgen-configs $(BUILD_DIR)/logs

clean_all:
	find $(BUILD_DIR) -mindepth 1 -maxdepth 1 ! -name .gitkeep -exec rm -rf {} +
