# MLPerf system descriptions (documentation/adding_a_system.md): systems/<system>.json + systems/<system>.user.json.
# SYSTEM=<name> picks the system (default: the detected one); SUBMITTER=<org> names the submitter.

SYSTEM    ?=
SUBMITTER ?=
# GPU_MODEL=<model> GPU_COUNT=<n>: the GPUs of a system whose name does not give them (MyBox), or that is added
# from another machine.
GPU_MODEL ?=
GPU_COUNT ?=
# Each one shell word: a name with a space reaches the script, which says what a system name may hold.
SYSTEM_ARGS := $(if $(SYSTEM),--system_name=$(call shell_word,$(SYSTEM))) \
	$(if $(SUBMITTER),--submitter=$(call shell_word,$(SUBMITTER)))
GPU_ARGS    := $(if $(GPU_MODEL),--gpu_model=$(call shell_word,$(GPU_MODEL))) \
	$(if $(GPU_COUNT),--gpu_count=$(call shell_word,$(GPU_COUNT)))

.PHONY: add_system check_system_json
add_system: setup
	$(PY) -m scripts.add_system $(SYSTEM_ARGS) $(GPU_ARGS) $(ADD_SYSTEM_ARGS)

# Fails (status 1) naming each field the round's submission checker would reject, and where to set it.
check_system_json: setup
	$(PY) -m scripts.check_system_json $(SYSTEM_ARGS) $(if $(ROUND),--round=$(ROUND))
