"""Each round's LoadGen pin writes logs that the round's own, unmodified tools accept.

A pin is wrong in two ways that only the round's tools show: its ``mlperf.conf`` carries another round's seeds (the
checker rejects every performance log), or its summary words a line differently from what the round's compliance
scripts read (v5.0's TEST01 ``verify_performance.py`` reads "Early stopping 90th percentile estimate"; LoadGen 5.0.15
and later write "90.0th", so every SingleStream audit fails). So each pin is built, runs a short LoadGen test of
every scenario the round audits, and the round's own scripts judge its logs: each required audit's
``verify_performance.py`` must read a score from the summary (compared with itself, it passes only if it read one),
and the detail log must carry the seeds of the round's checker and no error. A source-built round (v4.1) is skipped,
saying why, where ``LOADGEN_SRC`` names no clone of its tag.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.constants import Benchmark
from code.common.paths import LIB_DIR, REPO_ROOT
from code.common.rounds import ROUNDS, get_round
from code.harness.fetch_loadgen import mlperf_conf_seeds
from code.mlperf.audits import audit_tools
from code.mlperf.run_logs import read_detail_log
from tests.common.test_rounds import official_checker
from tests.conftest import round_core, round_sources

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "squad_tiny.json"
# Short VALID runs with the oracle, paced so that each scenario's score is well defined on a loaded machine.
SCENARIO_ARGS = {
    "Offline": ["--gpu_batch_size=64", "--oracle_batch_ms=20", "--offline_expected_qps=3200", "--min_duration=500"],
    "SingleStream": ["--gpu_batch_size=1", "--oracle_batch_ms=2", "--single_stream_expected_latency_ns=2000000",
                     "--min_duration=1000"],
    "Server": ["--gpu_batch_size=8", "--oracle_batch_ms=2", "--server_target_qps=500", "--min_duration=1500",
               "--min_query_count=600"],
}


def audited_scenarios(round_name: str) -> list[str]:
    """Every scenario in which the round requires an audit of one of our benchmarks, on any system type."""
    the_round = get_round(round_name)
    found = {scenario.value for system_type in the_round.scenarios for benchmark in the_round.audits
             for scenario in the_round.scenarios_for(system_type, benchmark)}
    return sorted(found)


CASES = [(name, scenario) for name in ROUNDS for scenario in audited_scenarios(name)]


def verified_log(verification: Path) -> str:
    """The log file run_verification.py hands verify_performance.py: the summary up to v5.0, the detail log after."""
    text = verification.read_text(encoding="utf-8")
    return re.search(r"mlperf_log_(?:summary|detail)\.txt", text[text.index("verify_performance.py"):]).group(0)


def checker_seeds(round_name: str) -> dict[str, int]:
    return dict(official_checker(round_name).MODEL_CONFIG[round_name]["seeds"])


@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_the_pins_mlperf_conf_has_its_rounds_seeds_only(round_name):
    """The pinned LoadGen's own mlperf.conf (the sdist's, or the tag's tree) has the seeds of the round's checker,
    which are no other round's."""
    seeds = checker_seeds(round_name)
    conf = round_sources(round_name) / "mlperf.conf"
    assert vars(mlperf_conf_seeds(conf.read_text(encoding="utf-8"))) == seeds
    for other in ROUNDS:
        if other != round_name:
            assert checker_seeds(other) != seeds, other


@pytest.fixture(scope="module")
def fixture_build(tmp_path_factory, harness_built) -> Path:
    """A private build folder with the compiled cores linked in and the SQuAD fixture preprocessed."""
    build = tmp_path_factory.mktemp("build")
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "code.bert.preprocess_data", "--squad_json", str(FIXTURE),
                           "--preprocessed_data_dir", str(build / "preprocessed_data")], cwd=REPO_ROOT,
                          capture_output=True, text=True, env={**os.environ, "MLPERF_BUILD_DIR": str(build)})
    assert done.returncode == 0, done.stderr
    return build


@pytest.mark.slow
@pytest.mark.parametrize(("round_name", "scenario"), CASES)
def test_the_rounds_tools_read_the_pins_logs(fixture_build, tmp_path, round_name, scenario):
    round_core(round_name)
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "code.main", "--action=run", f"--round={round_name}", "--benchmarks=bert-99",
         f"--scenarios={scenario.lower()}", "--backend=oracle", "--test_mode=PerformanceOnly",
         f"--input_data={fixture_build / 'preprocessed_data' / 'squad_tokenized'}",
         "--performance_sample_count_override=10833", *SCENARIO_ARGS[scenario], f"--log_dir={logs}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MLPERF_BUILD_DIR": str(fixture_build)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    test_dir = logs / "CPU" / "bert-99" / scenario
    summary = test_dir / "mlperf_log_summary.txt"
    assert "Result is : VALID" in summary.read_text()

    for test in get_round(round_name).audits_for("bert-99"):
        tools = audit_tools(round_name, test, Benchmark.BERT)
        log = test_dir / verified_log(tools.verification)
        verified = subprocess.run([sys.executable, str(tools.folder / "verify_performance.py"), "-r", str(log), "-t",
                                   str(log)], capture_output=True, text=True, cwd=tmp_path)
        print(f"{round_name} {scenario} {test} ({log.name}): {' | '.join(verified.stdout.strip().splitlines()[-3:])}")
        score = re.search(r"^reference score = (\S+)$", verified.stdout, re.MULTILINE | re.IGNORECASE)
        version = get_round(round_name).loadgen.version
        assert score and float(score.group(1)) > 0, (
            f"{test}'s verify_performance.py read no {scenario} score from LoadGen {version}'s {log.name}:\n"
            f"{verified.stdout}{verified.stderr}")
        assert "TEST PASS" in verified.stdout, verified.stdout + verified.stderr

    logged = read_detail_log(test_dir)
    assert {name: logged[f"effective_{name}"] for name in checker_seeds(round_name)} == checker_seeds(round_name)
    assert logged["_errors"] == []
