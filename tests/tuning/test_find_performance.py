"""Find performance (code/tuning/search.py, code/tuning/find_performance.py) with fake runners: the Server
bisection, the probe -> expected value arithmetic, what is refused, what a Server search that finds nothing says,
and what a Ctrl-C keeps. The slow test runs ``--find_performance`` for real on the tiny CPU BERT."""

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from code.common import paths
from code.common.constants import Benchmark, ExitCode, Scenario
from code.common.loadgen_rules import offline_query_samples
from code.common.paths import REPO_ROOT
from code.common.supervision import Interrupted
from code.config import tuned
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.main import main
from code.mlperf.arguments import ArgumentError, parse_run_args
from code.mlperf.run_logs import TestResult
from code.mlperf.user_conf import (
    loaded_samples,
    qsl_performance_sample_count,
    user_conf_entries,
    write_user_conf,
)
from code.report.pages import write_run_report
from code.submission.runs import find_tests
from code.submission.stage import StageError, stage
from code.tuning import find_performance as fp
from code.tuning import search


@dataclass
class Outcome:
    valid: bool | None
    value: float | None
    reasons: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ Server search


def fake_server(limit: float, calls: list):
    def run_try(qps):
        calls.append(qps)
        ok = qps <= limit
        return search.judge_server_try(qps, Outcome(ok, qps, [] if ok else ["latency constraint not met"],
                                                    {"result_completed_samples_per_sec": qps}))
    return run_try


@pytest.mark.parametrize("start", [10.0, 40.0, 300.0])
def test_server_search_finds_the_highest_valid_rate_within_its_tolerance(start):
    calls = []
    result = search.search_server_qps(fake_server(37.0, calls), start, max_runs=20, down_step=2.0)
    assert result.best_qps is not None and 37.0 * (1 - search.SERVER_TOLERANCE) <= result.best_qps <= 37.0
    assert "bracketed within 5%" in result.stopped_because and result.best_try().valid
    assert all(t.valid == (t.target_qps <= 37.0) for t in result.tries)


def test_server_search_goes_down_by_half_until_valid():
    calls = []
    search.search_server_qps(fake_server(10.0, calls), 100.0, max_runs=3, down_step=2.0)
    assert calls == [100.0, 50.0, 25.0]


def test_a_try_whose_queue_grew_is_not_valid():
    grew = search.judge_server_try(40.0, Outcome(True, 39.75, [], {"result_completed_samples_per_sec": 34.1}))
    assert grew.valid is False and grew.reasons[0].startswith("not sustained: completed 34.1 samples/s")
    held = search.judge_server_try(40.0, Outcome(True, 39.75, [], {"result_completed_samples_per_sec": 39.0,
                                                                   "result_99.00_percentile_latency_ns": 2e6}))
    assert held.valid and held.p99_ms == 2.0


def test_a_try_invalid_only_for_early_stopping_was_too_short_and_stops_the_search():
    short = search.judge_server_try(5.0, Outcome(False, 5.0, ["early stopping not met"]))
    assert short.valid is None and "--min_query_count" in short.reasons[-1]
    late = search.judge_server_try(5.0, Outcome(False, 5.0, ["early stopping not met", "latency constraint not met"]))
    assert late.valid is False


def test_a_search_with_nothing_valid_names_the_lowest_rate_tried():
    result = search.search_server_qps(lambda q: search.ServerTry(q, False, ["latency constraint not met"]), 64.0,
                                      max_runs=4, down_step=2.0)
    assert result.best_qps is None and min(t.target_qps for t in result.tries) == 8.0
    line = result.nothing_valid()
    assert "not even the lowest tried, 8 QPS (latency constraint not met)" in line and "used all 4 runs" in line
    floored = search.search_server_qps(lambda q: search.ServerTry(q, False, ["x"]), 4.0, max_runs=9, floor_qps=1.5)
    assert [t.target_qps for t in floored.tries] == [4.0, 3.2, 2.56, 2.05, 1.64] and "below" in floored.stopped_because


def test_a_crashed_try_ends_the_search():
    result = search.search_server_qps(lambda q: search.ServerTry(q, None, ["the test process failed"]), 10.0)
    assert len(result.tries) == 1 and "a try failed at 10 QPS" in result.stopped_because


# ------------------------------------------------------------------------------------- Offline and SingleStream


