# Paths and tools every fragment uses.
REPO_ROOT    := $(patsubst %/,%,$(dir $(abspath $(firstword $(MAKEFILE_LIST)))))
BUILD_DIR    := $(REPO_ROOT)/build
VENV         := $(BUILD_DIR)/venv
PY           := $(VENV)/bin/python
SYSTEM_PY    ?= python3
BENCHMARKS   ?= bert
RUN_ARGS     ?=
# Where large data lives when set (see make link_dirs); empty means local folders under build/.
MLPERF_SCRATCH_PATH ?=
SHELL        := /bin/bash
