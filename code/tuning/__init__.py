"""What a run runs on this system: the engine that meets accuracy, and the LoadGen settings that make its runs VALID.

``accuracy_gate``: which rung of a config's engine ladder runs, decided by the real accuracy run. ``search``: the
arithmetic and the searches, given a function that runs one LoadGen try (so CI drives them with a fake, and
``scripts/bench`` with its own runner): the Offline probe and confirming run, the SingleStream probe and confirming
run, the Server bisection. ``find_performance`` runs them through real test processes (``code/processes``) and stores
what they find with ``code/config/tuned.py`` (``documentation/performance_tuning_guide.md``). ``plans``: a request's
system, scenarios and resolved configs, each with the rung the accuracy gate starts it at.
"""
