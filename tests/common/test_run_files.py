"""user.conf generation, log folders that never overwrite, LoadGen detail-log parsing, link_dirs."""

import errno
import json
import os
from pathlib import Path

import pytest

from code.common.constants import Benchmark, Scenario, TestMode
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting
from code.mlperf.run_logs import LogDirError, make_test_log_dir, new_run_root, performance_result
from code.mlperf.run_record import RunRecord, write_record
from code.mlperf.user_conf import user_conf_entries, write_user_conf


def resolved(scenario, **overrides):
    return resolve_config(Benchmark.BERT, scenario, "CPU", WorkloadSetting(), overrides)


def test_user_conf_per_scenario(tmp_path):
    offline = user_conf_entries(resolved(Scenario.Offline), sample_count=10833)
    assert offline == {"target_qps": "6.0"}
    server = user_conf_entries(resolved(Scenario.Server, server_target_qps=2.5), sample_count=10833)
    assert server == {"target_qps": "2.5"}
    single = user_conf_entries(resolved(Scenario.SingleStream), sample_count=10833)
    assert single == {"target_latency": "300.0"}  # ms, from 300,000,000 ns

    path = write_user_conf(resolved(Scenario.Offline, test_run=True), sample_count=10833, directory=tmp_path)
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines == ["bert.Offline.target_qps = 6.0", "bert.Offline.min_duration = 60000",
                     "bert.Offline.min_query_count = 1"]


def test_explicit_durations_win_over_test_run_and_small_sets_override_sample_count():
    entries = user_conf_entries(resolved(Scenario.Offline, test_run=True, min_duration=5000), sample_count=20)
    assert entries["min_duration"] == "5000"
    assert entries["performance_sample_count_override"] == "20"


@pytest.mark.parametrize(("benchmark", "scenario", "rate", "loaded"), [
    (Benchmark.LLAMA31, Scenario.Offline, {"offline_expected_qps": 30.0}, "660"),  # 1.1 x 30/s x 20 s
    (Benchmark.LLAMA31, Scenario.Server, {"server_target_qps": 8.0}, "176"),
    (Benchmark.GPTJ, Scenario.Offline, {"offline_expected_qps": 44.0}, "968"),
])
def test_a_short_equal_issue_test_loads_what_its_duration_issues(benchmark, scenario, rate, loaded):
    """LoadGen pads an equal-issue benchmark's queries to a multiple of the loaded samples: a --test_run on a GPU
    that loaded the whole set of 13,368 would run for minutes, not its 20 s."""
    config = resolve_config(benchmark, scenario, "H200_SXM_141GBx1", WorkloadSetting(),
                            {"test_run": True, "min_duration": 20000, **rate})
    assert user_conf_entries(config, sample_count=13368)["performance_sample_count_override"] == loaded
    given = resolve_config(benchmark, scenario, "H200_SXM_141GBx1", WorkloadSetting(),
                           {"test_run": True, "min_duration": 20000, "synthetic_sample_count": 2000, **rate})
    assert user_conf_entries(given, sample_count=2000)["performance_sample_count_override"] == "2000"
    full = resolve_config(benchmark, scenario, "H200_SXM_141GBx1", WorkloadSetting(), rate)
    assert "performance_sample_count_override" not in user_conf_entries(full, sample_count=13368)
    bert = resolve_config(Benchmark.BERT, scenario, "H200_SXM_141GBx1", WorkloadSetting(), {"test_run": True})
    assert "performance_sample_count_override" not in user_conf_entries(bert, sample_count=10833)


def test_log_folders_are_never_reused(tmp_path, monkeypatch):
    monkeypatch.setattr("code.mlperf.run_logs.LOGS_DIR", tmp_path / "logs")
    first, second = new_run_root(), new_run_root()
    assert first != second and first.exists() and second.exists()
    test_dir = make_test_log_dir(first, "CPU", "bert-99", Scenario.Offline, TestMode.PerformanceOnly, False)
    assert test_dir == first / "CPU" / "bert-99" / "Offline"
    with pytest.raises(LogDirError, match="refusing to overwrite"):
        make_test_log_dir(first, "CPU", "bert-99", Scenario.Offline, TestMode.PerformanceOnly, False)
    accuracy = make_test_log_dir(second, "CPU", "bert-99", Scenario.Server, TestMode.AccuracyOnly, True)
    assert accuracy == second / "CPU" / "bert-99" / "Server" / "accuracy"
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "mlperf_log_summary.txt").write_text("old")
    with pytest.raises(LogDirError, match="already holds files"):
        new_run_root(str(tmp_path / "used"))


