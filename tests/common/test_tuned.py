"""The tuned-value store (code/config/tuned.py) and where config resolution puts it: round trip, stale and corrupt
files (ignored with one warning naming the fix), a folder that cannot be written, and RUN_ARGS > tuned > config
class > default, as ``make info`` shows it."""

import json
import os
import subprocess
import sys

import pytest

from code.common import paths
from code.common.constants import Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.config import tuned
from code.config.resolve import device_share, resolve_config
from code.config.resolved import LAYERS, Provenance, WorkloadSetting, where_from
from code.mlperf.user_conf import user_conf_entries


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tuned, "code_version", lambda: "v-test")
    monkeypatch.setattr(tuned, "system_id", lambda: "Test CPU, 2 cores; no GPU")
    tuned._warned.clear()
    return tmp_path / "tuned"


def test_round_trip(store):
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe 10.2 samples/s")
    assert path == store / "CPU" / "bert-99" / "Offline.json"
    (record,) = json.loads(path.read_text())["values"]
    assert record["value"] == 11.2 and record["code_version"] == "v-test" and record["system"] == "CPU"
    assert record["system_id"] == "Test CPU, 2 cores; no GPU" and record["how"] == "probe 10.2 samples/s"
    assert record["date"]
    value, problem = tuned.read_tuned("CPU", "bert-99", Scenario.Offline)
    assert problem is None and value.value == 11.2
    assert tuned.tuned_fields("CPU", "bert-99", Scenario.Offline) == {
        "offline_expected_qps": (11.2, f"tuned ({path})")}
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Server) == (None, None)  # none stored: silent


def test_singlestream_value_stays_an_integer(store):
    tuned.write_tuned("CPU", "bert-99", Scenario.SingleStream, 89518472, "probe")
    value, _ = tuned.read_tuned("CPU", "bert-99", Scenario.SingleStream)
    assert value.value == 89518472 and isinstance(value.value, int)


def _warnings(capsys, call):
    call()
    return [line for line in capsys.readouterr().out.splitlines() if "ignoring" in line]


@pytest.mark.parametrize("change,words", [
    ({"code_version": "v-old"}, "found by code version v-old, this is v-test"),
    ({"system": "H200_x1"}, "found on system H200_x1, not CPU"),
    ({"system_id": "Other CPU, 64 cores; no GPU"}, "measured on other hardware (Other CPU, 64 cores"),
])
def test_a_stale_file_is_ignored_with_one_warning_naming_the_fix(store, capsys, change, words):
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe")
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "values": [{**stored["values"][0], **change}]}))
    lines = _warnings(capsys, lambda: [tuned.tuned_fields("CPU", "bert-99", Scenario.Offline) for _ in range(3)])
    assert len(lines) == 1, lines  # once per process, however often the config is resolved
    assert words in lines[0]
    assert 'make find_performance RUN_ARGS="--benchmarks=bert-99 --scenarios=offline"` again, or delete the file' \
        in lines[0]
    assert tuned.tuned_fields("CPU", "bert-99", Scenario.Offline) == {}


@pytest.mark.parametrize("text", [
    "{not json",
    "",
    "[1, 2]",
    json.dumps({"field": "offline_expected_qps", "value": "fast"}),
    json.dumps({"system": "CPU", "benchmark": "bert-99", "scenario": "Offline", "field": "offline_expected_qps",
                "value": -3, "how": "", "date": "", "code_version": "v-test"}),
    json.dumps({"system": "CPU", "benchmark": "bert-99", "scenario": "Offline", "field": "server_target_qps",
                "value": 3, "how": "", "date": "", "code_version": "v-test"}),
])
def test_a_corrupt_file_is_ignored_with_a_warning_not_a_traceback(store, capsys, text):
    path = store / "CPU" / "bert-99" / "Offline.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    lines = _warnings(capsys, lambda: tuned.tuned_fields("CPU", "bert-99", Scenario.Offline))
    assert len(lines) == 1 and "it is corrupt" in lines[0] and "or delete the file" in lines[0]


