"""The resolved configs of the shipped one- and eight-GPU systems, pinned.

``tests/fixtures/configs_x1_x8.json`` holds, for every benchmark, scenario and accuracy target of H100_SXM_80GBx1/x8
and H200_SXM_141GBx1/x8, the value of each field a config class sets; a field that no class set then and one sets
now fails too. It pins what these systems resolve to, so a change in how the classes are organised (one per system,
one per GPU model) cannot change a shipped value unnoticed. A deliberate change of a shipped value
rewrites it: ``build/venv/bin/python -m tests.configs.test_shipped_values``.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from code.common.constants import AccuracyTarget, Benchmark, Scenario
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting

PINNED = Path(__file__).resolve().parents[1] / "fixtures" / "configs_x1_x8.json"
SYSTEMS = [f"{model}x{count}" for model in ("H100_SXM_80GB", "H200_SXM_141GB") for count in (1, 8)]
CASES = [(benchmark, scenario, target, system) for benchmark in Benchmark for scenario in Scenario
         for target in benchmark.accuracy_targets for system in SYSTEMS]


def key(benchmark: Benchmark, scenario: Scenario, target: AccuracyTarget, system: str) -> str:
    return f"{benchmark.submission_name(target)} {scenario.value} {system}"


def set_by_configs(benchmark: Benchmark, scenario: Scenario, target: AccuracyTarget, system: str) -> dict[str, Any]:
    """Each field a config class sets -> its resolved value (tests resolve without tuned values: conftest.py)."""
    config = resolve_config(benchmark, scenario, system, WorkloadSetting(accuracy_target=target), {})
    tuned = [name for name, source in config.sources.items() if source.startswith("tuned")]
    assert not tuned, f"{system}: tuned values in {tuned}; set MLPERF_TUNED_DIR to an empty folder"
    return {name: value for name, value in sorted(config.values.items()) if config.sources[name] != "default"}


@pytest.mark.parametrize("benchmark,scenario,target,system", CASES, ids=[key(*case) for case in CASES])
def test_x1_and_x8_resolve_to_the_pinned_values(benchmark, scenario, target, system):
    pinned = json.loads(PINNED.read_text())[key(benchmark, scenario, target, system)]
    assert set_by_configs(benchmark, scenario, target, system) == pinned


def test_every_case_is_pinned():
    assert set(json.loads(PINNED.read_text())) == {key(*case) for case in CASES}


if __name__ == "__main__":  # rewrite the pinned values from the configs as they are now
    PINNED.write_text(json.dumps({key(*case): set_by_configs(*case) for case in CASES}, indent=1, sort_keys=True)
                      + "\n")
    print(f"wrote {PINNED}")
