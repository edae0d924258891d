# MLPerf Inference harness for BERT and GPT-J. `make help` lists the targets; documentation/commands.md explains
# the flow. Fragments in make/ hold the details: paths and tools, setup, data, build, run, test, audits.

# Every target runs modules of this checkout (`python -m code.main`, ...), which Python finds from the current folder
# only, and make/ fragments are read from it: make runs from the repository root. `make -C <root>` does that from
# any folder; `make -f <root>/Makefile` from another folder stops here with the fix rather than a module error.
CHECKOUT := $(realpath $(dir $(firstword $(MAKEFILE_LIST))))
ifneq ($(realpath $(CURDIR)),$(CHECKOUT))
$(error run make from the repository root: cd $(CHECKOUT) (or make -C $(CHECKOUT) <target>))
endif

include make/const.mk
include make/setup.mk
include make/docker.mk
include make/data.mk
include make/build.mk
include make/run.mk
include make/test.mk
include make/bench.mk
include make/submission.mk
include make/systems.mk
include make/audit.mk

.DEFAULT_GOAL := help

.PHONY: help
help:
	@echo "MLPerf Inference harness (BERT, GPT-J). Typical flow, by step:"
	@echo "Set up:"
	@echo "  make prebuild [BASE_IMAGE=...]       Docker: build the image, add you, open a shell (docker.md)"
	@echo "  make launch_docker DOCKER_COMMAND=\"make ...\"   the same, headless"
	@echo "  make setup                           the native fallback: build/venv from the lock files"
	@echo "  make setup_cluster                   Ray, for a run over several nodes (documentation/cluster.md)"
	@echo "  make setup_kernel_tests              Triton, so that make test runs the kernel tests without a GPU"
	@echo "  make build [ROUND=v4.1] [LOADGEN_SRC=<clone>]   the C++/pybind11 LoadGen harness of ROUND,"
	@echo "                                       else of the default rounds of RUN_ARGS' tests"
	@echo "                                       (make run builds them itself)"
	@echo "Data and models:"
	@echo "  make link_dirs                       build/{data,models,preprocessed_data} -> \$$MLPERF_SCRATCH_PATH"
	@echo "  make download_data   BENCHMARKS=\"bert\""
	@echo "  make download_model  BENCHMARKS=\"bert\""
	@echo "  make preprocess_data BENCHMARKS=\"bert\""
	@echo "Run:"
	@echo "  make generate_engines RUN_ARGS=\"...\""
	@echo "  make run_harness      RUN_ARGS=\"...\" [LOG_DIR=<new folder>]"
	@echo "  make run              RUN_ARGS=\"--benchmarks=bert --scenarios=offline --test_run\"   (= both)"
	@echo "  make find_performance RUN_ARGS=\"...\"   measure this system, store build/tuned/ for later runs"
	@echo "  make info             RUN_ARGS=\"...\"   detected system and resolved config"
	@echo "  make run_audit_harness RUN_ARGS=\"... [--audit_test=TEST01]\"   compliance audits of a SubmissionRun"
	@echo "Results:"
	@echo "  make report [LOG_DIR=build/logs/<ts>]   report.md + plots of a run (default: the newest)"
	@echo "  make results [COMPARE=<run a>,<run b>]   newest figure per system, benchmark, scenario, GPUs"
	@echo "  make figures [ADD=<run folder> MEASUREMENT=<journal id>]   performance.md's Current figures from"
	@echo "                                       documentation/figures/current.csv (ADD: a run's rows first)"
	@echo "Submission:"
	@echo "  make add_system [SUBMITTER=org]      config classes and the system description for this machine"
	@echo "    [SYSTEM=MyBox GPU_MODEL=<model> GPU_COUNT=<n>]   a name, and its GPUs if it does not say"
	@echo "  make check_system_json [SYSTEM=name] [SUBMITTER=org]   check it as the submission checker will"
	@echo "  make stage_results SUBMITTER=<org>   build/submission/closed/<org> from the newest runs"
	@echo "  make truncate_results SUBMITTER=<org>, make check_submission SUBMITTER=<org>   the round's tools"
	@echo "  make pack_submission SUBMITTER=<org>   the archive the submission UI takes, with its checksums"
	@echo "Test:"
	@echo "  make test                            make lint + the tests (what CI runs)"
	@echo "  make lint                            the linters alone: ruff, hadolint, shellcheck, clang-format"
	@echo "  make test_docker                     the Docker path end to end (SKIPPED without a Docker engine)"
	@echo "  make test_submission [FULL=1]        the submission flow on CPU, judged by the official checker"
	@echo "Clean:"
	@echo "  make clean                           remove build outputs (harness, lib, engines)"
	@echo "  make clean_all                       also the venv, downloads (LoadGen's sdist), data and models"
	@echo "                                       both keep results: build/logs, build/bench,"
	@echo "                                       build/compliance_logs, build/tuned, build/submission, ...;"
	@echo "                                       each says what it deleted and kept"
	@echo "  make clean_logs                      delete the logs in build/logs of runs no longer running"
	@echo "ROUND=v4.1|v5.0|v5.1|v6.1 picks the MLPerf round of build and run targets; without it each test"
	@echo "  runs for the newest round that accepts it and builds from PyPI: BERT edge and llama3.1-8b Offline"
	@echo "  v6.1, GPT-J v5.0; BERT datacenter is v4.1's alone: ROUND=v4.1 LOADGEN_SRC=<clone> (rounds.md)"
	@echo "RUN_ARGS help: make run RUN_ARGS=--help (every flag and its default); make from the repository root"

