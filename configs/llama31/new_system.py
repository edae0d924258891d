"""Starting values of a new llama3.1-8b system without GPUs (``make add_system`` writes them into ``custom.py``); a
system of GPUs derives from its GPU model's classes instead (configs/any_gpu.py).

They are the CPU classes' (configs/llama31/<Scenario>/__init__.py): the tiny model on random weights and short
synthetic prompts, meant to run, not to be fast; a person tunes them with ``--test_run``.
"""

from typing import Any

from code.common.constants import Scenario
from configs.llama31 import CPU_LENGTH_SCALE, CPU_MODEL

_CPU_MODEL: dict[str, Any] = {"model_name": CPU_MODEL, "synthetic_sample_count": 64,
                              "synthetic_length_scale": CPU_LENGTH_SCALE}

STARTING_VALUES: dict[Scenario, dict[str, Any]] = {
    Scenario.Offline: {**_CPU_MODEL, "gpu_batch_size": 16, "offline_expected_qps": 6.0},
    Scenario.Server: {**_CPU_MODEL, "gpu_batch_size": 8, "server_target_qps": 2.0},
    Scenario.SingleStream: {**_CPU_MODEL, "single_stream_expected_latency_ns": 200_000_000},
}
"""Per scenario, the fields of a machine without GPUs."""

PRECISION: tuple[str, str] = ("fp32", "fp32")
"""The engine precision of the 99% and the 99.9% class (llama3.1-8b has only the first)."""
