"""What a run runs on this system: the engine that meets accuracy (``accuracy_gate``), and the LoadGen settings that
make its runs VALID (``search``: the searches, given a function that runs one try, so CI drives them with a fake and
``scripts/bench`` with its own runner; ``find_performance``: them through real test processes, stored with
``code/config/tuned.py``). ``plans``: a request's system, scenarios and resolved configs.
"""
