"""Find performance: measure a system and store the LoadGen settings that make its runs VALID.

``search``: the arithmetic and the searches, given a function that runs one LoadGen try (so CI drives them with a
fake, and ``scripts/bench`` with its own runner): the Offline probe and confirming run, the SingleStream probe and
confirming run, the Server bisection. ``code/actions/find_performance.py`` runs them through real test processes
and stores what they find with ``code/common/tuned.py`` (``documentation/performance_tuning_guide.md``).
"""
