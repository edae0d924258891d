"""Starting values of a new GPT-J system's config classes (``make add_system`` writes them into ``custom.py``).

Why here: the values that fit a benchmark belong to its configs, so a new benchmark brings its own and
scripts/add_system.py stays generic. They are meant to run, not to be fast: a person tunes them with ``--test_run``.
"""

from typing import Any

from code.common.constants import Scenario

# GPT-J-6B does not run usefully on a CPU: CPU stubs use the tiny model on random weights (like the CPU class).
_CPU_MODEL: dict[str, Any] = {"model_name": "tiny", "synthetic_sample_count": 64}

STARTING_VALUES: dict[Scenario, dict[str, dict[str, Any]]] = {
    Scenario.Offline: {"gpu": {"gpu_batch_size": 16, "offline_expected_qps": 2.0},
                       "cpu": {**_CPU_MODEL, "gpu_batch_size": 16, "offline_expected_qps": 2.0}},
    Scenario.Server: {"gpu": {"gpu_batch_size": 8, "server_target_qps": 1.0},
                      "cpu": {**_CPU_MODEL, "gpu_batch_size": 8, "server_target_qps": 0.5}},
    Scenario.SingleStream: {"gpu": {"single_stream_expected_latency_ns": 5_000_000_000},
                            "cpu": {**_CPU_MODEL, "single_stream_expected_latency_ns": 2_000_000_000}},
}
"""Per scenario, the fields of a machine with a GPU ("gpu") and of a CPU-only one ("cpu")."""

PRECISION: dict[str, tuple[str, str]] = {"gpu": ("bf16", "bf16"), "cpu": ("fp32", "fp32")}
"""The engine precision of the (99% class, 99.9% class) on a GPU and on a CPU."""

BY_TARGET: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
"""Fields that differ between the 99% and the 99.9% class: none for GPT-J."""