def fake_offline(rate: float, calls: list, slow_after_probe: float | None = None):
    """A system doing ``rate`` samples/s (``slow_after_probe`` in longer runs); too low an expected QPS ends the
    run early (INVALID), as LoadGen does."""
    def run(label, fields):
        calls.append((label, dict(fields)))
        actual = rate if label == "probe" or slow_after_probe is None else slow_after_probe
        expected = fields.get("offline_expected_qps")
        early = expected is None or expected * 1.1 < actual
        return Outcome(not early, actual, ["min duration not met"] if early else [])
    return run


def test_offline_expected_qps_is_the_probe_times_1_1_then_confirmed():
    calls = []
    measured = search.measure_offline(fake_offline(10.2, calls), 5000, 60000)
    assert [label for label, _ in calls] == ["probe", "confirm"]
    assert calls[0][1] == {"min_duration": 5000} and calls[1][1] == {"min_duration": 60000,
                                                                    "offline_expected_qps": 11.2}
    assert measured.valid and measured.value == 11.2 and measured.probe_value == 10.2
    assert search.offline_expected_qps(10.2) == 11.2 and search.offline_expected_qps(9123.4) == 10036.0


def test_offline_repeats_at_1_1x_while_the_run_still_ends_early():
    calls = []
    measured = search.measure_offline(fake_offline(100.0, calls), 5000, 60000, hint_qps=50.0)
    assert [label for label, _ in calls] == ["confirm", "rerun1"]
    assert calls[1][1]["offline_expected_qps"] == 110.0 and measured.valid and measured.value == 110.0


def test_offline_lowers_once_when_the_probe_was_far_too_fast():
    calls = []
    measured = search.measure_offline(fake_offline(500.0, calls, slow_after_probe=150.0), 2000, 60000)
    assert [label for label, _ in calls] == ["probe", "confirm", "rerun1"]
    assert measured.valid and measured.value == 165.0


def test_offline_keeps_nothing_when_no_run_is_valid():
    calls = []
    measured = search.measure_offline(lambda label, f: calls.append(label) or Outcome(None, None, ["crashed"]),
                                      5000, 60000)
    assert calls == ["probe"] and not measured.valid and "the probe try did not finish (crashed)" in measured.why_not()


def test_singlestream_expected_latency_is_0_9_of_the_probe_mean_and_halves_when_early():
    calls = []

    def run(label, fields):
        calls.append((label, dict(fields)))
        expected = fields.get("single_stream_expected_latency_ns")
        early = expected is None or expected > 100e6 or label == "confirm"
        return Outcome(not early, 100.0, ["min duration not met"] if early else [],
                       {"result_mean_latency_ns": 100e6})

    measured = search.measure_singlestream(run, 5000, 60000)
    assert [label for label, _ in calls] == ["probe", "confirm", "rerun1"]
    assert calls[1][1]["single_stream_expected_latency_ns"] == 90_000_000
    assert calls[2][1]["single_stream_expected_latency_ns"] == 45_000_000 and measured.value == 45_000_000


# ------------------------------------------------------------------------------------------- bad input, storing


def test_find_performance_with_an_accuracy_run_is_refused_naming_the_fix(capsys):
    with pytest.raises(ArgumentError, match="drop --test_mode"):
        parse_run_args(["--find_performance", "--test_mode=AccuracyOnly"])
    with pytest.raises(ArgumentError, match="make run or make find_performance"):
        parse_run_args(["--action=info", "--find_performance"])
    assert parse_run_args(["--find_performance"]).find_performance
    with pytest.raises(ArgumentError, match="runs on every GPU: drop --devices=0"):
        parse_run_args(["--find_performance", "--devices=0"])
    with pytest.raises(ArgumentError, match="runs on every GPU: drop --device=cuda:1"):
        parse_run_args(["--find_performance", "--device=cuda:1"])
    assert parse_run_args(["--find_performance", "--device=cuda"]).find_performance
    assert main(["--find_performance", "--test_mode=AccuracyOnly"]) == ExitCode.BAD_INPUT
    assert "ERROR: --find_performance measures performance" in capsys.readouterr().err


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tuned, "code_version", lambda: "v-test")
    monkeypatch.setattr(tuned, "system_id", lambda: "Test CPU")
    return tmp_path / "tuned"


