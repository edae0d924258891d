"""Every shipped config class's own values, pinned.

``tests/fixtures/config_classes.json`` holds, for each class the shipped scenario files register (benchmark,
scenario, system, workload), the class name, each field it sets (its own and inherited, as ``repr``) and its engine
ladder. How the classes are written (mixins, shared bases) may change; what each one says may not, unnoticed. A
deliberate change of a shipped value rewrites it: ``build/venv/bin/python -m tests.configs.test_class_values``.
"""

import json
from pathlib import Path
from typing import Any

from code.common.constants import Benchmark, Scenario
from code.config.registry import ConfigRegistry

PINNED = Path(__file__).resolve().parents[1] / "fixtures" / "config_classes.json"


def class_values() -> dict[str, Any]:
    """Each shipped registered class (custom.py files aside) -> its name, fields and ladder, as text."""
    for benchmark in Benchmark:
        for scenario in Scenario:
            ConfigRegistry.load(benchmark, scenario)
    dump = {}
    for (benchmark, scenario, system, workload), config in ConfigRegistry.registered().items():
        if not config.__module__.startswith("configs.") or config.__module__.endswith(".custom"):
            continue  # a user's custom.py, or a class a test registered
        dump[f"{benchmark.value} {scenario.value} {system} {workload.shortname()}"] = {
            "class": config.__name__,
            "fields": {name: repr(value) for name, value in sorted(config.fields().items())},
            "ladder": [[rung.name, rung.why, repr(rung)] for rung in config.engine_ladder]
            if config.ladder_owner() else [],
        }
    return dict(sorted(dump.items()))


def test_every_class_says_what_it_said() -> None:
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    now = class_values()
    assert sorted(now) == sorted(pinned)
    for key, values in pinned.items():
        assert now[key] == values, key


if __name__ == "__main__":  # rewrite the pinned values from the classes as they are now
    PINNED.write_text(json.dumps(class_values(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINNED}")
