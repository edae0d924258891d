"""Starting values of a new GPT-J system without GPUs (``make add_system`` writes them into ``custom.py``); a system
of GPUs derives from its GPU model's classes instead (code/config/any_gpu.py).

Why here: the values that fit a benchmark belong to its configs, so a new benchmark brings its own and
scripts/add_system.py stays generic. They are meant to run, not to be fast: a person tunes them with ``--test_run``.
"""

from typing import Any

from code.common.constants import Scenario

# GPT-J-6B does not run usefully on a CPU: the stubs use the tiny model on random weights (like the CPU class).
_CPU_MODEL: dict[str, Any] = {"model_name": "tiny", "synthetic_sample_count": 64}

STARTING_VALUES: dict[Scenario, dict[str, Any]] = {
    Scenario.Offline: {**_CPU_MODEL, "gpu_batch_size": 16, "offline_expected_qps": 2.0},
    Scenario.Server: {**_CPU_MODEL, "gpu_batch_size": 8, "server_target_qps": 0.5},
    Scenario.SingleStream: {**_CPU_MODEL, "single_stream_expected_latency_ns": 2_000_000_000},
}
"""Per scenario, the fields of a machine without GPUs."""

PRECISION: tuple[str, str] = ("fp32", "fp32")
"""The engine precision of the 99% and the 99.9% class."""
