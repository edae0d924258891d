"""``python -m code.actions.build_cores [RUN_ARGS...]``: build the C++ core of every round the tests of a run are for.

A run that names no round runs each test for its own default round (code/common/rounds.py's ``default_round``), so
the cores a run loads depend on its tests and the system's type: ``make build`` without ``ROUND`` (and so ``make run``
before it runs) resolves the tests as the run will and builds each round's core, each under its build lock. No
RUN_ARGS: the tests of ``make run``'s default (BERT Offline on the detected system). ``python -m code.harness.build
--round=<round>`` builds one round.
"""

from __future__ import annotations

import sys

from code.common.benchmark_errors import BenchmarkError
from code.common.rounds import RoundError
from code.common.systems import SystemDetectionError
from code.config.fields import FieldError
from code.config.resolved import ConfigError
from code.harness.build import BuildError, build, interrupted
from code.mlperf.arguments import ArgumentError, parse_run_args
from code.tuning.plans import resolved_configs, system_name

# RUN_ARGS words that ask for help: the rounds are then those of the run without them, make run's default.
HELP_WORDS = ("-h", "--help", "help")
# What a run refuses with its fix (a bad flag, a config, a round only a clone builds): refused here in its words.
REFUSED = (ArgumentError, FieldError, ConfigError, BenchmarkError, SystemDetectionError, RoundError)


def rounds_of_run(run_args: list[str]) -> list[str]:
    """The rounds of the tests a ``python -m code.main`` with these arguments runs, in the order of its tests."""
    request = parse_run_args([arg for arg in run_args if arg not in HELP_WORDS])
    configs = resolved_configs(request, system_name(request), whole_run=False)
    return list(dict.fromkeys(config["round"] for config in configs))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rounds: list[str] = []
    try:
        rounds = rounds_of_run(argv)
        print(f"code.actions.build_cores: the run's tests are for round(s) {', '.join(rounds)}")
        for round_name in rounds:
            print(f"built {build(round_name)}")
    except BuildError as error:
        print(f"code.actions.build_cores: error: {error}", file=sys.stderr)
        return 1
    except REFUSED as error:
        print(f"code.actions.build_cores: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted("code.actions.build_cores", ", ".join(rounds) or "of the run's tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
