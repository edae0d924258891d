"""Verdicts: VALID / INVALID / FAIL / PASS, 'but not submittable' with its reasons, and the exit code of a run."""

import pytest

from code.common.constants import Benchmark, ExitCode, Scenario, TestMode
from code.common.rounds import ROUNDS
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord
from code.mlperf.summary import counted, exit_code, format_summary
from code.mlperf.verdicts import not_submittable_reasons

# The seeds of BERT's default round on the CPU system (an edge system): v6.1.
V61_SEEDS = {f"effective_{key}": value for key, value in vars(ROUNDS["v6.1"].seeds).items()}
FULL_RUN = {"effective_min_duration_ms": 600_000, "effective_samples_per_query": 10833 * 11 // 10,
            "effective_performance_sample_count": 10833, **V61_SEEDS}


def resolved(scenario, benchmark=Benchmark.BERT, **overrides):
    return resolve_config(benchmark, scenario, "CPU", WorkloadSetting(), overrides)



def engine(**section: object) -> RunRecord:
    """The record of a test with only its engine section (which engine of a ladder ran, and the gate's word)."""
    return RunRecord({"engine": section})

def test_a_full_run_of_the_real_model_is_submittable():
    # CPU is an edge system (systems/CPU.json); BERT Offline's default round there, v6.1, takes it.
    reasons = not_submittable_reasons(resolved(Scenario.Offline), TestMode.PerformanceOnly, {}, FULL_RUN, 10833)
    assert reasons == []


def test_every_reason_is_named():
    provenance = {"invalid_because": ["synthetic inputs", "random weights (BERT-tiny architecture)"]}
    detail = {**FULL_RUN, "effective_min_duration_ms": 60_000, "effective_samples_per_query": 64,
              "effective_performance_sample_count": 64, "effective_qsl_rng_seed": 1}
    reasons = not_submittable_reasons(resolved(Scenario.Offline, test_run=True, round="v5.0"),
                                      TestMode.PerformanceOnly, provenance, detail, 64)
    assert reasons == [
        "synthetic inputs",
        "random weights (BERT-tiny architecture)",
        "test run (--test_run)",
        "shortened: min_duration 60000 ms (a submission needs 600000)",
        "shortened: 64 samples in the Offline query (a submission needs 10833)",
        "performance_sample_count 64 (a submission needs 10833)",
        "LoadGen's RNG seeds are not round v5.0's (rebuild: make build ROUND=v5.0)",
    ]


def test_an_equal_issue_query_is_counted_with_its_padding():
    # GPT-J's Offline query of 168 samples, padded by LoadGen to a multiple of the 64 loaded: 192 ran.
    detail = {**FULL_RUN, "effective_samples_per_query": 168, "generated_samples_per_query": 192,
              "effective_performance_sample_count": 13368}
    reasons = not_submittable_reasons(resolved(Scenario.Offline, benchmark=Benchmark.GPTJ), TestMode.PerformanceOnly,
                                      {}, detail, 13368)
    assert "shortened: 192 samples in the Offline query (a submission needs 13368)" in reasons
    assert not any("168" in reason for reason in reasons)


def test_a_scenario_the_round_lacks_is_a_wrong_round():
    reasons = not_submittable_reasons(resolved(Scenario.Server), TestMode.PerformanceOnly, {}, FULL_RUN, 10833)
    # No round takes BERT Server from an edge system: the measurement runs with v6.1, and says why it cannot count.
    assert reasons == ["wrong round: round v6.1 has no bert-99 Server for edge systems: it has bert-99 for edge: "
                       "Offline, SingleStream; datacenter,edge: Offline, SingleStream"]


def test_a_system_without_a_description_cannot_say_its_round(tmp_path, monkeypatch, harness_built):
    from code.common.systems import SystemDetectionError
    from code.processes.test_process import check_round

    monkeypatch.setattr("code.common.systems.SYSTEMS_DIR", tmp_path)
    reasons = not_submittable_reasons(resolved(Scenario.Offline), TestMode.PerformanceOnly, {}, FULL_RUN, 10833)
    assert reasons == [f"system type unknown: {tmp_path}/CPU.json is missing; it says whether CPU is a datacenter or "
                       "edge system: run `make add_system` to write it"]
    with pytest.raises(SystemDetectionError, match="CPU.json is missing"):  # a SubmissionRun is refused
        check_round(resolved(Scenario.Offline, test_mode="SubmissionRun"))
    (tmp_path / "CPU.json").write_text('{"system_type": "FILL_ME"}')
    reasons = not_submittable_reasons(resolved(Scenario.Offline), TestMode.PerformanceOnly, {}, FULL_RUN, 10833)
    assert reasons == ["system type unknown: unknown system_type 'FILL_ME'; valid: datacenter, edge, "
                       "datacenter,edge (set it in systems/<system>.json)"]