def test_a_damaged_store_is_kept_beside_before_a_new_value_replaces_it(store, capsys):
    """find_performance on a store cut in half: its text is moved to a .corrupt copy the warning names, never
    deleted, and a second damaged store does not overwrite the first copy."""
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe", {"gpu_batch_size": "8"})
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 15.0, "probe", {"gpu_batch_size": "16"})
    damaged = path.read_text()[: len(path.read_text()) // 2]
    path.write_text(damaged)
    capsys.readouterr()
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 3.0, "probe")
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "cannot read it" in line]
    aside = path.with_name("Offline.json.corrupt")
    assert f"moved it to {aside}, and a new file holds the new value" in line
    assert aside.read_text() == damaged
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline)[0].value == 3.0
    path.write_text("{")
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 4.0, "probe")
    assert aside.read_text() == damaged and path.with_name("Offline.json.corrupt-2").read_text() == "{"


def test_an_unwritable_folder_names_the_fix(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(paths, "TUNED_DIR", blocker / "tuned")  # under a file: unwritable even for root
    with pytest.raises(tuned.TunedStoreError, match="make it writable .*or point MLPERF_TUNED_DIR"):
        tuned.check_writable("CPU")
    with pytest.raises(tuned.TunedStoreError, match="cannot write tuned values"):
        tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 1.0, "x")


def _resolve(overrides=None, scenario=Scenario.Offline):
    return resolve_config(Benchmark.BERT, scenario, "CPU", WorkloadSetting(), overrides or {})


def test_precedence_run_args_over_tuned_over_config(store):
    plain = _resolve()
    assert plain["offline_expected_qps"] == 6.0 and plain.sources["offline_expected_qps"] == "CPU"
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe")
    config = _resolve()
    assert config["offline_expected_qps"] == 11.2
    assert config.sources["offline_expected_qps"] == f"tuned ({path})"
    assert config.replaced["offline_expected_qps"] == (6.0, "CPU")
    given = _resolve({"offline_expected_qps": 3.0})
    assert given["offline_expected_qps"] == 3.0 and given.sources["offline_expected_qps"] == "RUN_ARGS"
    assert _resolve(scenario=Scenario.Server).sources["server_target_qps"] == "CPU"  # per scenario
    assert config.as_dict()["sources"]["offline_expected_qps"].startswith("tuned (")


def test_a_tuned_value_is_the_whole_systems_and_never_scaled(store):
    """A system served by its GPU model's class: the config's rate is per GPU x the count, but what
    find_performance measured was the whole system's, so it is used as stored."""
    def resolve():
        return resolve_config(Benchmark.BERT, Scenario.Server, "H200_SXM_141GBx2", WorkloadSetting(), {})

    scaled = resolve()
    first = scaled.rung.name  # the engine a run starts with
    assert scaled.sources["server_target_qps"] == f"H200_SXM_141GB engine_ladder[{first}] x 2 GPUs"
    path = tuned.write_tuned("H200_SXM_141GBx2", "bert-99", Scenario.Server, 13_000.0, "search",
                             engine=first)  # measured with the engine a run starts with
    config = resolve()
    assert (config["server_target_qps"], config.sources["server_target_qps"]) == (13_000.0, f"tuned ({path})")
    assert config.replaced["server_target_qps"] == (scaled["server_target_qps"],
                                                   f"H200_SXM_141GB engine_ladder[{first}] x 2 GPUs")
    assert resolve_config(Benchmark.BERT, Scenario.Server, "H200_SXM_141GBx4", WorkloadSetting(), {}).sources[
        "server_target_qps"] == f"H200_SXM_141GB engine_ladder[{first}] x 4 GPUs"  # tuned per system


