# A closed-division submission from the run logs: stage the tree, truncate its accuracy logs, run the round's
# official checker (documentation/submission_guide.md). The round's unmodified tools come from
# MLPERF_INFERENCE_TOOLS (default: ../shared/mlcommons-inference beside the checkout).

SUBMITTER        ?=
SYSTEM           ?=
# Run folders and audit folders to stage from (default: every one in build/logs and build/compliance_logs).
LOGS             ?=
COMPLIANCE_LOGS  ?=
ALLOW_INCOMPLETE ?=
SKIP_COMPLIANCE  ?=
SUBMISSION_ARGS = --submitter=$(call shell_word,$(SUBMITTER))
STAGE_ARGS = $(SUBMISSION_ARGS) $(if $(SYSTEM),--system=$(call shell_word,$(SYSTEM))) $(if $(ROUND),--round=$(ROUND)) \
	$(if $(LOGS),--logs $(LOGS)) $(if $(COMPLIANCE_LOGS),--compliance_logs $(COMPLIANCE_LOGS)) \
	$(if $(ALLOW_INCOMPLETE),--allow_incomplete)

.PHONY: stage_results truncate_results check_submission pack_submission test_submission require_submitter
require_submitter:
	@test -n "$(SUBMITTER)" || { echo "ERROR: give SUBMITTER=<your organization>, e.g. make $(MAKECMDGOALS) SUBMITTER=MyOrg" >&2; exit 2; }

# The tree's round is ROUND, else the one round of the runs: runs of several rounds (each test takes its own default
# round) are refused, naming the newest round that accepts all of them, so no result is left out unasked.
stage_results: setup require_submitter
	$(PY) -m code.submission stage $(STAGE_ARGS)

truncate_results: setup require_submitter
	$(PY) -m code.submission truncate $(SUBMISSION_ARGS)

check_submission: setup require_submitter
	$(PY) -m code.submission check $(SUBMISSION_ARGS) $(if $(SKIP_COMPLIANCE),--skip_compliance)

# The archive the submission UI takes, of a tree the round's checker passed as it is now:
# build/submission_work/<org>/mlperf_submission_<org>.tar.gz, with .sha1 and .sha256 beside it.
pack_submission: setup require_submitter
	$(PY) -m code.submission pack $(SUBMISSION_ARGS) $(if $(ALLOW_INCOMPLETE),--allow_incomplete)

# Every step a submitter runs, on CPU with tiny inputs, judged by the official checker of ROUND (default v5.0, the
# newest round with both bert-99 and gptj-99 for the CPU system);
# shortened (about a minute on 2 cores), or FULL=1: full length (most of an hour).
test_submission: build
	cd $(REPO_ROOT) && SUBMISSION_PIPELINE_ROUND=$(ROUND) $(if $(FULL),SUBMISSION_PIPELINE_FULL=1) \
	  $(PY) -m pytest -q -s tests/submission/test_pipeline.py