def test_an_edge_run_is_held_to_the_edge_sets_size():
    """llama3.1-8b on an edge system (v5.1, v6.1) runs the 5,000-sample edge set under mlperf.conf's
    llama3_1-8b-edge, whose Offline query and performance sample count are 5,000: a full run of it is submittable,
    a shorter one is named against 5,000, and a datacenter,edge system's run is held to the datacenter set's 13,368."""
    for round_name in ("v5.1", "v6.1"):
        seeds = {f"effective_{key}": value for key, value in vars(ROUNDS[round_name].seeds).items()}
        full = {"effective_min_duration_ms": 600_000, "effective_samples_per_query": 5000,
                "effective_performance_sample_count": 5000, **seeds}
        edge = resolved(Scenario.Offline, benchmark=Benchmark.LLAMA31, round=round_name)
        assert not_submittable_reasons(edge, TestMode.PerformanceOnly, {}, full, 5000) == []
        assert not_submittable_reasons(edge, TestMode.AccuracyOnly, {}, seeds, 5000) == []
        short = {**full, "effective_samples_per_query": 4000}
        assert not_submittable_reasons(edge, TestMode.PerformanceOnly, {}, short, 5000) == [
            "shortened: 4000 samples in the Offline query (a submission needs 5000)"]
        datacenter = resolve_config(Benchmark.LLAMA31, Scenario.Offline, "H200_SXM_141GBx1", WorkloadSetting(),
                                    {"round": round_name})
        assert not_submittable_reasons(datacenter, TestMode.PerformanceOnly, {}, full, 5000) == [
            "shortened: 5000 samples in the Offline query (a submission needs 13368)",
            "performance_sample_count 5000 (a submission needs 13368)"]


def test_accuracy_on_a_subset_is_not_submittable():
    reasons = not_submittable_reasons(resolved(Scenario.Offline), TestMode.AccuracyOnly, {}, V61_SEEDS, 12)
    assert reasons == ["accuracy over 12 of the 10833 samples"]


@pytest.mark.parametrize(("result", "verdict"), [
    (TestResult("Offline", "PerformanceOnly", "x", valid=True), "VALID"),
    (TestResult("Offline", "PerformanceOnly", "x", valid=True, not_submittable=["synthetic inputs"]),
     "VALID but not submittable"),
    (TestResult("Server", "PerformanceOnly", "x", valid=False, invalid_reasons=["latency constraint not met"]),
     "INVALID"),
    (TestResult("Offline", "AccuracyOnly", "x", valid=True, accuracy={"summary": "f1 = 91"}), "PASS"),
    (TestResult("Offline", "AccuracyOnly", "x", valid=False, accuracy={"summary": "f1 = 3"}), "FAIL"),
    (TestResult("Offline", "AccuracyOnly", "x", valid=True, accuracy={"summary": "f1 = 100"},
                not_submittable=["oracle backend"]), "PASS but not submittable"),
    (TestResult("Offline", "PerformanceOnly", "x", valid=None), "FAILED"),
])
def test_verdict_words(result, verdict):
    assert result.verdict == verdict
    assert TestResult.from_dict(result.to_dict()) == result


def test_exit_code_gates_on_invalid_and_fail():
    valid = TestResult("Offline", "PerformanceOnly", "x", valid=True, not_submittable=["test run (--test_run)"])
    invalid = TestResult("Server", "PerformanceOnly", "x", valid=False)
    failed = TestResult("Offline", "AccuracyOnly", "x", valid=False, accuracy={"summary": "f1 = 3"})
    crashed = TestResult("Offline", "PerformanceOnly", "x", valid=None)
    assert exit_code([valid]) is ExitCode.OK
    assert exit_code([valid, invalid]) is exit_code([failed]) is ExitCode.INVALID == 3
    assert exit_code([invalid, crashed]) is ExitCode.TEST_FAILED == 1