def test_make_info_shows_the_tuned_source(tmp_path):
    env = {**os.environ, "MLPERF_TUNED_DIR": str(tmp_path / "tuned")}
    code = ("import sys; from code.common import paths; from code.config import tuned; from pathlib import Path; "
            "from code.common.constants "
            "import Scenario; paths.TUNED_DIR = Path(sys.argv[1]); "
            "tuned.write_tuned('CPU', 'bert-99', Scenario.Offline, 11.2, 'probe')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "tuned")], cwd=REPO_ROOT, check=True, env=env)
    info = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--system_name=CPU",
                           "--scenarios=offline"], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    line = next(line for line in info.stdout.splitlines() if "offline_expected_qps" in line)
    assert "11.2" in line and f"[tuned ({tmp_path / 'tuned' / 'CPU' / 'bert-99' / 'Offline.json'})]" in line
    stale = tmp_path / "tuned" / "CPU" / "bert-99" / "Offline.json"
    stale.write_text(stale.read_text().replace('"code_version": "', '"code_version": "old-'))
    info = subprocess.run([sys.executable, "-m", "code.main", "--action=info", "--system_name=CPU",
                           "--scenarios=offline"], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert info.returncode == 0 and "Traceback" not in info.stderr
    assert info.stdout.count("ignoring") == 1 and "[CPU]" in info.stdout


def test_a_value_holds_only_for_the_settings_it_was_measured_with(store, capsys):
    settings = tuned.run_settings({"precision": "fp32", "gpu_batch_size": 2, "test_run": True, "min_duration": 5000,
                                   "offline_expected_qps": 4.0})
    assert settings == {"gpu_batch_size": "2", "precision": "fp32"}, "durations and the tuned field do not count"
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe", settings)
    assert json.loads(path.read_text())["values"][0]["settings"] == settings
    same = _resolve({"precision": "fp32", "gpu_batch_size": 2, "test_run": True})
    assert same.sources["offline_expected_qps"] == f"tuned ({path})"
    other = _resolve({"precision": "fp32"})
    assert other.sources["offline_expected_qps"] == "CPU"
    (warning,) = [line for line in capsys.readouterr().out.splitlines() if "ignoring" in line]
    assert "measured with --gpu_batch_size=2 --precision=fp32, this run gives --precision=fp32" in warning
    assert "run `make find_performance` with this run's RUN_ARGS" in warning


def test_no_warning_of_a_stored_value_when_run_args_give_it(tmp_path):
    """A stored value measured with other settings is warned about only when the run would have used it: the
    warning's own fix is to give the value, and a run that gives it must not hear it again."""
    env = {**os.environ, "MLPERF_TUNED_DIR": str(tmp_path / "tuned")}
    code = ("import sys; from code.common import paths; from code.config import tuned; from pathlib import Path; "
            "from code.common.constants "
            "import Scenario; paths.TUNED_DIR = Path(sys.argv[1]); "
            "tuned.write_tuned('CPU', 'bert-99', Scenario.Offline, 11.2, 'probe', {'gpu_batch_size': '8'})")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "tuned")], cwd=REPO_ROOT, check=True, env=env)
    info = ["--action=info", "--system_name=CPU", "--benchmarks=bert", "--scenarios=offline", "--model_name=tiny",
            "--gpu_batch_size=16"]

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "code.main", *info, *args], cwd=REPO_ROOT, capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    assert "or give the value with --offline_expected_qps" in run()  # the value would be the config's: said
    given = run("--offline_expected_qps=100")
    assert "ignoring" not in given and "[tuned]" not in given


def _miss(engine: str) -> tuned.EngineMiss:
    return tuned.EngineMiss(engine, {"precision": "fp8"}, "f1 = 89.1 (target 90.783)",
                            ["F1 89.100 below target 90.783"], "/logs/x", "2026-11-26T10:00:00+0000", "v-test")