class FakeRunner:
    """Stands in for find_performance.Runner: the system answers from ``answer(label, fields) -> Outcome``."""

    def __init__(self, answer) -> None:
        self.system, self.answer, self.log_dirs, self.calls = "CPU", answer, [], []

    def __call__(self, label, fields):
        self.calls.append((label, fields))
        self.log_dirs.append(f"/logs/{len(self.calls):02d}-{label}")
        outcome = self.answer(label, fields)
        return fp.Try(label, outcome.valid, outcome.value, outcome.reasons, outcome.extra, self.log_dirs[-1])


def _config(scenario):
    return resolve_config(Benchmark.BERT, scenario, "CPU", WorkloadSetting(), {})


def test_an_offline_search_stores_its_value_with_how_it_was_found(store):
    runner = FakeRunner(fake_offline(10.2, []))
    found = fp.search_one(runner, _config(Scenario.Offline), {}, 60000, 10000, [])
    assert found.stored and found.value == 11.2 and found.before == 6.0
    (record,) = json.loads((store / "CPU" / "bert-99" / "Offline.json").read_text())["values"]
    assert record["value"] == 11.2 and "probe 10.2 samples/s over 10 s" in record["how"]
    assert runner.calls[0][1]["min_query_count"] == 1 and runner.calls[1][1]["min_duration"] == 60000
    assert "offline_expected_qps 6 -> 11.2" in found.line()
    # The Server search then starts from it: 0.8 x the measured rate.
    assert fp.server_start(_config(Scenario.Server), [found]) == pytest.approx(0.8 * 10.2, rel=0.01)


def test_a_server_search_that_finds_nothing_says_so_and_stores_nothing(store):
    runner = FakeRunner(lambda label, fields: Outcome(False, fields["server_target_qps"],
                                                      ["latency constraint not met"]))
    found = fp.search_one(runner, _config(Scenario.Server), {"server_target_qps": 20.0}, 60000, 10000, [])
    assert found.stored is None and not (store / "CPU" / "bert-99" / "Server.json").exists()
    assert "no Server rate was VALID, not even the lowest tried, 1.25 QPS (latency constraint not met)" \
        in found.problem  # 20, 10, 5, 2.5, 1.25; then 0.625 QPS would take 1,600 s for its 1,000 queries
    assert "below the lowest worth trying (1.11 QPS)" in found.problem
    assert "NOT STORED" in found.line() and "--server_target_qps=<rate>" in found.line()
    assert all(fields["min_query_count"] == search.SERVER_MIN_QUERIES for _, fields in runner.calls)


def test_a_read_only_store_refuses_before_measuring(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(paths, "TUNED_DIR", blocker / "tuned")
    monkeypatch.setattr(fp, "search_one", lambda *a: pytest.fail("measured although nothing could be stored"))
    request = parse_run_args(["--find_performance", "--system_name=CPU", "--input_data=synthetic",
                              "--weights=random", f"--log_dir={tmp_path / 'logs'}"])
    assert fp.find_performance(request) == ExitCode.TEST_FAILED
    out = capsys.readouterr().out
    assert "ERROR: cannot write tuned values" in out and "nothing was measured" in out
    assert not (tmp_path / "logs").exists()


def test_ctrl_c_during_a_search_keeps_what_was_found(store, tmp_path, monkeypatch, capsys):
    def fake_search(runner, config, overrides, duration_ms, probe_ms, earlier):
        if config.scenario is Scenario.Offline:
            found = fp.Found("bert-99", "Offline", "offline_expected_qps", 6.0, "CPU", value=11.2, how="probe")
            found.stored = str(tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe"))
            return found
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(fp, "search_one", fake_search)
    request = parse_run_args(["--find_performance", "--system_name=CPU", "--scenarios=offline,server",
                              "--input_data=synthetic", "--weights=random", f"--log_dir={tmp_path / 'logs'}"])
    assert fp.find_performance(request) == 128 + signal.SIGINT
    out = capsys.readouterr().out
    assert "interrupted by SIGINT during find_performance (bert-99 Server)" in out
    assert "kept what was found before: bert-99 Offline" in out and "not searched (interrupted)" in out
    assert (store / "CPU" / "bert-99" / "Offline.json").is_file()
    assert not (store / "CPU" / "bert-99" / "Server.json").exists()
    assert "offline_expected_qps 6 -> 11.2" in (tmp_path / "logs" / "find_performance.txt").read_text()


def test_notes_of_a_tuned_or_probed_test(store):
    config = _config(Scenario.Offline)
    assert fp.tuned_note(config) is None
    assert fp.needs_probe(resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(),
                                         {"test_run": True}), fp.TestMode.PerformanceOnly)
    assert not fp.needs_probe(config, fp.TestMode.PerformanceOnly)  # not a --test_run
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe")
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(), {"test_run": True})
    assert fp.tuned_note(config).startswith("offline_expected_qps 6 -> 11.2 (tuned (")
    assert not fp.needs_probe(config, fp.TestMode.PerformanceOnly)  # a stored value needs no probe


