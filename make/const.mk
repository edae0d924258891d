# Paths and tools every fragment uses.
REPO_ROOT    := $(patsubst %/,%,$(dir $(abspath $(firstword $(MAKEFILE_LIST)))))
BUILD_DIR    := $(REPO_ROOT)/build
VENV         := $(BUILD_DIR)/venv
# In the container (docker/Dockerfile sets IN_CONTAINER=1) the image's Python is the environment.
ifdef IN_CONTAINER
PY           := python3
else
PY           := $(VENV)/bin/python
endif
SYSTEM_PY    ?= python3
# $(call shell_word,<value>): the value as one word of the recipe's shell, single-quoted (a ' in it written '\''), so
# that a folder or a name with spaces reaches the program whole and the program names what is wrong with it.
shell_word = '$(subst ','\'',$(1))'
BENCHMARKS   ?= bert gptj
RUN_ARGS     ?=
# The MLPerf round (v4.1, v5.0, v5.1, v6.1): which LoadGen `make build` compiles and which round a run is for. RUN_ARGS
# may say --round=... instead; giving both with different values is an error. Empty: each test is for its default
# round, the newest that accepts it and builds from PyPI (documentation/rounds.md).
ROUND        ?=
ROUND_ARG    := $(if $(ROUND),--round=$(ROUND))
# The word after the first bare `--round` in a list (RUN_ARGS may use the space form, `--round v4.1`).
_word_after_round = $(if $(filter --round,$(firstword $1)),$(word 2,$1),$(if $(word 2,$1),$(call _word_after_round,$(wordlist 2,$(words $1),$1))))
BUILD_ROUND  := $(or $(ROUND),$(patsubst --round=%,%,$(lastword $(filter --round=%,$(RUN_ARGS)))),$(call _word_after_round,$(RUN_ARGS)))
# A target that runs the harness needs only the venv, not the C++ core, when RUN_ARGS asks for help: the help text
# comes from Python alone, so it answers at once on a fresh clone. Otherwise it checks RUN_ARGS (check_args,
# make/run.mk) after setup and before build, so a typo costs a second, not a C++ build, and the run says what it will
# do (its tests, mode and estimated time) before the build too.
HELP_ASKED   := $(filter --help -h help,$(RUN_ARGS))
RUN_DEPS     := $(if $(HELP_ASKED),setup,check_args build)
# The goals that check RUN_ARGS first: with one of them asked for, `build` waits for the check (make/build.mk), so the
# check comes first under make -j as well.
ARGS_CHECKED_GOALS := run run_harness find_performance run_audit_harness run_audit_test01 run_audit_test05
BUILD_AFTER  := $(if $(filter $(ARGS_CHECKED_GOALS),$(MAKECMDGOALS)),check_args)
# Where large data lives when set (see make link_dirs); empty means local folders under build/.
MLPERF_SCRATCH_PATH ?=
SHELL        := /bin/bash
