# MLPerf system descriptions (documentation/adding_a_system.md): systems/<system>.json + systems/<system>.user.json.
# SYSTEM=<name> picks the system (default: the detected one); SUBMITTER=<org> names the submitter.

SYSTEM    ?=
SUBMITTER ?=
SYSTEM_ARGS := $(if $(SYSTEM),--system_name=$(SYSTEM)) $(if $(SUBMITTER),--submitter="$(SUBMITTER)")

.PHONY: add_system check_system_json
add_system: setup
	$(PY) -m scripts.add_system $(SYSTEM_ARGS) $(ADD_SYSTEM_ARGS)

# Fails (status 1) naming each field the round's submission checker would reject, and where to set it.
check_system_json: setup
	$(PY) -m scripts.check_system_json $(SYSTEM_ARGS) $(if $(ROUND),--round=$(ROUND))