def _detail(tmp_path, records):
    lines = [":::MLLOG " + json.dumps({"key": key, "value": value, "metadata": {}}) for key, value in records]
    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")


def test_performance_result_valid_and_invalid(tmp_path):
    _detail(tmp_path, [("result_validity", "VALID"), ("result_samples_per_second", 12.5),
                       ("result_min_duration_met", True), ("result_min_queries_met", True),
                       ("early_stopping_met", True)])
    result = performance_result(tmp_path, Scenario.Offline)
    assert (result.valid, result.value, result.unit, result.invalid_reasons) == (True, 12.5, "samples/s", [])

    _detail(tmp_path, [("result_validity", "INVALID"), ("result_scheduled_samples_per_sec", 3.0),
                       ("result_perf_constraints_met", False), ("result_min_duration_met", True),
                       ("result_invalid_reason", "Reduce target QPS to improve latency. ")])
    result = performance_result(tmp_path, Scenario.Server)
    assert result.valid is False and result.value == 3.0
    assert result.invalid_reasons[0] == "latency constraint not met"

    _detail(tmp_path, [("result_validity", "VALID"), ("early_stopping_latency_ss", 2_500_000),
                       ("error_invalid_config", "Multiple conf files are used")])
    result = performance_result(tmp_path, Scenario.SingleStream)
    assert result.value == pytest.approx(2.5) and result.unit == "ms"
    assert result.valid is False and "1 LoadGen error(s)" in result.invalid_reasons[-1]
    assert result.metric == "90th_percentile_latency"

    # with token latencies on (llama3.1-8b), the same estimate is of the time to first token
    _detail(tmp_path, [("result_validity", "VALID"), ("early_stopping_latency_ss", 66_571_493),
                       ("requested_use_token_latencies", True), ("result_90.00_percentile_latency_ns", 1.05e9)])
    result = performance_result(tmp_path, Scenario.SingleStream)
    assert (result.metric, result.value) == ("90th_percentile_first_token_latency", pytest.approx(66.571493))


def test_link_dirs_local_and_scratch(tmp_path, monkeypatch):
    from scripts import link_dirs

    dirs = tuple(tmp_path / "build" / name for name in ("data", "models", "preprocessed_data"))
    monkeypatch.setattr(link_dirs, "LINKED", dirs)
    link_dirs.link_dirs(None)
    assert all(d.is_dir() and not d.is_symlink() for d in dirs)
    scratch = tmp_path / "scratch"
    link_dirs.link_dirs(str(scratch))
    assert all(d.is_symlink() and d.resolve() == scratch / d.name for d in dirs)
    dirs[0].unlink()
    dirs[0].mkdir()
    (dirs[0] / "dev-v1.1.json").write_text("{}")
    with pytest.raises(link_dirs.LinkDirsError, match="move them to"):
        link_dirs.link_dirs(str(scratch))


