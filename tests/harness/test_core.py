"""Tests of the C++ harness core (code/harness) against the real LoadGen, with a fake runner.

LoadGen allows one test per process (FromConfig), so each LoadGen test runs in a child process: this file, run as a
script with a JSON job (see ``_child_main``). The fake runner answers sample i with bytes derived from i, so the
accuracy log can be checked byte for byte, and records every batch it sees.
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from code.common.paths import REPO_ROOT
from code.common.rounds import ROUNDS
from tests.conftest import CORE_ROUND

QSL_SIZE = 256
CHILD_TIMEOUT_S = 90

# Short runs that LoadGen still calls VALID. mlperf.conf's bert performance_sample_count_override (10833) is undone,
# so LoadGen uses the fake QSL's own size.
USER_CONF = """\
bert.*.performance_sample_count_override = 0
*.Offline.min_duration = 300
*.Offline.min_query_count = 100
*.Offline.target_qps = 10000
*.Server.min_duration = 1000
*.Server.min_query_count = 600
*.Server.target_qps = 600
*.SingleStream.min_duration = 500
*.SingleStream.min_query_count = 100
*.SingleStream.target_latency = 2
"""


def sample_length(index: int) -> int:
    """A deterministic, well-spread length in 1..383 for QSL sample ``index``."""
    return (index * 7919) % 383 + 1


def expected_response(index: int, style: str) -> np.ndarray:
    """The fake runner's answer for one sample; 'list' answers vary in size, like GPT-J's token ids."""
    size = 4 if style == "stacked" else 1 + index % 7
    return np.arange(size, dtype=np.float32) + np.float32(index) * np.float32(0.5)


class FakeRunner:
    """Answers deterministically, sleeps a little per batch (so Offline throughput stays below target_qps)."""

    def __init__(self, style: str, sleep_s: float, fail_at_batch: int | None) -> None:
        self.style = style
        self.sleep_s = sleep_s
        self.fail_at_batch = fail_at_batch
        self.batches: list[list[int]] = []
        self.local = threading.local()
        self.thread_locals = 0  # how many worker threads' threading.local data had to be created

    def run_batch(self, sample_indices: np.ndarray) -> list[np.ndarray] | np.ndarray:
        assert sample_indices.dtype == np.int64
        self.batches.append([int(i) for i in sample_indices])
        if not hasattr(self.local, "seen"):
            self.local.seen = True
            self.thread_locals += 1
        if self.fail_at_batch is not None and len(self.batches) > self.fail_at_batch:
            raise ZeroDivisionError(f"fake runner failed on batch {len(self.batches)}")
        time.sleep(self.sleep_s)
        responses = [expected_response(int(i), self.style) for i in sample_indices]
        return np.stack(responses) if self.style == "stacked" else responses


class FakeContinuousRunner:
    """A continuous-batching engine in miniature: holds up to ``slots`` samples, each for 1-3 steps depending on its
    index, so samples complete one by one and out of the order they were taken in."""

    def __init__(self, slots: int, fail_after: int | None, return_early: bool, complete_twice: bool = False,
                 first_tokens: bool = False, first_twice: bool = False) -> None:
        self.slots = slots
        self.complete_twice = complete_twice  # name one id twice in one completion: LoadGen must never see that
        # report each sample's first token when it is taken (a greedy engine after its prompt's step); once more
        # for one sample (first_twice): the core must refuse that
        self.first_tokens = first_tokens or first_twice
        self.first_twice = first_twice
        self.step_s = 0.005 if self.first_tokens else 0.0005
        self.fail_after = fail_after
        self.return_early = return_early
        self.batches: list[list[int]] = []  # what each take returned (non-empty ones)
        self.thread_locals = 0
        self.most_in_flight = 0

    def run_continuous(self, session) -> None:  # noqa: ANN001 - the core's Session
        running: dict[int, list[int]] = {}  # response id -> [QSL index, steps left]
        completed = 0
        while True:
            got = session.take(self.slots - len(running), 0.0 if running else 0.01)
            if got is None:
                assert not running
                return
            ids, indices = got
            assert ids.dtype == np.uint64 and indices.dtype == np.int64
            if len(ids):
                self.batches.append([int(i) for i in indices])
            for response_id, index in zip(ids.tolist(), indices.tolist(), strict=True):
                running[response_id] = [index, 1 + index % 3]
            if self.first_tokens and len(ids):
                # the first four bytes of each response, as an int32 token id
                tokens = np.array([expected_response(i, "list")[:1].view(np.int32)[0] for i in indices.tolist()],
                                  dtype=np.int32)
                session.first_tokens(ids, tokens)
                if self.first_twice and completed >= 3:
                    session.first_tokens(ids[:1], tokens[:1])
            self.most_in_flight = max(self.most_in_flight, session.in_flight())
            time.sleep(self.step_s)
            for response_id in list(running):
                running[response_id][1] -= 1
                if running[response_id][1]:
                    continue
                index = running.pop(response_id)[0]
                twice = 2 if self.complete_twice and completed == 3 else 1
                session.complete(np.array([response_id] * twice, dtype=np.uint64),
                                 [expected_response(index, "list")] * twice)
                completed += 1
                if self.fail_after is not None and completed >= self.fail_after:
                    raise ZeroDivisionError(f"fake engine failed after {completed} samples")
                if self.return_early and completed >= 5:
                    return


def _child_main(job: dict) -> int:
    """Run one LoadGen test in this (child) process; write what happened to job['result']."""
    from code.harness.core import CoreSettings, progress, run_test, timeline

    if "slots" in job:
        runner = FakeContinuousRunner(job["slots"], job.get("fail_after"), job.get("return_early", False),
                                      job.get("complete_twice", False), job.get("first_tokens", False),
                                      job.get("first_twice", False))
    else:
        runner = FakeRunner(job.get("style", "list"), job.get("sleep_s", 0.005), job.get("fail_at_batch"))
    loads: list[int] = []
    unloads: list[int] = []
    frozen_at_load: list[int] = []

    def load(ids: list[int]) -> None:  # LoadGen calls it inside the test
        loads.extend(ids)
        frozen_at_load.append(gc.get_freeze_count())

    settings = CoreSettings(
        model=job.get("model", "bert"),
        scenario=job["scenario"],
        mode=job.get("mode", "PerformanceOnly"),
        user_conf=Path(job["user_conf"]),
        log_dir=Path(job["log_dir"]),
        total_sample_count=QSL_SIZE,
        performance_sample_count=job.get("performance_sample_count", QSL_SIZE),
        max_batch_size=job.get("max_batch_size", 16),
        round=CORE_ROUND,
        num_workers=job.get("num_workers", 1),
        sort_by_length=job.get("sort_by_length", True),
        batch_timeout_us=job.get("batch_timeout_us", 0),
        log_enable_trace=job.get("log_enable_trace", False),
        token_responses=job.get("token_responses", False),
    )
    lengths = np.array([sample_length(i) for i in range(QSL_SIZE)], dtype=np.int64)
    result: dict = {}
    try:
        run_test(settings, lengths, runner, load, unloads.extend)
    except Exception as exc:  # reported to the parent, which checks type and message
        result["error"] = f"{type(exc).__name__}: {exc}"
    times = timeline(CORE_ROUND)
    result.update(progress=progress(CORE_ROUND), timeline_index=times.index.tolist(),
                  latencies=(times.completed_s - times.issued_s).tolist())
    if job.get("run_twice"):
        try:
            run_test(settings, lengths, runner)
        except Exception as exc:
            result["second_error"] = f"{type(exc).__name__}: {exc}"
    result.update(frozen_at_load=frozen_at_load, frozen_after=gc.get_freeze_count())
    result.update(batches=runner.batches, loads=loads, unloads=unloads, thread_locals=runner.thread_locals,
                  most_in_flight=getattr(runner, "most_in_flight", None))
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


def run_child(tmp_path: Path, user_conf: str = USER_CONF, **job: object) -> dict:
    """Run one LoadGen test in a fresh interpreter; return its result (plus log_dir)."""
    conf = tmp_path / "user.conf"
    conf.write_text(user_conf, encoding="utf-8")
    job.setdefault("user_conf", str(conf))
    job.update(log_dir=str(tmp_path / "logs"), result=str(tmp_path / "result.json"))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(job)],
        cwd=tmp_path,  # LoadGen reads audit.config from the working directory: keep it a clean one
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    result["log_dir"] = tmp_path / "logs"
    result["stderr"] = proc.stderr
    return result


def summary(result: dict) -> str:
    return (result["log_dir"] / "mlperf_log_summary.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def built_core() -> Path:
    from code.harness.build import build

    return build(CORE_ROUND)


# --- fast checks, no LoadGen ---


def test_settings_reject_bad_fields(tmp_path: Path) -> None:
    from code.harness.core import CoreSettings

    good = dict(
        model="bert",
        scenario="Offline",
        mode="PerformanceOnly",
        user_conf=tmp_path / "user.conf",
        log_dir=tmp_path,
        total_sample_count=10,
        performance_sample_count=10,
        max_batch_size=4,
        round=CORE_ROUND,
    )
    assert CoreSettings(**good).user_conf == tmp_path / "user.conf"
    with pytest.raises(ValueError, match=r"scenario must be one of Offline, Server, SingleStream, not 'MultiStream'"):
        CoreSettings(**{**good, "scenario": "MultiStream"})
    with pytest.raises(ValueError, match=r"mode must be one of PerformanceOnly, AccuracyOnly"):
        CoreSettings(**{**good, "mode": "SubmissionRun"})
    with pytest.raises(ValueError, match=r"model must be one of bert, gptj"):
        CoreSettings(**{**good, "model": "bert-99"})
    with pytest.raises(ValueError, match=r"max_batch_size must be an integer >= 1"):
        CoreSettings(**{**good, "max_batch_size": 0})
    with pytest.raises(ValueError, match=r"performance_sample_count \(11\) must not exceed"):
        CoreSettings(**{**good, "performance_sample_count": 11})


def test_missing_user_conf_is_a_clear_error(tmp_path: Path) -> None:
    from code.harness.core import CoreSettings, run_test

    settings = CoreSettings("bert", "Offline", "PerformanceOnly", tmp_path / "nope.conf", tmp_path, 4, 4, 2, CORE_ROUND)
    with pytest.raises(FileNotFoundError, match=r"user.conf not found: .*nope.conf"):
        run_test(settings, np.ones(4, np.int64), FakeRunner("list", 0, None))


def test_bad_sample_lengths(tmp_path: Path) -> None:
    from code.harness.core import CoreSettings, run_test

    settings = CoreSettings("bert", "Offline", "PerformanceOnly", tmp_path / "u.conf", tmp_path, 4, 4, 2, CORE_ROUND)
    with pytest.raises(ValueError, match=r"sample_lengths has 3 entries"):
        run_test(settings, np.ones(3, np.int64), FakeRunner("list", 0, None))


def test_missing_module_says_how_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import code.harness.core as core

    monkeypatch.setattr(core, "harness_lib_dir", lambda round_name: tmp_path / round_name)
    monkeypatch.delitem(sys.modules, "_mlperf_harness", raising=False)
    with pytest.raises(core.HarnessNotBuiltError,
                       match=r"the C\+\+ harness of round v4.1 is not built: run `make build ROUND=v4.1`"):
        core.loadgen_version("v4.1")


def test_settings_reject_an_unknown_round(tmp_path: Path) -> None:
    from code.harness.core import CoreSettings

    with pytest.raises(ValueError, match=r"unknown round 'v9.1'; valid rounds: v4.1, v5.0, v5.1, v6.1"):
        CoreSettings("bert", "Offline", "PerformanceOnly", tmp_path / "u.conf", tmp_path, 4, 4, 2, round="v9.1")


def test_every_setting_reaches_the_core() -> None:
    """CoreSettings is the one definition of the core's settings: the binding reads each field (but the round,
    which picks the build) by its name into the RunConfig field of the same name."""
    from dataclasses import fields

    from code.harness.core import CoreSettings

    src = REPO_ROOT / "code" / "harness" / "src"
    binding = (src / "bindings.cc").read_text(encoding="utf-8")
    run_config = (src / "test_runner.h").read_text(encoding="utf-8")
    for field in fields(CoreSettings):
        if field.name == "round":
            continue
        assert f'Read(settings, "{field.name}", config.{field.name});' in binding, field.name
        assert f" {field.name}" in run_config, field.name


# --- LoadGen tests (each in a child process) ---


@pytest.mark.slow
def test_loadgen_version(built_core: Path) -> None:
    code = f"from code.harness.core import loadgen_version; print(loadgen_version('{CORE_ROUND}'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ROUNDS[CORE_ROUND].loadgen.version == "6.0.17"


@pytest.mark.slow
@pytest.mark.parametrize(("model", "min_query_count"), [("llama3_1-8b-edge", 5000), ("llama3_1-8b", 13368)])
def test_the_model_picks_its_mlperf_conf_settings(built_core: Path, tmp_path: Path, model: str,
                                                  min_query_count: int) -> None:
    """The core hands LoadGen the model it is given, and LoadGen reads that key of its compiled mlperf.conf: the
    edge set's llama3_1-8b-edge asks 5,000 samples of an Offline query, the datacenter set's llama3_1-8b 13,368."""
    from code.mlperf.run_logs import read_detail_log

    user_conf = ("*.*.performance_sample_count_override = 0\n*.Offline.min_duration = 0\n"
                 "*.Offline.target_qps = 1\n")
    result = run_child(tmp_path, user_conf, model=model, scenario="Offline", max_batch_size=256, sleep_s=0.0,
                       token_responses=True)
    assert "error" not in result, result["error"]
    detail = read_detail_log(result["log_dir"])
    assert detail["requested_min_query_count"] == detail["effective_samples_per_query"] == min_query_count
    assert detail["effective_sample_concatenate_permutation"] and detail["requested_use_token_latencies"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "job"),
    [
        ("Offline", {"num_workers": 2}),
        ("Server", {"num_workers": 2, "max_batch_size": 8, "batch_timeout_us": 500, "style": "stacked"}),
        ("SingleStream", {"sleep_s": 0.001}),
    ],
)
def test_performance_run_is_valid(built_core: Path, tmp_path: Path, scenario: str, job: dict) -> None:
    result = run_child(tmp_path, scenario=scenario, **job)
    assert "error" not in result, result["error"]
    text = summary(result)
    assert "Result is : VALID" in text, text
    assert f"Scenario : {scenario}" in text
    # The QSL callbacks saw the performance set being loaded and unloaded.
    assert sorted(result["loads"]) == list(range(QSL_SIZE))
    assert sorted(result["unloads"]) == list(range(QSL_SIZE))
    sizes = [len(b) for b in result["batches"]]
    assert max(sizes) <= job.get("max_batch_size", 16)
    # Each worker is one Python thread for its whole life: its threading.local data survives between batches.
    assert result["thread_locals"] == job.get("num_workers", 1)
    # The trace is off unless asked for: LoadGen leaves its file empty.
    assert (result["log_dir"] / "mlperf_log_trace.json").stat().st_size == 0
    # The core's own record: every issued sample completed once, the counters agree with the record, and Server's
    # late count is the samples past its 130 ms bound.
    counters, latencies = result["progress"], np.array(result["latencies"])
    answered = sum(sizes)
    assert counters["issued"] == counters["completed"] == answered == len(result["timeline_index"])
    assert sorted(result["timeline_index"]) == sorted(i for batch in result["batches"] for i in batch)
    assert (latencies >= 0).all() and counters["elapsed_s"] > 0
    bound_s = 0.13 if scenario == "Server" else None
    assert counters["late"] == (int((latencies > bound_s).sum()) if bound_s else 0)
    if scenario == "SingleStream":
        assert set(sizes) == {1}
    if scenario == "Server":
        # 600 queries/s against 2 workers busy 5 ms a batch: samples wait, and dynamic batching groups them.
        assert max(sizes) > 1


@pytest.mark.slow
@pytest.mark.parametrize("qsl_count", [16, QSL_SIZE])
def test_equal_issue_singlestream_pads_queries_to_the_qsls_own_count(built_core: Path, tmp_path: Path,
                                                                      qsl_count: int) -> None:
    """GPT-J runs in equal-issue mode: LoadGen rounds a SingleStream test's query count up to a multiple of the QSL's
    performance sample count, whatever user.conf's override loads. A QSL that reports the 16 samples the override
    loads keeps a short test short (``qsl_performance_sample_count``); one that reports its whole set makes the test
    issue every sample of it."""
    conf = ("gptj.SingleStream.performance_sample_count_override = 16\ngptj.SingleStream.min_duration = 100\n"
            "gptj.SingleStream.min_query_count = 1\ngptj.SingleStream.target_latency = 50\n")
    result = run_child(tmp_path, conf, model="gptj", scenario="SingleStream", sleep_s=0.0,
                       performance_sample_count=qsl_count)
    assert "error" not in result, result["error"]
    detail = (result["log_dir"] / "mlperf_log_detail.txt").read_text(encoding="utf-8")
    effective = int(re.search(r'"key": "effective_min_query_count", "value": (\d+)', detail).group(1))
    # 2 x 0.1 s x 20 queries/s = 4 queries, rounded up to a multiple of the QSL's count
    assert effective == qsl_count
    assert result["progress"]["issued"] >= qsl_count and len(set(result["loads"])) == 16


@pytest.mark.slow
def test_the_heap_is_frozen_for_the_test_only(built_core: Path, tmp_path: Path) -> None:
    """run_test freezes what the process holds while LoadGen runs (no collector pass stalls the test) and hands it
    back to the collector after."""
    result = run_child(tmp_path, scenario="Offline")
    assert "error" not in result, result["error"]
    assert result["frozen_at_load"] and all(count > 0 for count in result["frozen_at_load"])
    assert result["frozen_after"] == 0


def test_trace_when_asked_for(built_core: Path, tmp_path: Path) -> None:
    result = run_child(tmp_path, scenario="Offline", log_enable_trace=True)
    assert "error" not in result, result["error"]
    trace = (result["log_dir"] / "mlperf_log_trace.json").read_text(encoding="utf-8")
    assert trace.startswith('{"traceEvents":[') and '{"name":"IssueQuery"' in trace, trace[:500]


@pytest.mark.slow
def test_offline_batches_sorted_longest_first(built_core: Path, tmp_path: Path) -> None:
    result = run_child(tmp_path, scenario="Offline", num_workers=1, max_batch_size=12, sleep_s=0.002)
    assert "error" not in result, result["error"]
    batches = result["batches"]
    sizes = [len(b) for b in batches]
    # The one Offline query is sorted, then cut in order: full batches, and only the last may be short.
    assert all(size == 12 for size in sizes[:-1]) and 1 <= sizes[-1] <= 12
    lengths = [sample_length(i) for batch in batches for i in batch]
    assert lengths == sorted(lengths, reverse=True)


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "style"), [("Offline", "list"), ("Server", "stacked")])
def test_accuracy_log_holds_every_sample_once(built_core: Path, tmp_path: Path, scenario: str, style: str) -> None:
    result = run_child(tmp_path, scenario=scenario, mode="AccuracyOnly", style=style, sleep_s=0, num_workers=2)
    assert "error" not in result, result["error"]
    entries = json.loads((result["log_dir"] / "mlperf_log_accuracy.json").read_text(encoding="utf-8"))
    assert sorted(e["qsl_idx"] for e in entries) == list(range(QSL_SIZE))
    for entry in entries:
        assert bytes.fromhex(entry["data"]) == expected_response(entry["qsl_idx"], style).tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_runner_exception_reaches_run_test(built_core: Path, tmp_path: Path, scenario: str) -> None:
    started = time.monotonic()
    result = run_child(tmp_path, scenario=scenario, fail_at_batch=3, num_workers=2)
    assert result["error"] == "ZeroDivisionError: fake runner failed on batch 4"
    # No more Python calls after the failure (the other worker may have been inside run_batch already).
    assert len(result["batches"]) <= 5
    assert "mlperf_harness: error in run_batch: ZeroDivisionError" in result["stderr"]
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_bad_user_conf_contents_and_second_test(built_core: Path, tmp_path: Path) -> None:
    result = run_child(tmp_path, user_conf="*.Offline.min_duration = soon\n", scenario="Offline", run_twice=True)
    assert result["error"].startswith("ValueError: LoadGen could not read user.conf ")
    assert str(tmp_path / "user.conf") in result["error"]
    assert result["second_error"].startswith("RuntimeError: run_test may run only once per process")


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "mode"), [("Offline", "AccuracyOnly"), ("Server", "PerformanceOnly"),
                                              ("Server", "AccuracyOnly")])
def test_continuous_runner_completes_every_sample_once(built_core: Path, tmp_path: Path, scenario: str,
                                                       mode: str) -> None:
    result = run_child(tmp_path, scenario=scenario, mode=mode, slots=8)
    assert "error" not in result, result["error"]
    assert 1 <= result["most_in_flight"] <= 8  # never more taken than the engine asked for
    if mode == "PerformanceOnly":
        assert "Result is : VALID" in summary(result)
        return
    entries = json.loads((result["log_dir"] / "mlperf_log_accuracy.json").read_text(encoding="utf-8"))
    assert sorted(e["qsl_idx"] for e in entries) == list(range(QSL_SIZE))
    for entry in entries:
        assert bytes.fromhex(entry["data"]) == expected_response(entry["qsl_idx"], "list").tobytes()
    if scenario == "Offline":  # one sorted query, taken in order as slots free up
        lengths = [sample_length(i) for batch in result["batches"] for i in batch]
        assert lengths == sorted(lengths, reverse=True)


@pytest.mark.slow
@pytest.mark.parametrize(("job", "message"), [
    ({"fail_after": 20}, "ZeroDivisionError: fake engine failed after 20 samples"),
    ({"return_early": True}, "run_continuous returned before session.take said the test was over"),
    ({"complete_twice": True}, "session.complete: id"),
    ({"first_twice": True, "token_responses": True}, "had its first token already"),
])
def test_continuous_runner_failure_reaches_run_test(built_core: Path, tmp_path: Path, job: dict,
                                                    message: str) -> None:
    started = time.monotonic()
    result = run_child(tmp_path, scenario="Server", slots=8, **job)
    assert message in result["error"]
    assert time.monotonic() - started < 30  # LoadGen still ended: the rest were answered empty


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["PerformanceOnly", "AccuracyOnly"])
def test_streamed_first_tokens_reach_loadgen_before_completion(built_core: Path, tmp_path: Path, mode: str) -> None:
    """An engine that reports first tokens when it takes samples (session.first_tokens): LoadGen's first-token
    latencies are those reports' times, well under the samples' whole latencies (each is held 1-3 steps of 5 ms),
    and in accuracy mode LoadGen logs each sample's reported first token beside its response."""
    conf = USER_CONF + "bert.Server.use_token_latencies = 1\n"
    result = run_child(tmp_path, conf, scenario="Server", mode=mode, slots=8, first_tokens=True, token_responses=True)
    assert "error" not in result, result["error"]
    if mode == "PerformanceOnly":
        text = summary(result)
        mean = float(re.search(r"Mean latency \(ns\)\s*: (\d+)", text).group(1))
        first = float(re.search(r"Mean First Token latency \(ns\)\s*: (\d+)", text).group(1))
        assert first < mean - 3e6, (first, mean)  # samples wait 10 ms on average after their first token
        return
    entries = json.loads((result["log_dir"] / "mlperf_log_accuracy.json").read_text(encoding="utf-8"))
    assert sorted(e["qsl_idx"] for e in entries) == list(range(QSL_SIZE))
    for entry in entries:
        response = expected_response(entry["qsl_idx"], "list")
        assert bytes.fromhex(entry["data"]) == response.tobytes()
        assert bytes.fromhex(entry["token_data"]) == response[:1].tobytes()
        assert entry["token_count"] == len(response)


