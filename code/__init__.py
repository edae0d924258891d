"""MLPerf Inference harness: Python orchestration around a C++/pybind11 LoadGen core.

Run it as ``python -m code.main --action=...`` from the repository root (the Makefile does).
"""