# ---------------------------------------------------------------------------------------------------- for real

TINY = ["--model_name=tiny", "--device=cpu", "--precision=fp32", "--synthetic_sample_count=256",
        "--input_data=synthetic", "--weights=random"]


@pytest.mark.slow
def test_find_performance_then_a_run_that_uses_it(harness_built, tmp_path):
    env = {**os.environ, "MLPERF_TUNED_DIR": str(tmp_path / "tuned"), "PYTHONUNBUFFERED": "1"}
    # Offline and SingleStream: the Server search needs hundreds of queries a try (its fake-runner tests above).
    command = [sys.executable, "-m", "code.main", "--action=run", "--benchmarks=bert",
               "--scenarios=offline,singlestream", *TINY, "--min_duration=3000", "--min_query_count=64"]
    done = subprocess.run([*command, "--find_performance", f"--log_dir={tmp_path / 'find'}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Find performance" in done.stdout and "Traceback" not in done.stderr
    for scenario in ("Offline", "SingleStream"):
        (record,) = json.loads((tmp_path / "tuned" / "CPU" / "bert-99" / f"{scenario}.json").read_text())["values"]
        assert record["value"] > 0 and record["system"] == "CPU"
    run = subprocess.run([*command[:4], "--scenarios=offline", *TINY, "--test_run", "--min_duration=3000",
                          f"--log_dir={tmp_path / 'run'}"], cwd=REPO_ROOT, capture_output=True, text=True, env=env,
                         timeout=300)
    assert "tuned: offline_expected_qps 6 -> " in run.stdout, run.stdout[-3000:]
    (stored,) = (record["value"] for record in json.loads(
        (tmp_path / "tuned" / "CPU" / "bert-99" / "Offline.json").read_text())["values"])
    test_dir = tmp_path / "run" / "CPU" / "bert-99" / "Offline"
    assert f"bert.Offline.target_qps = {float(stored)!r}" in (test_dir / "user.conf").read_text(), "the stored value"
    if run.returncode != 0:
        # A value tuned while other jobs loaded the machine is too low once they end: the run then outpaces the query
        # LoadGen planned. Only that may end it INVALID, and only when it ran faster than the stored rate.
        result = json.loads((test_dir / "metadata.json").read_text())["result"]
        assert run.returncode == 3 and result["invalid_reasons"][0] == "min duration not met", run.stdout[-3000:]
        assert result["value"] > stored, (result["value"], stored)
    else:
        assert "[VALID but not submittable]" in run.stdout
    # The tries are steps of the search, not tests: staging, make results and the run page see no test in its folder
    # (its <system>/<bench>/<Scenario>/<try> would read as a system "bert-99"), and the run's test beside it only.
    assert vars(find_tests([tmp_path / "find"])) == {"tests": [], "unfinished": [], "unreadable": {}}
    with pytest.raises(StageError, match=f"no finished runs in {tmp_path / 'find'}: run the tests first"):
        stage("MyOrg", logs=[tmp_path / "find"], out_dir=tmp_path / "submission", work_dir=tmp_path / "work")
    staged = stage("MyOrg", logs=[tmp_path / "find", tmp_path / "run"], out_dir=tmp_path / "submission",
                   work_dir=tmp_path / "work")
    assert staged.system == "CPU" and not (tmp_path / "submission").exists()  # not submittable: nothing written
    assert not [p for p in staged.problems if str(tmp_path / "find") in p], staged.problems
    assert "No test of the run itself: only the steps below." in write_run_report(tmp_path / "find").read_text()


@pytest.mark.slow
def test_a_test_run_without_a_tuned_value_probes_first(harness_built, tmp_path):
    env = {**os.environ, "MLPERF_TUNED_DIR": str(tmp_path / "tuned"), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run", "--benchmarks=bert",
                           "--scenarios=offline", *TINY, "--test_run", "--min_duration=4000",
                           f"--log_dir={tmp_path / 'run'}"], cwd=REPO_ROOT, capture_output=True, text=True, env=env,
                          timeout=300)
    assert "tuned: offline_expected_qps 6 -> " in done.stdout and "(probe: " in done.stdout, done.stdout[-3000:]
    assert (tmp_path / "run" / "probes" / "CPU" / "bert-99" / "Offline" / "metadata.json").is_file()
    test_dir, probe_dir = tmp_path / "run" / "CPU" / "bert-99" / "Offline", tmp_path / "run" / "probes" / "CPU" / \
        "bert-99" / "Offline"
    metadata = json.loads((test_dir / "metadata.json").read_text())
    assert metadata["tuning"].startswith("offline_expected_qps 6 -> ")
    assert metadata["config"]["sources"]["offline_expected_qps"] == "probe"  # measured, not given in RUN_ARGS
    assert re.search(r"\(probe: [0-9.e+]+ samples/s, [0-9]+ samples in [0-9.]+ s", metadata["tuning"])
    titles = [(folder / "report.md").read_text().splitlines()[0] for folder in (test_dir, probe_dir)]
    assert titles == ["# CPU bert-99 Offline PerformanceOnly", "# CPU bert-99 Offline PerformanceOnly (probe)"]
    if done.returncode != 0:
        # Other jobs on a shared machine can change its rate past any margin between the probe and the test: then
        # the test ran once more with a larger query, and only a query that still ended early may leave it INVALID.
        assert done.returncode == 3 and "re-ran once at offline_expected_qps" in metadata["tuning"], done.stdout
        assert metadata["result"]["invalid_reasons"][0] == "min duration not met"
        assert "its query ended before the minimum duration; next: make run" in done.stdout
    assert not (tmp_path / "tuned").exists()  # a probe stores nothing: only make find_performance does
    # The probes are steps of the test, not tests: staging and make results see the test alone.
    found = find_tests([tmp_path / "run"])
    assert [test.directory for test in found.tests] == [test_dir] and not found.unfinished
    staged = stage("MyOrg", logs=[tmp_path / "run"], out_dir=tmp_path / "submission", work_dir=tmp_path / "work")
    assert not [p for p in staged.problems if "/probes/" in p or "Offline-" in p], staged.problems


def test_a_probe_whose_process_failed_stands_for_the_test(monkeypatch, tmp_path):
    from code.mlperf.run_logs import TestResult

    failed = TestResult("Offline", "PerformanceOnly", str(tmp_path), valid=None,
                        invalid_reasons=["weights.safetensors is truncated or corrupt"])
    monkeypatch.setattr(fp, "run_child", lambda spec, folder: (failed, {}))
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(), {"test_run": True})
    probe = fp.probe_setting("CPU", config, {"test_run": True}, tmp_path / "probe")
    assert probe.failed is failed and probe.note is None
    assert failed.invalid_reasons[0] == "the probe before the test failed"


