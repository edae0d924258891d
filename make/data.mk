# Data sets and models: BENCHMARKS="bert gptj" (the default) or one of them picks which.

.PHONY: download_data download_model preprocess_data check_benchmarks
# The benchmarks with data steps (code/<name>/download_data.py): a name outside them is refused before link_dirs or
# any download, with the list, since Python's "No module named code.<name>" names neither the variable nor the fix.
KNOWN_BENCHMARKS   := $(sort $(patsubst $(REPO_ROOT)/code/%/download_data.py,%,$(wildcard $(REPO_ROOT)/code/*/download_data.py)))
UNKNOWN_BENCHMARKS := $(filter-out $(KNOWN_BENCHMARKS),$(BENCHMARKS))

BENCHMARKS_ERROR   := ERROR: BENCHMARKS="$(BENCHMARKS)": no benchmark $(UNKNOWN_BENCHMARKS) here; the benchmarks are \
	$(KNOWN_BENCHMARKS): name some of them (BENCHMARKS="bert") or leave BENCHMARKS out for all

check_benchmarks:
	@$(if $(UNKNOWN_BENCHMARKS),echo '$(BENCHMARKS_ERROR)' >&2; exit 2,:)

# CALIBRATION=1 also fetches GPT-J's MLPerf calibration set (code/gptj/calibration_data.py).
download_data: check_benchmarks link_dirs
	@for b in $(BENCHMARKS); do \
		$(PY) -m code.$$b.download_data $$( [ "$$b" = gptj ] && [ -n "$(CALIBRATION)" ] && echo --calibration ) \
		|| exit 1; done

download_model: check_benchmarks link_dirs
	@for b in $(BENCHMARKS); do $(PY) -m code.$$b.download_model || exit 1; done

preprocess_data: check_benchmarks link_dirs
	@for b in $(BENCHMARKS); do $(PY) -m code.$$b.preprocess_data || exit 1; done
