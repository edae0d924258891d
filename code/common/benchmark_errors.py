"""The errors a benchmark raises for the user to fix, apart from the benchmark seam (``code/mlperf/benchmarks.py``):
the modules below the seam raise them too, and importing them from the seam would make a circle."""

from __future__ import annotations


class BenchmarkError(RuntimeError):
    """A problem the user fixes with a make step (missing data, a stale engine); the message names the step."""


class InputsUnavailableError(BenchmarkError):
    """Real data or weights are needed but absent; the message names the make step that fetches them."""
