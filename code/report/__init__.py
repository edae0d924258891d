"""Run reports: ``report.md`` and PNG plots beside each test's logs, and one page for a whole invocation.

A test's report reads only what the test left in its folder: ``metadata.json`` (verdict, metric, provenance),
LoadGen's ``mlperf_log_detail.txt`` (its percentiles) and the core's ``sample_times.npz`` (every sample's issue and
completion time and input length). So ``python -m code.report <log dir>`` (``make report LOG_DIR=...``) can draw
any earlier run again. matplotlib draws with its file-only backend, so a headless machine works.

Across runs, ``results.py`` keeps the newest result per system, benchmark, scenario, GPU count and test, and
``compare.py`` puts two runs side by side; ``make_results.py`` is ``make results [COMPARE=<a>,<b>]``.
"""
