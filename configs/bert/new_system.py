"""Starting values of a new BERT system without GPUs (``make add_system`` writes them into ``custom.py``); a system
of GPUs derives from its GPU model's classes instead (code/config/any_gpu.py).

Why here: the values that fit a benchmark belong to its configs, so a new benchmark brings its own and
scripts/add_system.py stays generic. They are meant to run, not to be fast: a person tunes them with ``--test_run``.
"""

from typing import Any

from code.common.constants import Scenario
from code.config.cpu_features import BestCpuPrecision

STARTING_VALUES: dict[Scenario, dict[str, Any]] = {
    Scenario.Offline: {"gpu_batch_size": 8, "offline_expected_qps": 2.0},
    Scenario.Server: {"gpu_batch_size": 4, "server_target_qps": 0.5},
    Scenario.SingleStream: {"single_stream_expected_latency_ns": 500_000_000},
}
"""Per scenario, the fields of a machine without GPUs."""

PRECISION: tuple[str, str] = (BestCpuPrecision().choose()[0], "fp32")
"""The engine precision of the 99% and the 99.9% class: the 99% class gets bf16 only when this machine's CPU has
bf16 arithmetic (code/config/cpu_features.py)."""