def test_summary_lines_name_verdict_and_reasons(tmp_path):
    valid = TestResult("Offline", "PerformanceOnly", "x", metric="samples_per_second", value=12.0, unit="samples/s",
                       valid=True, not_submittable=["synthetic inputs", "test run (--test_run)"])
    invalid = TestResult("Server", "PerformanceOnly", "x", metric="scheduled_samples_per_second", value=3.0,
                         unit="samples/s", valid=False, invalid_reasons=["latency constraint not met"],
                         not_submittable=["synthetic inputs"])
    metadata = RunRecord({"round": "v5.0", "loadgen_version": "5.0.21",
                          "provenance": {"model": "BERT-tiny (a small test model, not BERT-large)",
                                         "inputs": "synthetic", "weights": "random (BERT-tiny architecture)"}})
    text = format_summary("CPU", tmp_path, [("bert-99", valid, metadata), ("bert-99", invalid, metadata)])
    assert ("samples_per_second = 12.000 samples/s  [VALID but not submittable] (synthetic inputs; test run "
            "(--test_run))") in text
    assert ("scheduled_samples_per_second = 3.000 samples/s  [INVALID] (latency constraint not met); not "
            "submittable either: synthetic inputs") in text
    assert "NOTE model: BERT-tiny (a small test model, not BERT-large); inputs: synthetic; weights: random" in text
    assert "NOTE round v5.0, LoadGen 5.0.21" in text
    assert "Exit status 3: a test is INVALID or FAIL." in text


def test_summary_names_the_accuracy_gate_of_a_real_submission(tmp_path):
    performance = TestResult("Offline", "PerformanceOnly", "x", metric="samples_per_second", value=12.0,
                             unit="samples/s", valid=True, not_submittable=["synthetic inputs"])
    server = TestResult("Server", "PerformanceOnly", "x", metric="scheduled_samples_per_second", value=9.0,
                        unit="samples/s", valid=True, not_submittable=["synthetic inputs"])
    text = format_summary("CPU", tmp_path, [("bert-99", performance, RunRecord({})),
                                            ("bert-99", server, RunRecord({}))])
    assert ("GATE bert-99: the accuracy gate of a real submission is the AccuracyOnly run on the real checkpoint "
            "and data set, not this run: make run RUN_ARGS=\"--benchmarks=bert-99 "
            "--scenarios=offline,server --test_mode=AccuracyOnly\"") in text
    real = TestResult("Offline", "AccuracyOnly", "x", valid=True, accuracy={"summary": "f1 = 90.5"})
    text = format_summary("CPU", tmp_path, [("bert-99.9", real, RunRecord({}))])
    assert "GATE bert-99.9: this AccuracyOnly run on the real checkpoint is the accuracy gate" in text
    assert "(Offline PASS)" in text and "make run" not in text and "information only" in text
    subset = TestResult("Offline", "AccuracyOnly", "x", valid=True, accuracy={"summary": "f1 = 100"},
                        not_submittable=["accuracy over 53 of the 10833 samples"])
    text = format_summary("CPU", tmp_path, [("bert-99", subset, RunRecord({}))])
    assert "is the AccuracyOnly run on the real checkpoint" in text  # a subset of the samples is not the gate
    gptj = TestResult("Offline", "PerformanceOnly", "x", valid=True)
    assert "GATE gptj-99: the accuracy gate of a real submission" in format_summary("CPU", tmp_path,
                                                                                    [("gptj-99", gptj, RunRecord({}))])


