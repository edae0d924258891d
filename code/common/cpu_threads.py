"""How many intra-op threads torch gets when a model runs on the CPU.

torch's default is the machine's physical cores (or ``OMP_NUM_THREADS``). Two things make that wrong for a run:

- A container or ``taskset`` may allow fewer CPUs than the machine has; oversubscribed threads are slower, so the
  default is capped at the allowed CPUs.
- In Server, LoadGen's issue thread and the C++ batchers must be scheduled the moment a query arrives. With every
  allowed core busy in torch (whose OpenMP threads also spin-wait between ops), they are not: on a 2-core machine
  the tiny BERT model's Server p99 at 120 QPS was 44-204 ms over four runs with 2 threads (one INVALID), and
  28-58 ms over six with the 1 thread this module gives it (2026-11-22). So Server leaves one core free; Offline
  and SingleStream use them all.
"""

from __future__ import annotations

import os

from code.common.constants import Scenario
from configs.configuration import ResolvedConfig


def allowed_cpus() -> int:
    """CPUs this process may run on: the affinity mask, which containers and taskset narrow below os.cpu_count()."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_cpu_threads() -> int:
    """torch's own default intra-op threads, capped at the CPUs this process may run on."""
    import torch  # as resolve_device does: only runs that resolve a CPU thread count pay for the import

    return max(1, min(torch.get_num_threads(), allowed_cpus()))


def resolve_cpu_threads(config: ResolvedConfig) -> int:
    """The ``cpu_threads`` field made concrete: itself when set, else ``default_cpu_threads`` (one fewer in
    Server)."""
    threads = config["cpu_threads"]
    if threads < 0:
        raise ValueError(f"cpu_threads must be >= 0 (0: choose from the allowed CPUs), got {threads}")
    if threads:
        return threads
    default = default_cpu_threads()
    return max(1, default - 1) if config.scenario is Scenario.Server else default