if __name__ == "__main__":
    sys.exit(_child_main(json.loads(sys.argv[1])))


def test_builds_of_one_round_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two builds at once (two test sessions of one checkout) never compile into the same folder together."""
    from code.harness import build as builder

    spans: list[tuple[float, float]] = []

    def slow_build(round_, compiler, jobs, clean):  # noqa: ANN001, ANN202 - stands in for CMake
        start = time.monotonic()
        time.sleep(0.3)
        spans.append((start, time.monotonic()))
        return tmp_path / "module.so"

    monkeypatch.setattr(builder, "harness_build_dir", lambda round_name: tmp_path / "harness" / round_name)
    monkeypatch.setattr(builder, "_build_with", slow_build)
    monkeypatch.setattr(builder, "_has_shared_cxx_runtime", lambda module: True)
    threads = [threading.Thread(target=builder.build, args=(CORE_ROUND,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (first, second) = sorted(spans)
    assert first[1] <= second[0], spans  # the second began after the first had ended
    assert (tmp_path / "harness" / CORE_ROUND / builder.BUILD_LOCK).is_file()


def test_a_compiler_replaced_once_is_not_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CXX that links a static C++ runtime (the GPU machines' /opt/gcc) is replaced by the system compiler; later
    builds use the replacement at once instead of configuring and compiling twice on every make run."""
    from code.harness import build as builder

    static, system = str(tmp_path / "static-g++"), builder.SYSTEM_COMPILERS[0]
    built_with: list[tuple[str, bool]] = []

    def fake_build(round_, compiler, jobs, clean):  # noqa: ANN001, ANN202 - stands in for CMake
        built_with.append((compiler, clean))
        return tmp_path / ("static.so" if compiler == static else "shared.so")

    monkeypatch.setattr(builder, "harness_build_dir", lambda round_name: tmp_path / "harness" / round_name)
    (tmp_path / "harness" / CORE_ROUND).mkdir(parents=True)
    monkeypatch.setattr(builder, "_build_with", fake_build)
    monkeypatch.setattr(builder, "_has_shared_cxx_runtime", lambda module: module.name == "shared.so")
    monkeypatch.setattr(builder.shutil, "which", lambda name: name)
    round_ = builder.get_round(CORE_ROUND)
    assert builder._build_or_rebuild(round_, static, 2, False).name == "shared.so"
    assert built_with == [(static, False), (system, True)], "tried, found static, rebuilt with the system's"
    built_with.clear()
    assert builder._build_or_rebuild(round_, static, 2, False).name == "shared.so"
    assert built_with == [(system, False)], "the next build goes straight to the replacement, incrementally"


@pytest.mark.parametrize("token_responses", [True, False])
def test_token_responses_report_each_response_count_to_loadgen(tmp_path, token_responses):
    """With token responses on, every response tells LoadGen its count of int32 tokens (its bytes / 4; the fake
    answers 1 to 7 four-byte values, 4 on average), which LoadGen's token latencies sum (llama3.1-8b, TEST06)."""
    conf = USER_CONF + "bert.Offline.use_token_latencies = 1\n"
    result = run_child(tmp_path, conf, scenario="Offline", token_responses=token_responses)
    text = summary(result)
    samples = float(re.search(r"Samples per second: ([\d.]+)", text).group(1))
    tokens = float(re.search(r"Tokens per second: ([\d.]+)", text).group(1))
    if token_responses:
        assert 3.5 < tokens / samples < 4.5
    else:
        assert tokens == 0.0
