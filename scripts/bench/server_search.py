"""The Server search of the bench: the product's (code/tuning/search.py), each try one bench run.

Why a search: Server validity depends on the p99 latency at a load, which only a LoadGen run can tell. The search
itself, its tolerance and the rule that refuses a try whose queue grew live in the product, which
``make find_performance`` runs too; this module only turns a bench run into a try.
"""

from __future__ import annotations

from typing import Any

from code.common.constants import Scenario
from code.tuning.search import ServerSearch, ServerTry, judge_server_try, search_server_qps, unsustained_reason
from scripts.bench.runs import HarnessRunner

__all__ = ["ServerSearch", "ServerTry", "search_server_qps", "server_try", "unsustained_reason"]


def server_try(runner: HarnessRunner, benchmark: str, duration_ms: int, base: dict[str, Any], qps: float) -> ServerTry:
    run = runner.run(
        f"qps{qps:g}", benchmark, Scenario.Server, {**base, "min_duration": duration_ms, "server_target_qps": qps}
    )
    return judge_server_try(qps, run, run.log_dir, run.tokens_per_sample)