def test_engine_misses_round_trip_and_keep_one_checkpoint(store):
    identity = [{"file": "model.pytorch", "size": 10, "mtime_ns": 1}]
    path = tuned.record_miss("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline, "/m/model.pytorch", identity,
                             _miss("fp8-fast-accum"))
    assert path == store / "H200_SXM_141GBx1" / "bert-99.9" / "Offline.misses.json"  # beside the tuned value
    tuned.record_miss("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline, "/m/model.pytorch", identity, _miss("fp8"))
    stored, problem = tuned.read_misses("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline)
    assert problem is None and [miss.engine for miss in stored.misses] == ["fp8-fast-accum", "fp8"]
    assert stored.misses[0].failures == ["F1 89.100 below target 90.783"] and stored.checkpoint_identity == identity
    # a miss on another checkpoint replaces the record: the earlier misses said nothing of this one
    tuned.record_miss("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline, "/m/model.pytorch",
                      [{**identity[0], "mtime_ns": 2}], _miss("fp8"))
    stored, _ = tuned.read_misses("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline)
    assert [miss.engine for miss in stored.misses] == ["fp8"] and stored.checkpoint_identity[0]["mtime_ns"] == 2
    tuned.clear_misses("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline)
    assert tuned.read_misses("H200_SXM_141GBx1", "bert-99.9", Scenario.Offline) == (None, None)


def test_corrupt_engine_misses_are_ignored_naming_the_fix(store):
    path = tuned.misses_path("CPU", "bert-99", Scenario.Offline)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "misses": [{"engine": "fp8"}]')
    stored, problem = tuned.read_misses("CPU", "bert-99", Scenario.Offline)
    assert stored is None and problem.startswith(f"ignoring {path}: it is corrupt (")
    assert problem.endswith("delete it (the accuracy gate then tries the ladder from its first engine again)")


def test_a_moved_test_folder_points_its_records_at_the_new_place(tmp_path):
    from code.mlperf.run_logs import relocate_test
    from code.mlperf.run_record import RunRecord, write_record

    old = tmp_path / "run" / "CPU" / "bert-99" / "Offline"
    old.mkdir(parents=True)
    write_record(old, RunRecord({"result": {"log_dir": str(old)}, "command": ["x", str(old / "test_spec.json")],
                                 "provenance": {"inputs": str(tmp_path / "data")}}))
    (old / "test_spec.json").write_text(json.dumps({"log_dir": str(old), "overrides": {"log_dir": str(tmp_path)}}))
    new = relocate_test(old, tmp_path / "run" / "gate" / "fp8" / "CPU" / "bert-99" / "Offline")
    assert not old.exists() and new.is_dir()
    moved = json.loads((new / "metadata.json").read_text())
    assert moved["result"]["log_dir"] == str(new) and moved["command"][1] == str(new / "test_spec.json")
    assert moved["provenance"]["inputs"] == str(tmp_path / "data")  # paths elsewhere stay
    spec = json.loads((new / "test_spec.json").read_text())
    assert spec["log_dir"] == str(new) and spec["overrides"]["log_dir"] == str(tmp_path)


def test_a_stored_record_that_cannot_be_read_is_ignored_with_its_fix(store):
    """The tuned value and the engine misses are read the same way: absent is silent, unreadable names the fix."""
    assert tuned.read_misses("CPU", "bert-99", Scenario.Offline) == (None, None)
    tuned_file = tuned.tuned_path("CPU", "bert-99", Scenario.Offline)
    for path in (tuned_file, tuned.misses_path("CPU", "bert-99", Scenario.Offline)):
        path.mkdir(parents=True)  # a folder where the file should be: reading it is an OSError
    value, problem = tuned.read_tuned("CPU", "bert-99", Scenario.Offline)
    assert value is None and problem.startswith(f"ignoring {tuned.shown(tuned_file)}: cannot read it")
    assert problem.endswith("or delete the file")
    misses, problem = tuned.read_misses("CPU", "bert-99", Scenario.Offline)
    assert misses is None and "cannot read it" in problem and problem.endswith("from its first engine again)")


def test_values_of_other_settings_are_kept_side_by_side(store, capsys):
    """find_performance with other flags stores its value beside the earlier one, never over it; a value found
    again with the same settings replaces the earlier one and says so."""
    fp32, bs4 = {"precision": "fp32"}, {"precision": "fp32", "gpu_batch_size": "4"}
    path = tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 11.2, "probe", fp32)
    assert tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 15.0, "probe", bs4) == path
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 16.0, "probe", bs4, engine="fast")
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline, fp32)[0].value == 11.2
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline, bs4)[0].value == 15.0
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline, bs4, engine="fast")[0].value == 16.0
    capsys.readouterr()
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 12.0, "probe", fp32)
    assert "12 replaces 11.2 (found " in capsys.readouterr().out
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline, fp32)[0].value == 12.0
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline, bs4)[0].value == 15.0


def test_a_file_of_one_value_is_still_read(store):
    """A store written before values were kept side by side holds one record, not a list: it still counts."""
    record = {"system": "CPU", "benchmark": "bert-99", "scenario": "Offline", "field": "offline_expected_qps",
              "value": 9.5, "how": "probe", "date": "2026-11-01T00:00:00+0000", "code_version": "v-test",
              "system_id": "Test CPU, 2 cores; no GPU", "settings": {}, "schema": 1, "engine": ""}
    path = store / "CPU" / "bert-99" / "Offline.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline)[0].value == 9.5
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, 3.0, "probe", {"precision": "fp16"})
    assert tuned.read_tuned("CPU", "bert-99", Scenario.Offline)[0].value == 9.5  # kept beside the new one


