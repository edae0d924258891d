"""Whether a test's figure could go into a submission, beyond LoadGen's VALID or accuracy's PASS.

LoadGen calls a run VALID when it met the run's own settings, and accuracy PASSes when it reaches the target; a
figure is also submittable only when it was run as the rules require: the real data set and model, full length,
and the round's LoadGen (its seeds) for a benchmark and scenario the round accepts on the system's type. The
summary shows both answers (``VALID but not submittable (reasons)``), so a quick run is never mistaken for a result.
"""

from __future__ import annotations

from code.common.rounds import get_round
from code.common.systems import SystemDetectionError, system_type
from configs.configuration import ResolvedConfig


def round_refusal(config: ResolvedConfig) -> str | None:
    """Why the config's round does not take this benchmark and scenario on this system's type; None if it does."""
    try:
        kind = system_type(config.system)
    except SystemDetectionError as error:
        return str(error)
    return get_round(config["round"]).refusal(config.benchmark_name, config.scenario, kind)