def test_metadata_json_is_whole_or_the_earlier_one_when_the_disk_fills(tmp_path, monkeypatch):
    """A full disk mid-write leaves the test's "not finished" record and no temporary file, never half a JSON."""
    write_record(tmp_path, RunRecord({"result": {"complete": False}}))
    real_write = Path.write_text

    def disk_fills_halfway(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", disk_fills_halfway)
    with pytest.raises(OSError, match="No space left"):
        write_record(tmp_path, RunRecord({"result": {"complete": True, "valid": True},
                                          "config": {"big": "x" * 10000}}))
    monkeypatch.undo()
    assert json.loads((tmp_path / "metadata.json").read_text()) == {"result": {"complete": False}}
    assert [p.name for p in tmp_path.iterdir()] == ["metadata.json"]


def test_metadata_json_has_the_usual_permissions(tmp_path):
    """Replaced whole, yet readable by the group and others as any file the run writes (the umask decides)."""
    umask = os.umask(0o022)
    try:
        write_record(tmp_path, RunRecord({"result": {}}))
        (tmp_path / "plain.txt").write_text("")
    finally:
        os.umask(umask)
    assert (tmp_path / "metadata.json").stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777


def test_cut_short_loadgen_logs_are_refused_before_they_are_read(tmp_path):
    """Whole logs pass; one cut mid-line (with room on the disk) is an IncompleteLogError naming it."""
    from code.mlperf.run_logs import IncompleteLogError, check_loadgen_logs

    (tmp_path / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    (tmp_path / "mlperf_log_detail.txt").write_text(':::MLLOG {"key": "result_validity", "value": "VALID"}\n')
    (tmp_path / "mlperf_log_accuracy.json").write_text("[\n]\n")
    check_loadgen_logs(tmp_path)
    (tmp_path / "mlperf_log_accuracy.json").write_text('[\n{"seq_id": 0, "qsl_idx": 0, "data": "0A')
    with pytest.raises(IncompleteLogError, match=f"^{tmp_path / 'mlperf_log_accuracy.json'} is missing or cut"):
        check_loadgen_logs(tmp_path)
    (tmp_path / "mlperf_log_accuracy.json").write_text("[\n]\n")
    (tmp_path / "mlperf_log_summary.txt").write_text("")
    with pytest.raises(IncompleteLogError, match="mlperf_log_summary.txt is missing or cut short"):
        check_loadgen_logs(tmp_path)


@pytest.mark.parametrize(("system", "round_name", "scenario", "key", "size"), [
    # CPU is an edge system (systems/CPU.json): v5.1 and v6.1 take its llama3.1-8b as llama3.1-8b-edge
    ("CPU", "v6.1", Scenario.Offline, "llama3_1-8b-edge", 5000),
    ("CPU", "v6.1", Scenario.SingleStream, "llama3_1-8b-edge", 5000),
    ("CPU", "v5.1", Scenario.Offline, "llama3_1-8b-edge", 5000),
    # a datacenter,edge system runs the datacenter set, which the checker names llama3.1-8b
    ("H200_SXM_141GBx1", "v6.1", Scenario.Offline, "llama3_1-8b", 13368),
    ("H200_SXM_141GBx1", "v5.1", Scenario.Offline, "llama3_1-8b", 13368),
])
def test_loadgen_reads_the_key_of_the_set_a_llama_run_uses(tmp_path, system, round_name, scenario, key, size):
    """The core's model and user.conf's prefix are the mlperf.conf key of the set the run loads: an edge run's is
    llama3_1-8b-edge, whose 5,000-sample counts need no override; a datacenter run's llama3_1-8b (13,368)."""
    import numpy as np

    from code.llama31.benchmark import data_set
    from code.mlperf.benchmarks import PreparedTest
    from code.processes.run_single_test import test_settings

    config = resolve_config(Benchmark.LLAMA31, scenario, system, WorkloadSetting(), {"round": round_name})
    assert data_set(config) == ("edge" if key.endswith("-edge") else "datacenter")  # the same rule picks the data
    prepared = PreparedTest(sample_lengths=np.ones(size, np.int32), performance_sample_count=size,
                            runner_on=lambda device, name: None, devices=["cpu"],
                            evaluate_accuracy=lambda log_dir: None, provenance={}, token_responses=True)
    user_conf, settings = test_settings(config, TestMode.PerformanceOnly, prepared, tmp_path)
    assert settings.model == key
    lines = [line for line in user_conf.read_text().splitlines() if not line.startswith("#")]
    assert lines and all(line.startswith(f"{key}.{scenario.value}.") for line in lines), lines
    assert not any("performance_sample_count_override" in line for line in lines)  # the key's own count
    assert settings.performance_sample_count == size


def test_a_benchmark_without_an_edge_set_keeps_its_key_on_an_edge_system(tmp_path, monkeypatch):
    """bert-99 on the CPU system (edge) has no edge set: its key stays bert. A llama3.1-8b run on a system of no
    known type runs the datacenter set, under llama3_1-8b."""
    from code.common import systems
    from code.config.resolve import loadgen_model

    assert loadgen_model(resolved(Scenario.SingleStream)) == "bert"
    monkeypatch.setattr(systems, "SYSTEMS_DIR", tmp_path)  # no descriptions at all
    llama = resolve_config(Benchmark.LLAMA31, Scenario.Offline, "CPU", WorkloadSetting(), {"round": "v6.1"})
    assert loadgen_model(llama) == "llama3_1-8b"
