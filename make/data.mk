# Data sets and models: BENCHMARKS="bert gptj" (the default) or one of them picks which.

.PHONY: download_data download_model preprocess_data
# CALIBRATION=1 also fetches GPT-J's MLPerf calibration set (code/gptj/calibration_data.py).
download_data: link_dirs
	@for b in $(BENCHMARKS); do \
		$(PY) -m code.$$b.download_data $$( [ "$$b" = gptj ] && [ -n "$(CALIBRATION)" ] && echo --calibration ) \
		|| exit 1; done

download_model: link_dirs
	@for b in $(BENCHMARKS); do $(PY) -m code.$$b.download_model || exit 1; done

preprocess_data: link_dirs
	@for b in $(BENCHMARKS); do $(PY) -m code.$$b.preprocess_data || exit 1; done
