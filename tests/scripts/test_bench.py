"""The bench (scripts/bench/, ``make bench``): the Server search, the Offline probe, figures and reports
with fakes; the HF baseline on the CPU; one tiny bench through the harness. Also the GPU checks' step runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.constants import Scenario
from code.common.paths import LIB_DIR, REPO_ROOT
from scripts.bench.baseline import measure_baseline, measure_gptj_baseline
from scripts.bench.cli import new_bench_dir, split_extra_run_args
from scripts.bench.report import build_figures, format_table, write_reports
from scripts.bench.runs import OfflineResult, RunOutcome, measure_offline, merge_flags
from scripts.bench.server_search import ServerTry, search_server_qps, unsustained_reason
from scripts.bench.settings import BenchError


def test_server_search_brackets_then_bisects():
    limit = 5000.0

    def fake(qps):
        return ServerTry(qps, qps <= limit, [] if qps <= limit else ["latency constraint not met"], p99_ms=1.0)

    search = search_server_qps(fake, start_qps=4000, max_runs=10, tolerance=0.03)
    assert search.best_qps is not None and limit * 0.97 <= search.best_qps <= limit
    assert [t.target_qps for t in search.tries][:3] == [4000, 5000, 6250]  # up by 1.25 until INVALID
    assert "bracketed" in search.stopped_because and search.best_try().valid

    down = search_server_qps(fake, start_qps=9000, max_runs=10)
    assert down.tries[0].valid is False and down.tries[1].target_qps == 7200 and down.best_qps <= limit

    capped = search_server_qps(fake, start_qps=4000, max_runs=2)
    assert len(capped.tries) == 2 and capped.best_qps == 5000 and "used all 2 runs" in capped.stopped_because


def test_a_server_try_whose_queue_grew_does_not_count_as_valid():
    # An H200 GPT-J try of 30 s: LoadGen said VALID at 39.75 QPS scheduled while 34.1 samples/s completed.
    reason = unsustained_reason(39.75, 34.1)
    assert reason is not None and reason.startswith("not sustained: completed 34.1 samples/s of 39.75 scheduled")
    assert unsustained_reason(33.94, 33.77) is None  # the 360 s run that held
    assert unsustained_reason(None, 10.0) is None and unsustained_reason(10.0, None) is None


def test_server_search_stops_on_a_crash_and_without_valid_runs():
    crashed = search_server_qps(lambda qps: ServerTry(qps, None, ["the test process failed"]), 100.0)
    assert len(crashed.tries) == 1 and crashed.best_qps is None and "failed" in crashed.stopped_because
    never = search_server_qps(lambda qps: ServerTry(qps, False, ["early stopping not met"]), 100.0, max_runs=3)
    assert never.best_qps is None and [t.target_qps for t in never.tries] == [100, 80, 64]


class FakeRunner:
    """Stands in for HarnessRunner: Offline throughput is fixed; too low an expected QPS misses min duration."""

    def __init__(self, throughput: float) -> None:
        self.throughput = throughput
        self.calls: list[tuple[str, dict]] = []

    def run(self, label, benchmark, scenario, settings):
        self.calls.append((label, dict(settings)))
        expected = settings.get("offline_expected_qps")
        short = expected is not None and expected < self.throughput
        probe = expected is None
        return RunOutcome(
            label,
            benchmark,
            scenario.value,
            "cmd",
            f"/logs/{label}",
            "t.log",
            0,
            1.0,
            valid=not short and not probe,
            value=self.throughput,
            unit="samples/s",
            reasons=["min duration not met"] if short or probe else [],
            mean_length=166.0,
        )


def test_offline_probes_then_runs_above_the_measured_throughput():
    runner = FakeRunner(1000.0)
    result = measure_offline(runner, "bert-99", "dataset", 20000, 5000, None, {})
    assert [label for label, _ in runner.calls] == ["dataset-probe", "dataset"]
    assert runner.calls[0][1]["min_duration"] == 5000 and runner.calls[1][1]["offline_expected_qps"] == 1100.0
    assert result.run.valid and result.tokens_per_second == pytest.approx(166000.0)


def test_offline_reruns_once_when_the_hint_was_low():
    runner = FakeRunner(1000.0)
    result = measure_offline(runner, "bert-99", "max", 20000, 5000, 500.0, {})
    assert [label for label, _ in runner.calls] == ["max", "max-rerun"]
    assert runner.calls[1][1]["offline_expected_qps"] == 1100.0 and result.run.valid
    assert runner.calls[0][1]["synthetic_lengths"] == "max"


def test_extra_run_args_hints_and_refusals():
    passed, hints = split_extra_run_args("--gpu_batch_size=512 --server_target_qps=7000")
    assert passed == ["--gpu_batch_size=512"] and hints == {"server_target_qps": "7000"}
    with pytest.raises(BenchError, match="--min_duration_ms"):
        split_extra_run_args("--min_duration=1000")


def _outcome(value, valid=True, unit="samples/s", **extra):
    return RunOutcome(
        "x",
        "bert-99",
        "Offline",
        "cmd",
        "/logs/01-x",
        "t.log",
        0,
        12.0,
        valid=valid,
        value=value,
        unit=unit,
        mean_length=166.0,
        extra=extra,
    )


def test_figures_table_and_reports(tmp_path):
    baseline = {"samples_per_second": 100.0, "p90_latency_ms": 10.0, "device": "cuda", "label": "HF BERT", "what": "x"}
    server = search_server_qps(lambda q: ServerTry(q, q <= 8000, p99_ms=50.0), 7600, max_runs=3)
    figures = build_figures(
        "bert-99",
        [OfflineResult("bert-99", "dataset", _outcome(9500.0)), OfflineResult("bert-99", "max", _outcome(4000.0))],
        server,
        _outcome(1.5, unit="ms"),
        baseline,
    )
    names = [f.name for f in figures]
    assert names[0] == "bert-99 Offline samples/s" and figures[0].ratio == pytest.approx(95.0) and figures[0].meets
    assert names[2] == "bert-99 Offline @384 tokens (worst case) samples/s"
    assert figures[1].value == pytest.approx(9500.0 * 166.0)
    assert figures[2].target is None and figures[2].meets is None  # the worst case has no target
    server_row = next(f for f in figures if "Server" in f.name)
    assert server_row.value == server.best_qps and server_row.meets is True
    single = figures[-1]
    assert single.ratio == pytest.approx(10.0 / 1.5) and single.meets is True and single.target == "<= 1.5 ms"
    missing = build_figures(
        "bert-99.9", [OfflineResult("bert-99.9", "dataset", _outcome(None, valid=None))], None, None, None
    )
    assert missing[0].meets is False and missing[0].ratio is None

    rows = format_table(figures + missing, {"bert": baseline})
    assert rows[0] == ["figure", "value", "VALID", "vs baseline", "target", "meets"] and "baseline" in rows[-1][0]
    report = {
        "date": "today",
        "device": "GPU",
        "versions": {"torch": "2"},
        "durations_text": "Offline 20,000 ms",
        "server_search": {"bert-99": {"stopped_because": "x", "tries": [vars(t) for t in server.tries]}},
        "runs": [{**vars(_outcome(1.0)), "verdict": "VALID"}],
        "baselines": {"bert": baseline},
    }
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    json_path, md_path = write_reports(bench_dir, report, figures, out=tmp_path / "copy")
    payload = json.loads(json_path.read_text())
    assert payload["figures"][0]["value"] == 9500.0 and payload["table"] == format_table(figures, {"bert": baseline})
    text = md_path.read_text()
    assert "| bert-99 Offline samples/s | 9,500 samples/s | yes | x95.00 | >= 9,300 samples/s | yes |" in text
    assert "## Server search, bert-99" in text and (tmp_path / "copy" / "bench.md").is_file()


def _gptj_outcome(value, generated, unit="samples/s", steps=None, **extra):
    return RunOutcome(
        "x", "gptj-99", "Offline", "cmd", "/logs/01-x", "t.log", 0, 60.0, valid=True, value=value, unit=unit,
        mean_length=920.0, generated_per_sample=generated, steps_per_sample=steps, extra=extra,
    )  # fmt: skip


def test_gptj_figures_count_generated_tokens_and_compare_each_case_with_its_baseline():
    baseline = {
        "label": "HF GPT-J",
        "device": "cuda",
        "what": "x",
        "samples_per_second": 0.5,
        "p90_latency_ms": 2500.0,
        "by_case": {
            "forced": {"samples_per_second": 0.5, "p90_latency_ms": 2500.0},
            "full": {"samples_per_second": 0.25, "p90_latency_ms": 4000.0},
        },
    }
    server = search_server_qps(lambda q: ServerTry(q, q <= 44, p99_ms=9000.0, tokens_per_sample=70.0), 40.0, max_runs=3)
    figures = build_figures(
        "gptj-99",
        [
            OfflineResult("gptj-99", "forced", _gptj_outcome(45.0, 70.0, steps=70.0)),
            OfflineResult("gptj-99", "full", _gptj_outcome(30.0, 128.0)),
        ],
        server,
        _gptj_outcome(1800.0, 70.0, unit="ms"),
        baseline,
    )
    by_name = {f.name: f for f in figures}
    forced = by_name["gptj-99 Offline, EOS forced (mean ~70 new tokens) samples/s"]
    assert forced.ratio == pytest.approx(90.0) and forced.target == ">= 42 samples/s" and forced.meets
    full = by_name["gptj-99 Offline, 128 new tokens (worst case) samples/s"]
    assert full.ratio == pytest.approx(120.0) and full.target is None
    assert by_name["gptj-99 Offline, 128 new tokens (worst case) tokens/s"].value == pytest.approx(30.0 * 128)
    forced_tokens = by_name["gptj-99 Offline, EOS forced (mean ~70 new tokens) tokens/s"]
    assert forced_tokens.value == pytest.approx(45.0 * 70)
    # the steps the engine ran beside the tokens it returned (equal here: forced lengths; with real weights beam
    # search may search past the answer)
    assert forced_tokens.note == "x mean 70.0 generated tokens (70.0 decode steps a sample)"
    assert by_name["gptj-99 Offline, 128 new tokens (worst case) tokens/s"].note == "x mean 128.0 generated tokens"
    server_row = by_name["gptj-99 Server QPS (p99 <= 20000 ms)"]
    assert server_row.value == server.best_qps and server_row.meets == (server.best_qps >= 42)
    assert by_name["gptj-99 Server tokens/s"].value == pytest.approx(server.best_qps * 70.0)
    single = by_name["gptj-99 SingleStream p90 latency"]
    assert single.target is None and single.ratio == pytest.approx(2500.0 / 1800.0)
    rows = format_table(figures, {"gptj": baseline})
    assert [row[0] for row in rows[-2:]] == ["baseline: HF GPT-J [forced] (cuda)", "baseline: HF GPT-J [full] (cuda)"]


def test_merged_flags_keep_the_last_of_each_name():
    assert merge_flags(["--a=1", "--b=2"], ["--a=3"], ["--c-d=4", "--c_d=5"]) == ["--a=3", "--b=2", "--c_d=5"]


def test_new_bench_dirs_never_collide(tmp_path):
    first, second = new_bench_dir(tmp_path), new_bench_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()


def test_baseline_times_hf_bert_on_cpu():
    result = measure_baseline("tiny", "cpu", seconds_per_repeat=0.05, repeats=2, warmup=1)
    assert (
        result["samples_per_second"] > 0
        and result["p90_latency_ms"] > 0
        and len(result["samples_per_second_repeats"]) == 2
    )
    assert "BertForQuestionAnswering" in result["what"] and "384" in result["what"]


def test_gptj_baseline_times_hf_generate_on_the_harness_weights_on_cpu():
    result = measure_gptj_baseline("tiny", "cpu", prompts=1, length_scale=0.02, cases=("forced",))
    forced = result["by_case"]["forced"]
    assert forced["samples_per_second"] > 0 and forced["p90_latency_ms"] > 0 and 31 <= forced["mean_new_tokens"] <= 128
    assert "GPTJForCausalLM" in result["what"] and "random weights" in result["what"] and "fp32" in result["label"]


@pytest.mark.slow
def test_the_bench_says_what_it_runs_and_for_how_long_first():
    """make bench on a CPU once started BERT-large for hours without a word: the plan names each benchmark's model,
    device and tests, an estimate at the configs' rates (8.4 h on the 2-core dev VM), and --quick as the check of
    the bench."""
    from scripts.bench.cli import parse_args, plan_bench, plan_lines

    args = parse_args(["--extra_run_args=--device=cpu"])
    lines = plan_lines(plan_bench(args), args)
    assert [line.split(":")[0] for line in lines] == ["bert-99", "bert-99.9", "estimated time", "bert-99, bert-99.9 on "
                                                                                                 "a CPU"]
    assert lines[0].startswith("bert-99: BERT-large, ")
    assert ", on cpu; Offline dataset, max: a probe, then 2 runs of about " in lines[0]
    assert "; Server: a search of up to 6 runs of about " in lines[0] and "; SingleStream: 1 run of about " in lines[0]
    assert lines[2].startswith("estimated time: at least ") and lines[2].split()[5] in ("min", "h")
    assert lines[3].endswith("make bench BENCH_ARGS=--quick checks the bench itself with tiny models in minutes")
    quick = parse_args(["--quick", "--scenarios=offline"])
    assert plan_lines(plan_bench(quick), quick)[-1] == ("bert-99, bert-99.9: no estimate (the configs' rates are "
                                                        "not of the model the flags give); the probes measure the "
                                                        "rates")


def test_quick_bench_runs_offline_through_the_harness(tmp_path, harness_built):
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.bench",
            "--quick",
            "--benchmarks=bert-99",
            "--scenarios=offline",
            "--offline_lengths=dataset",
            "--skip_baseline",
            "--min_duration_ms=1000",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (bench_dir,) = (build / "bench").iterdir()
    payload = json.loads((bench_dir / "bench.json").read_text())
    offline = payload["figures"][0]
    assert offline["name"] == "bert-99 Offline samples/s" and offline["value"] > 0
    assert payload["figures"][1]["unit"] == "tokens/s" and payload["figures"][1]["value"] > offline["value"]
    assert [Path(r["log_dir"]).name for r in payload["runs"]][:2] == [
        "01-bert-99-offline-dataset-probe",
        "02-bert-99-offline-dataset",
    ]
    assert all(r["verdict"] in ("VALID", "INVALID") for r in payload["runs"])
    assert payload["durations_ms"] == {Scenario.Offline.value: 1000}
    assert (
        "--model_name=tiny" in payload["runs"][0]["command"]
        and "--input_data=synthetic" in payload["runs"][0]["command"]
    )
    assert "BERT bench" in done.stdout and "(shortened; MLPerf: 600,000 ms)" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[bench] plan: bert-99: BERT-tiny (a small test model, not BERT-large), fp32, on cpu")
    first_run = next(index for index, line in enumerate(lines) if line.startswith("[bench] 01-"))
    assert max(index for index, line in enumerate(lines) if line.startswith("[bench] plan:")) < first_run
    assert (bench_dir / "bench.md").is_file() and (
        bench_dir / "runs" / "01-bert-99-offline-dataset-probe.log"
    ).is_file()


@pytest.mark.slow
def test_quick_gptj_bench_runs_both_output_lengths_and_the_baseline(tmp_path, harness_built):
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "scripts.bench", "--quick", "--benchmarks=gptj-99", "--scenarios=offline"]
    done = subprocess.run(
        [*command, "--extra_run_args=--offline_expected_qps=1 --synthetic_length_scale=0.02"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (bench_dir,) = (build / "bench").iterdir()
    payload = json.loads((bench_dir / "bench.json").read_text())
    figures = {f["name"]: f for f in payload["figures"]}
    forced, full = "gptj-99 Offline, EOS forced (mean ~70 new tokens)", "gptj-99 Offline, 128 new tokens (worst case)"
    for case in (forced, full):
        samples, tokens = figures[f"{case} samples/s"], figures[f"{case} tokens/s"]
        assert samples["value"] > 0 and samples["ratio"] > 0 and tokens["value"] > samples["value"]
    per_sample = {case: figures[f"{case} tokens/s"]["value"] / figures[f"{case} samples/s"]["value"] for case in
                  (forced, full)}  # fmt: skip
    assert 31 <= per_sample[forced] < per_sample[full] <= 128  # generated tokens, from the engine's counters
    assert figures[f"{forced} samples/s"]["target"] == ">= 42 samples/s"
    assert set(payload["baselines"]["gptj"]["by_case"]) == {"forced", "full"}
    # A try that a loaded machine made too short is run again ("-rerun"); the cases and their order stay.
    names = [Path(r["log_dir"]).name for r in payload["runs"]]
    assert [name.split("-", 1)[0] for name in names] == [f"{i:02d}" for i in range(1, len(names) + 1)], names
    cases = [name.split("-", 1)[1].removesuffix("-rerun") for name in names]
    assert list(dict.fromkeys(cases)) == ["gptj-99-offline-forced", "gptj-99-offline-full"], names
    assert "--synthetic_output_lengths=model" in payload["runs"][1]["command"]
    assert "GPT-J bench" in done.stdout and "baseline: HF GPTJForCausalLM.generate fp32 beam 4 b1 [full]" in done.stdout


def test_gpu_check_steps_survive_a_failing_step():
    from scripts.gpu.steps import run_steps

    rows: list[str] = []
    details: dict = {}
    saved: list[int] = []
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("kernel broke")

    steps = [("first", lambda: ran.append("first")), ("broken", fail), ("last", lambda: ran.append("last")),
             ("skipped", lambda: ran.append("skipped"))]  # fmt: skip
    run_steps(steps, {"skipped"}, details, rows, lambda: saved.append(1))
    assert ran == ["first", "last"] and rows == ["broken: FAILED RuntimeError: kernel broke"]
    assert sorted(details["step_s"]) == ["broken", "first", "last"] and len(saved) == 3


def test_a_run_outcome_is_read_from_the_tests_record(tmp_path):
    """The bench and the device check read a test's metadata.json through the run record."""
    from code.mlperf.run_logs import TestResult
    from code.mlperf.run_record import RunRecord, write_record
    from scripts.bench.runs import read_outcome
    from scripts.gpu.check_devices import read_test

    test_dir = tmp_path / "CPU" / "gptj-99" / "Offline"
    test_dir.mkdir(parents=True)
    result = TestResult("Offline", "PerformanceOnly", str(test_dir), metric="samples_per_second", value=2.5,
                        unit="samples/s", valid=False, invalid_reasons=["min duration not met"])
    write_record(test_dir, RunRecord.of(
        result, system_name="CPU", versions={"harness_commit": "abc"},
        config={"fields": {"precision": "bf16", "gpu_batch_size": 4}},
        provenance={"input_lengths": {"mean": 600.0}},
        engine_stats={"completed": 4, "generated_tokens": 200, "decode_steps": 210},
        devices={"completed": [{"share": 1.0}], "loadgen_process": {"cpu_per_s": 0.5}}))
    outcome = read_outcome(RunOutcome("x", "gptj-99", "Offline", "cmd", str(tmp_path), "", 0, 1.0))
    assert (outcome.valid, outcome.value, outcome.unit, outcome.system) == (False, 2.5, "samples/s", "CPU")
    assert outcome.min_duration_missed and outcome.mean_length == 600.0 and outcome.generated_per_sample == 50.0
    assert outcome.steps_per_sample == 52.5
    assert outcome.settings == {"precision": "bf16", "gpu_batch_size": 4} and outcome.versions == {
        "harness_commit": "abc"}
    figures = read_test(tmp_path)
    assert (figures["value"], figures["shares"], figures["host_cpu_per_s"]) == (2.5, [1.0], [0.5])
    assert figures["engine_stats"] == {"completed": 4, "generated_tokens": 200, "decode_steps": 210}


def test_the_device_check_reads_server_latencies_and_compares_ray_with_local(tmp_path):
    """A Server run's cost shows in LoadGen's latencies; a cluster row's ratio is to the same GPUs without Ray."""
    from scripts.gpu.check_devices import latencies, table

    (tmp_path / "mlperf_log_summary.txt").write_text(
        "Mean latency (ns)                : 35293000\n99.00 percentile latency (ns)   : 65804000\n")
    assert latencies(tmp_path) == {"mean_ms": 35.293, "p99_ms": 65.804}
    assert latencies(tmp_path / "missing") == {}
    local = {"value": 100.0, "unit": "samples/s", "valid": True, "shares": [0.5, 0.5], "p99_ms": 65.8}
    ray = {**local, "value": 101.0, "p99_ms": 62.4}
    rows = table({"runs": {"bert-server": {"2": local}}, "cluster": {"bert-server": {"2": ray}}})
    (cluster_row,) = [row for row in rows if " 2 Ray " in row]
    assert "VALID" in cluster_row and " 1.010 " in cluster_row
    assert any("runs" in row and "p99 65.8 ms" in row for row in rows)
    assert any("cluster" in row and "p99 62.4 ms" in row for row in rows)
