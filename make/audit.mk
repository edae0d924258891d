# Compliance audits (documentation/commands.md, documentation/submission_guide.md): each runs a LoadGen performance
# test with the round's official audit.config, then the round's run_verification.py against the newest SubmissionRun
# of the same test in build/logs. Logs go to a new build/compliance_logs/<timestamp>/. The official tools come from
# $MLPERF_INFERENCE_TOOLS/<round>/ (default: ../shared/mlcommons-inference beside the checkout).

.PHONY: run_audit_harness run_audit_test01 run_audit_test05
# Every audit the round's checker requires of the benchmarks (bert: TEST01, and TEST05 in v4.1; gptj: none), or
# only those named by --audit_test=TEST01[,TEST05] in RUN_ARGS.
# HARNESS_ARGS: what make/run.mk's check_args checks before the build, and the run.
run_audit_harness: HARNESS_ARGS = --action=run_audit $(ROUND_ARG) $(RUN_ARGS)
run_audit_harness: $(RUN_DEPS)
	$(PY) -m code.main $(HARNESS_ARGS)

# One test, NVIDIA's target names.
run_audit_test01: HARNESS_ARGS = --action=run_audit $(ROUND_ARG) $(RUN_ARGS) --audit_test=TEST01
run_audit_test01: $(RUN_DEPS)
	$(PY) -m code.main $(HARNESS_ARGS)

run_audit_test05: HARNESS_ARGS = --action=run_audit $(ROUND_ARG) $(RUN_ARGS) --audit_test=TEST05
run_audit_test05: $(RUN_DEPS)
	$(PY) -m code.main $(HARNESS_ARGS)