.PHONY: clean clean_all clean_logs
# The clean targets delete only the folders of build/ named here, each made again by a target; everything else in
# build/ stays, so no result is deleted unasked: the run logs, the bench measurements, the audit runs, the tuned
# values, anything staged for a submission, and any folder these lists do not name. Only clean_logs deletes logs.
# clean: build outputs (make build, make generate_engines).
CLEANED     := harness lib engines
# clean_all also: the venv (make setup), the lock tool and Docker wheelhouses (scripts/docker), the downloads a
# build needs (LoadGen's sdist: kept by clean, so a machine without network builds again), and the data and models
# (make download_data, download_model, preprocess_data; with MLPERF_SCRATCH_PATH only the links to them).
ALL_CLEANED := $(CLEANED) venv tools docker downloads data models preprocessed_data
# Result folders, named as such in what the clean targets print (tests/common/test_no_data_loss.py).
RESULTS     := logs bench submission submission_work compliance_logs tuned check_devices host_share

# $(call clean_folders,<target>,<folders>): delete those folders of build/, then say what went and what is kept.
define clean_folders
	@deleted=""; for name in $(2); do \
	  if [ -e "$(BUILD_DIR)/$$name" ] || [ -L "$(BUILD_DIR)/$$name" ]; then \
	    rm -rf "$(BUILD_DIR)/$$name" && deleted="$$deleted $$name"; fi; \
	done; \
	results=""; others=""; for name in $$(ls -A "$(BUILD_DIR)" 2>/dev/null | grep -vx .gitkeep); do \
	  case " $(RESULTS) " in *" $$name "*) results="$$results $$name";; *) others="$$others $$name";; esac; \
	done; \
	echo "[$(1)] deleted from $(BUILD_DIR):$${deleted:- nothing}"; \
	echo "[$(1)] kept results:$${results:- none there} (\`make clean_logs\` deletes build/logs)"; \
	echo "[$(1)] kept as well:$${others:- nothing else}"
endef

# clean keeps what is slow to get again too: the venv, the downloads, and downloaded or preprocessed data and models.
clean:
	$(call clean_folders,clean,$(CLEANED))

clean_all:
	$(call clean_folders,clean_all,$(ALL_CLEANED))

# Keeps the folders of runs still going (scripts/clean_logs.py); the host's Python will do where there is no venv.
clean_logs:
	@$(if $(wildcard $(PY)),$(PY),$(SYSTEM_PY)) -m scripts.clean_logs $(BUILD_DIR)/logs