WRITER = """
import sys
from pathlib import Path
from code.common import paths
from code.config import tuned
from code.common.constants import Scenario

paths.TUNED_DIR = Path(sys.argv[1])
tuned.code_version = lambda: "v-test"
tuned.system_id = lambda: "Test CPU, 2 cores; no GPU"
for round in range(20):
    tuned.write_tuned("CPU", "bert-99", Scenario.Offline, float(sys.argv[2]) + round, "probe",
                      {"gpu_batch_size": sys.argv[2]})
"""


def test_writers_at_once_lose_no_value(store):
    """Four find_performance runs at once, each with its own flags: every one's value survives."""
    runs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(size)], cwd=REPO_ROOT)
            for size in (1, 2, 4, 8)]
    assert [run.wait(timeout=120) for run in runs] == [0, 0, 0, 0]
    for size in (1, 2, 4, 8):
        value, problem = tuned.read_tuned("CPU", "bert-99", Scenario.Offline, {"gpu_batch_size": str(size)})
        assert problem is None and value.value == size + 19


def test_where_from_names_the_layer_of_each_value(store):
    """One function answers where a number comes from: default, class, rung, tuned or RUN_ARGS, with the source
    and, for a tuned value, what it replaced."""
    def resolve(**overrides):
        return resolve_config(Benchmark.BERT, Scenario.Server, "H200_SXM_141GBx2", WorkloadSetting(), overrides)

    config = resolve(seed=7)
    first = config.rung.name
    assert where_from(config, "seed").layer == "RUN_ARGS"
    assert where_from(config, "log_enable_trace") == Provenance("log_enable_trace", False, "default", "default")
    assert where_from(config, "server_target_qps").layer == "rung"
    assert where_from(config, "server_target_qps").source == f"H200_SXM_141GB engine_ladder[{first}] x 2 GPUs"
    assert where_from(config, "sort_by_length").layer == "class"
    assert {layer for layer in config.layers.values()} <= set(LAYERS)
    below = config["server_target_qps"]
    path = tuned.write_tuned("H200_SXM_141GBx2", "bert-99", Scenario.Server, 13_000.0, "search", engine=first)
    found = where_from(resolve(), "server_target_qps")
    assert (found.layer, found.value, found.source) == ("tuned", 13_000.0, f"tuned ({path})")
    assert found.replaced == (below, f"H200_SXM_141GB engine_ladder[{first}] x 2 GPUs")
    assert str(found).startswith("server_target_qps = 13000.0: tuned, tuned (") and "over " in str(found)
    with pytest.raises(KeyError, match="offline_expected_qps is not a field of bert-99 Server"):
        where_from(config, "offline_expected_qps")


def test_devices_scale_the_rate_once(store):
    """--devices=0,1 on a system of eight GPUs expects a quarter of its rate: the resolution scales it once, and the
    run's user.conf writes it as it is (nothing left to scale on the devices it names). A tuned value measured
    without --devices is ignored (a speed-changing flag), and a rate RUN_ARGS give is the run's own."""
    def resolve(**overrides):
        return resolve_config(Benchmark.BERT, Scenario.Offline, "H200_SXM_141GBx8", WorkloadSetting(), overrides)

    whole = resolve()
    config = resolve(devices="0,1")
    assert (config["offline_expected_qps"], config.device_share) == (whole["offline_expected_qps"] / 4, 0.25)
    assert config.sources["offline_expected_qps"] == f"{whole.sources['offline_expected_qps']}, x 2/8 GPUs " \
                                                      "(--devices=0,1)"
    assert where_from(config, "offline_expected_qps").layer == "rung"
    rest = device_share(["cuda:0", "cuda:1"], 8) / config.device_share
    assert user_conf_entries(config, 10833, device_share=rest)["target_qps"] == repr(config["offline_expected_qps"])
    given = resolve(devices="0,1", offline_expected_qps=5_000.0)
    assert (given["offline_expected_qps"], given.device_share) == (5_000.0, 1.0)
    assert resolve(devices="0,1,2,3,4,5,6,7").device_share == 1.0
