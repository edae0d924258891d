"""Starting values of a new BERT system's config classes (``make add_system`` writes them into ``custom.py``).

Why here: the values that fit a benchmark belong to its configs, so a new benchmark brings its own and
scripts/add_system.py stays generic. They are meant to run, not to be fast: a person tunes them with ``--test_run``.
"""

from typing import Any

from code.common.constants import Scenario
from code.common.cpu_features import BestCpuPrecision

STARTING_VALUES: dict[Scenario, dict[str, dict[str, Any]]] = {
    Scenario.Offline: {"gpu": {"gpu_batch_size": 64, "offline_expected_qps": 500.0},
                       "cpu": {"gpu_batch_size": 8, "offline_expected_qps": 2.0}},
    Scenario.Server: {"gpu": {"gpu_batch_size": 32, "server_target_qps": 200.0},
                      "cpu": {"gpu_batch_size": 4, "server_target_qps": 0.5}},
    Scenario.SingleStream: {"gpu": {"single_stream_expected_latency_ns": 10_000_000},
                            "cpu": {"single_stream_expected_latency_ns": 500_000_000}},
}
"""Per scenario, the fields of a machine with a GPU ("gpu") and of a CPU-only one ("cpu")."""

PRECISION: dict[str, tuple[str, str]] = {"gpu": ("fp16", "fp16"), "cpu": (BestCpuPrecision().choose()[0], "fp32")}
"""The engine precision of the (99% class, 99.9% class) on a GPU and on a CPU; a CPU's 99% class gets bf16 only when
this machine's CPU has bf16 arithmetic (code/common/cpu_features.py)."""

BY_TARGET: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "gpu": ({"gelu_in_gemm": True}, {"gelu_in_gemm": False}),
}
"""Fields that differ between the 99% and the 99.9% class: the GELU epilogue (tanh form) keeps the 99% bar only
(documentation/bert_gpu.md)."""
