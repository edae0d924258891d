"""MLPerf's rules and records: RUN_ARGS, the benchmark seam, devices, inputs, user.conf, run logs, verdicts."""