class FakeMachine:
    """Stands in for a probe's or test's child process: a machine that runs ``rate`` samples/s in batches of
    ``batch`` (a partial batch takes a full one's time) after ``start_s`` of start-up; it answers run_child and
    query_of as LoadGen's logs would."""

    def __init__(self, rate: float, batch: int = 8, start_s: float = 0.0, min_ms: int = 10_000,
                 devices: int = 1) -> None:
        """``rate``: samples/s of each of ``devices`` devices; a query's batches go to the devices in rounds."""
        self.rate, self.batch, self.start_s, self.min_ms, self.devices = rate, batch, start_s, min_ms, devices
        self.queries: dict[str, tuple[int, float]] = {}
        self.specs: list[dict] = []

    def run_child(self, spec, folder):
        from code.common.loadgen_rules import offline_query_samples
        from code.mlperf.run_logs import TestResult

        self.specs.append(spec)
        overrides = spec["overrides"]
        duration_ms = overrides.get("min_duration", self.min_ms)
        samples = max(1, offline_query_samples(overrides["offline_expected_qps"], duration_ms))
        rounds = -(-samples // (self.batch * self.devices))  # a partial round takes a full one's time
        seconds = self.start_s + rounds * self.batch / self.rate
        self.queries[str(folder)] = (samples, seconds)
        short = seconds * 1000 < duration_ms
        return TestResult("Offline", "PerformanceOnly", str(folder), metric="samples_per_second",
                          value=samples / seconds, unit="samples/s", valid=not short,
                          invalid_reasons=["min duration not met", "Increase expected QPS so the loadgen "
                                           "pre-generates a larger (coalesced) query. "] if short else []), {}

    def query_of(self, folder):
        return self.queries[str(folder)]


@pytest.fixture
def machine(monkeypatch):
    def make(*args, **kwargs):
        fake = FakeMachine(*args, **kwargs)
        monkeypatch.setattr(fp, "run_child", fake.run_child)
        monkeypatch.setattr(fp, "query_of", fake.query_of)
        return fake
    return make


def probed(tmp_path, overrides=None):
    overrides = {"test_run": True, **(overrides or {})}
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", WorkloadSetting(), overrides)
    return config, fp.probe_setting("CPU", config, overrides, tmp_path / "probe")


@pytest.mark.parametrize("rate", [0.1, 0.8, 2.0, 50.0, 5000.0])
def test_the_probe_is_bounded_in_time_whatever_the_configs_rate(machine, tmp_path, rate):
    fake = machine(rate, batch=8, start_s=0.5)
    _, probe = probed(tmp_path)
    queries = list(fake.queries.values())
    assert queries[0][0] == 8  # one batch first, not the config's 6 samples/s x 11 s = 66
    one_batch_s = 0.5 + 8 / rate
    assert all(seconds <= max(one_batch_s, 1.1 * fp.PROBE_MS / 1000) for _, seconds in queries), queries
    # each query at most PROBE_GROWTH x the last (and 3 significant digits of expected QPS more)
    assert all(later[0] <= 1.01 * search.PROBE_GROWTH * earlier[0]
               for earlier, later in zip(queries, queries[1:], strict=False))
    samples, seconds = queries[-1]
    # the note gives the real duration of the query whose rate it took
    assert f"{samples} samples in {seconds:.3g} s" in probe.note
    assert all(spec["role"] == "probe" for spec in fake.specs)


def test_the_probe_of_a_slow_machine_runs_one_batch(machine, tmp_path):
    # the issue's machine: bf16 emulated, one batch of 8 takes ~80 s; the config's rate planned 66 samples
    machine(0.1, batch=8)
    _, probe = probed(tmp_path)
    assert probe.note == ("offline_expected_qps 6 -> 0.25 (probe: 0.1 samples/s, 8 samples in 80 s; the test's "
                          "query: 16 samples, ~160 s at 0.1 samples/s)")


@pytest.mark.parametrize("rate,batch,start_s", [(0.1, 8, 0.0), (0.068, 8, 0.0), (0.5, 8, 3.0), (3.0, 8, 1.0),
                                                (40.0, 64, 2.0), (1000.0, 8, 0.3), (20000.0, 512, 1.0)])
def test_a_probed_test_run_ends_valid_on_slow_and_fast_machines(machine, tmp_path, rate, batch, start_s):
    fake = machine(rate, batch=batch, start_s=start_s)
    _, probe = probed(tmp_path, {"gpu_batch_size": batch})
    fake.min_ms = 60_000
    result, _ = fake.run_child({"overrides": {**probe.fields, "min_duration": 60_000}}, tmp_path / "test")
    assert result.valid, (probe.note, fake.queries)


def test_a_probe_on_four_devices_gives_each_a_batch_and_measures_all_four(machine, tmp_path):
    # four workers of 8-sample batches at 2 samples/s each: a first query of one batch would read one device's rate
    fake = machine(2.0, batch=8, devices=4)
    _, probe = probed(tmp_path, {"cpu_workers": 4, "gpu_batch_size": 8})
    queries = list(fake.queries.values())
    assert queries[0][0] == 32, queries  # a batch on each device
    samples, seconds = queries[-1]
    assert samples / seconds == pytest.approx(8.0), queries  # the four devices' rate, not one's
    fake.min_ms = 60_000
    result, _ = fake.run_child({"overrides": {**probe.fields, "min_duration": 60_000}}, tmp_path / "test")
    assert result.valid, (probe.note, fake.queries)  # the test ran once, VALID


def test_two_probes_give_the_rate_past_start_up():
    assert search.sustained_rate([(64, 3.6), (128, 5.2)]) == 40.0  # 2 s of start-up in each: 40 samples/s
    assert search.sustained_rate([(64, 3.6)]) is None
    assert search.sustained_rate([(64, 3.6), (128, 3.6)]) is None


def test_a_test_whose_query_still_ended_early_runs_once_more_with_a_larger_one(machine, tmp_path, monkeypatch):
    fake = machine(0.1, batch=8)
    config, probe = probed(tmp_path)
    # a machine that sped up after the probe (another job ended): 16 samples in 40 s
    fake.queries[str(tmp_path / "test")] = (16, 40.0)
    result = TestResult("Offline", "PerformanceOnly", str(tmp_path / "test"), value=0.4, valid=False,
                        invalid_reasons=["min duration not met"])
    monkeypatch.setattr(fp, "read_detail_log", lambda folder: {"effective_min_duration_ms": 60000})
    rerun = fp.rerun_setting(config, probe, result)
    # 16 samples x 60 / 40 x 2 = 48, in whole batches
    assert rerun.fields == {"offline_expected_qps": search.qps_for_query(48, 60_000)}
    assert rerun.note.endswith("re-ran once at offline_expected_qps 0.735: the first query, 16 samples, ended after "
                               "40 s, short of the 60 s minimum; this one holds 48")
    valid = TestResult("Offline", "PerformanceOnly", str(tmp_path / "test"), value=0.1, valid=True)
    assert fp.rerun_setting(config, probe, valid) is None
    assert fp.rerun_setting(config, fp.Probe(), result) is None  # not probed: the user's own setting stands


def test_the_next_command_keeps_the_flags_the_stored_values_hold_for():
    found = [fp.Found("bert-99", "Offline", "offline_expected_qps", 6.0, "CPU", value=11.2, stored="a.json"),
             fp.Found("bert-99", "Server", "server_target_qps", 5.0, "CPU", problem="none VALID")]
    request = parse_run_args(["--find_performance", "--model_name=tiny", "--test_run", "--fast_path=false",
                              "--gpu_batch_size=8", "--round=v4.1", "--min_duration=20000"])
    command = fp.next_run_command(found, request.overrides)
    assert command == ('make run RUN_ARGS="--benchmarks=bert-99 --scenarios=offline --fast_path=false '
                       '--gpu_batch_size=8 --model_name=tiny --round=v4.1"')
    # The command it prints resolves to settings the stored value is read with.
    again = parse_run_args(command.split('"')[1].split())
    assert tuned.run_settings(again.overrides) == tuned.run_settings(request.overrides)


def test_an_equal_issue_query_is_counted_as_loadgen_pads_it():
    assert [search.equal_issue_samples(n, 64) for n in (168, 192, 1, 64)] == [192, 192, 64, 64]
    assert search.equal_issue_samples(168, 0) == 168


def test_the_probe_note_of_an_equal_issue_benchmark_says_the_query_loadgen_runs(machine, tmp_path, monkeypatch):
    # GPT-J's mlperf.conf sets sample_concatenate_permutation: LoadGen pads the Offline query to a multiple of the
    # loaded samples, so the summary says the samples that run, not the ones planned.
    machine(0.1, batch=8)
    # the probe loaded only its own query; the test loads the data set the QSL reports
    monkeypatch.setattr(fp, "read_detail_log", lambda folder: {"effective_sample_concatenate_permutation": True,
                                                               "effective_performance_sample_count": 16,
                                                               "qsl_reported_total_count": 64})
    _, probe = probed(tmp_path)
    assert probe.note.endswith("the test's query: 64 samples (16 planned, padded by LoadGen to a multiple of the 64 "
                               "loaded samples), ~640 s at 0.1 samples/s)")


@pytest.mark.parametrize("rate", [0.05, 4.0, 500.0])
def test_a_gptj_probe_loads_only_its_query_so_loadgen_cannot_pad_it(machine, tmp_path, rate):
    # GPT-J's mlperf.conf sets sample_concatenate_permutation: LoadGen pads an Offline query to a multiple of the
    # loaded samples (64 in the test run's set, 13,368 in the real one). A probe that loaded them all would run at
    # least that many, however slow the machine; each probe loads only the query LoadGen plans for it.
    from code.processes.test_process import resolve_from_spec

    fake = machine(rate, batch=16)
    overrides = {"test_run": True}
    config = resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", WorkloadSetting(), overrides)
    fp.probe_setting("CPU", config, overrides, tmp_path / "probe")
    assert fake.specs
    for spec in fake.specs:
        for data_set in (64, 13368):
            # the user.conf the probe's child writes (run_single_test), as LoadGen reads it
            path = write_user_conf(resolve_from_spec(spec), data_set, tmp_path, probe_samples=spec["probe_samples"])
            entries = dict(line.removeprefix("gptj.Offline.").split(" = ") for line in path.read_text().splitlines()
                           if not line.startswith("#"))
            planned = offline_query_samples(float(entries["target_qps"]), int(entries["min_duration"]))
            assert int(entries["min_query_count"]) == 1  # not mlperf.conf's 13,368 for GPT-J Offline
            loaded = int(entries["performance_sample_count_override"])
            assert planned == spec["probe_samples"] == loaded or planned > data_set == loaded
            if planned <= data_set:  # the query LoadGen issues: the one planned, never the whole loaded set
                assert search.equal_issue_samples(planned, loaded) == planned


def test_only_a_probe_loads_fewer_samples_than_the_data_set():
    config = resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", WorkloadSetting(), {"test_run": True})
    assert user_conf_entries(config, 64)["performance_sample_count_override"] == "64"
    assert "performance_sample_count_override" not in user_conf_entries(config, 13368)  # mlperf.conf's
    assert user_conf_entries(config, 13368, probe_samples=16)["performance_sample_count_override"] == "16"
    assert user_conf_entries(config, 64, probe_samples=100)["performance_sample_count_override"] == "64"
    assert loaded_samples(config, 13368) == 13368 and loaded_samples(config, 64) == 64


def test_a_gptj_singlestream_probe_loads_a_few_samples_so_loadgen_cannot_pad_it(monkeypatch, tmp_path):
    # In equal-issue mode LoadGen rounds a SingleStream query count up to a multiple of the loaded samples: the
    # probe loads SINGLESTREAM_PROBE_SAMPLES, so it ends within that many latencies of its duration.
    from code.processes.test_process import resolve_from_spec

    specs = []
    failed = TestResult("SingleStream", "PerformanceOnly", str(tmp_path), valid=None, invalid_reasons=["stop here"])
    monkeypatch.setattr(fp, "run_child", lambda spec, folder: (specs.append(spec), (failed, {}))[1])
    overrides = {"test_run": True}
    config = resolve_config(Benchmark.GPTJ, Scenario.SingleStream, "CPU", WorkloadSetting(), overrides)
    fp.probe_setting("CPU", config, overrides, tmp_path / "probe")
    (spec,) = specs
    assert spec["probe_samples"] == fp.SINGLESTREAM_PROBE_SAMPLES
    path = write_user_conf(resolve_from_spec(spec), 13368, tmp_path, probe_samples=spec["probe_samples"])
    entries = dict(line.removeprefix("gptj.SingleStream.").split(" = ") for line in path.read_text().splitlines()
                   if not line.startswith("#"))
    assert entries["performance_sample_count_override"] == str(fp.SINGLESTREAM_PROBE_SAMPLES)
    assert int(entries["min_query_count"]) == 1
    # and its QSL reports those samples, the count LoadGen pads a SingleStream query count to a multiple of
    assert qsl_performance_sample_count(resolve_from_spec(spec), 13368, probe_samples=spec["probe_samples"]) == 16


@pytest.mark.parametrize("benchmark", [Benchmark.GPTJ, Benchmark.LLAMA31])
def test_the_qsl_reports_the_samples_a_test_loads(benchmark):
    # an H200's config: the data set at its real size (the CPU's synthetic set is 64 samples)
    short = resolve_config(benchmark, Scenario.SingleStream, "H200_SXM_141GBx1", WorkloadSetting(), {"test_run": True})
    loads = int(user_conf_entries(short, 13368)["performance_sample_count_override"])
    assert 1 <= loads < 13368 and qsl_performance_sample_count(short, 13368) == loads
    full = resolve_config(benchmark, Scenario.SingleStream, "H200_SXM_141GBx1", WorkloadSetting(), {})
    assert qsl_performance_sample_count(full, 13368) == 13368  # a real test: the whole set, as mlperf.conf says
