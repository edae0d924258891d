# Engines and LoadGen runs; RUN_ARGS are parsed by `python -m code.main` (make run RUN_ARGS=--help).

.PHONY: generate_engines run_harness run info report results figures find_performance
# LOG_DIR=<folder> (NVIDIA's make variable) is --log_dir for the targets that run tests: a new or empty folder, so a
# run never writes into an earlier run's. RUN_ARGS naming another --log_dir is refused as a flag given twice. Only
# make's command line counts: a LOG_DIR exported by a job script would send every run to one folder.
# It reaches the shell as one quoted word, so a folder with spaces is one --log_dir (a ' in it written as '\'').
LOG_DIR      ?=
LOG_DIR_ARG  := $(if $(filter command line,$(origin LOG_DIR)),$(if $(LOG_DIR),'--log_dir=$(subst ','\'',$(LOG_DIR))'))
# What the targets that run tests pass: the round, RUN_ARGS, the log folder; one space apart (the folder last and
# outside $(strip), which would join the spaces of its name into one).
TEST_ARGS     = $(strip $(ROUND_ARG) $(RUN_ARGS))$(if $(LOG_DIR_ARG), $(LOG_DIR_ARG))

# Each target that runs tests sets HARNESS_ARGS, the arguments of its `python -m code.main`; check_args, its
# prerequisite, inherits them (make passes a target's variables to its prerequisites), so the check reads exactly
# what the run will.
.PHONY: check_args
check_args: setup
	$(PY) -m code.main --check_args $(HARNESS_ARGS)

generate_engines: setup
	$(PY) -m code.main --action=generate_engines $(ROUND_ARG) $(RUN_ARGS)

# check_args said the plan before the build; the run itself does not say it again (code/actions/announce.py).
PLAN_SAID := $(if $(HELP_ASKED),,MLPERF_PLAN_SAID=1)

run_harness: HARNESS_ARGS = --action=run_harness $(TEST_ARGS)
run_harness: $(RUN_DEPS)
	$(PLAN_SAID) $(PY) -m code.main $(HARNESS_ARGS)

# generate_engines then run_harness, in one process.
run: HARNESS_ARGS = --action=run $(TEST_ARGS)
run: $(RUN_DEPS)
	$(PLAN_SAID) $(PY) -m code.main $(HARNESS_ARGS)

# Measure this system and store what later runs use: build/tuned/<system>/<bench>/<Scenario>.json
# (documentation/performance_tuning_guide.md).
find_performance: HARNESS_ARGS = --action=run $(TEST_ARGS) --find_performance
find_performance: $(RUN_DEPS)
	$(PLAN_SAID) $(PY) -m code.main $(HARNESS_ARGS)

info: setup
	$(PY) -m code.main --action=info $(ROUND_ARG) $(RUN_ARGS)

# report.md and plots for every test of a run, and one page for the run (each run writes them itself; this draws
# an earlier run again). LOG_DIR defaults to the newest run (code/report/__main__.py finds it, or says there is none).
report: setup
	$(PY) -m code.report $(if $(LOG_DIR),$(call shell_word,$(LOG_DIR)))

# The newest result per system, benchmark, scenario, GPU count and test in build/logs, as a table and
# build/results.csv; COMPARE=<run a>,<run b> (run folders, or their names under build/logs) puts two runs' figures
# side by side with their ratio instead (build/results_compare.csv). Reads the logs, never writes them.
COMPARE      ?=
results: setup
	$(PY) -m code.report.make_results --build_dir=$(BUILD_DIR) $(if $(COMPARE),--compare=$(call shell_word,$(COMPARE)))

# The Current figures table of documentation/performance.md, written from its records
# (documentation/figures/current.csv). ADD=<run folder> MEASUREMENT=<journal id> first adds or replaces the rows of
# that run's performance tests (COMMAND="..." when the row's command is not the make run its record implies);
# CHECK=1 only compares, and fails when the page differs from the records.
ADD          ?=
MEASUREMENT  ?=
COMMAND      ?=
CHECK        ?=
figures: setup
	$(PY) -m code.report.current_figures $(if $(ADD),--add=$(call shell_word,$(ADD))) \
	  $(if $(MEASUREMENT),--measurement=$(call shell_word,$(MEASUREMENT))) \
	  $(if $(COMMAND),--command=$(call shell_word,$(COMMAND))) $(if $(CHECK),--check)