def test_summary_says_which_engine_of_a_ladder_ran_and_why(tmp_path):
    """The engine line of each test, a missed engine shown without deciding the exit status while the ladder went
    on, and the run's end when the last engine missed."""
    ladder = ["fp8", "bf16"]
    missed = TestResult("Offline", "AccuracyOnly", "x", valid=False, accuracy={"summary": "rouge1 = 40"},
                        invalid_reasons=["ROUGE1 40 < 42.9"])
    passed = TestResult("Offline", "AccuracyOnly", "y", valid=True, accuracy={"summary": "rouge1 = 43"})
    performance = TestResult("Offline", "PerformanceOnly", "z", metric="samples_per_second", value=20.0,
                             unit="samples/s", valid=True)
    results = [
        ("gptj-99", missed, engine(ladder=ladder, gate="missed", next="bf16",
                                 summary="fp8: MISSED the accuracy target (ROUGE1 40 < 42.9)")),
        ("gptj-99", passed, engine(ladder=ladder, gate="this run",
                                 summary="bf16: this AccuracyOnly run is its accuracy gate")),
        ("gptj-99", performance, engine(ladder=ladder, gate="passed",
                                      summary="bf16: passed the accuracy gate, rouge1 = 43")),
    ]
    text = format_summary("H200_SXM_141GBx1", tmp_path, results)
    assert "      engine: fp8: MISSED the accuracy target (ROUGE1 40 < 42.9)" in text
    assert "      engine: bf16: passed the accuracy gate, rouge1 = 43" in text
    assert "GATE gptj-99: the engines above ran after an AccuracyOnly run on the real checkpoint" in text
    assert "Exit status" not in text  # the miss was superseded by the engine that passed
    assert exit_code(counted(results)) is ExitCode.OK
    last = [("gptj-99", missed, engine(ladder=ladder, gate="missed", next=None, summary="bf16"))]
    text = format_summary("H200_SXM_141GBx1", tmp_path, last, stopped="every engine of the ladder missed")
    assert "Exit status 3: every engine of the ladder missed." in text
    assert exit_code(counted(last), "every engine") is ExitCode.INVALID
    assert exit_code([], "every engine missed before: nothing ran") is ExitCode.INVALID
    not_applied = [("gptj-99", performance, engine(ladder=ladder, gate="not applied", summary="fp8"))]
    assert "GATE gptj-99: the accuracy gate was not applied" in format_summary("CPU", tmp_path, not_applied)


def test_a_query_that_ended_early_gives_the_next_command_not_loadgens_advice(tmp_path):
    short = TestResult("Offline", "PerformanceOnly", "x", metric="samples_per_second", value=0.068,
                       unit="samples/s", valid=False,
                       invalid_reasons=["min duration not met", "Increase expected QPS so the loadgen pre-generates "
                                        "a larger (coalesced) query. "])
    config = resolved(Scenario.Offline, test_run=True, model_name="tiny", log_dir="/somewhere")
    metadata = RunRecord({"config": config.as_dict()})
    text = format_summary("CPU", tmp_path, [("bert-99", short, metadata)])
    assert "Increase expected QPS" not in text
    assert "[INVALID] (min duration not met)" in text
    assert ('its query ended before the minimum duration; next: make run RUN_ARGS="--benchmarks=bert-99 '
            '--scenarios=offline --model_name=tiny --test_run --offline_expected_qps=0.102"') in text
    fast = TestResult("Offline", "PerformanceOnly", "x", value=73_000.0, valid=False,
                      invalid_reasons=["min duration not met"])
    assert "--offline_expected_qps=109500" in format_summary("CPU", tmp_path, [("bert-99", fast, metadata)])
    server = TestResult("Server", "PerformanceOnly", "x", metric="scheduled_samples_per_second", value=3.0,
                        unit="samples/s", valid=False, invalid_reasons=["min queries not met"])
    assert ('next: make find_performance RUN_ARGS="--benchmarks=bert-99 --scenarios=server", then make run '
            'RUN_ARGS="--benchmarks=bert-99 --scenarios=server"') in format_summary("CPU", tmp_path,
                                                                                [("bert-99", server, RunRecord({}))])
    late = TestResult("Server", "PerformanceOnly", "x", value=3.0, valid=False,
                      invalid_reasons=["latency constraint not met"])
    assert "next:" not in format_summary("CPU", tmp_path, [("bert-99", late, RunRecord({}))])


def test_token_latencies_of_whole_responses_are_not_submittable():
    """A first token reported with its whole response makes TTFT the whole latency and leaves TPOT unmeasured:
    such a SingleStream or Server figure is not a result; Offline reads no token latencies; streamed first tokens
    are measured as LoadGen means."""
    reason = ("first tokens reported with whole responses: TTFT is each sample's whole latency and the time per "
              "output token is not measured")
    detail = {**FULL_RUN, "requested_use_token_latencies": True}
    for scenario, expected in ((Scenario.SingleStream, True), (Scenario.Offline, False)):
        config = resolved(scenario, benchmark=Benchmark.LLAMA31, round="v5.1")
        reasons = not_submittable_reasons(config, TestMode.PerformanceOnly, {}, detail, 13368)
        assert (reason in reasons) is expected, (scenario, reasons)
    # an engine that streams its first tokens has them timed as LoadGen means
    config = resolved(Scenario.Server, benchmark=Benchmark.LLAMA31, round="v5.1")
    streamed = not_submittable_reasons(config, TestMode.PerformanceOnly, {"first_tokens": "streamed"}, detail, 13368)
    assert reason not in streamed
