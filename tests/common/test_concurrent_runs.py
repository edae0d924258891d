"""Two runs at once never read each other's files: each test's user.conf lives in its own log folder.

Two `run_harness` invocations of the same system, benchmark and scenario run side by side with different target
QPS, through the real LoadGen; each must record and run with its own. (The engine, shared by design, is built
once before.)
"""

import json
import os
import subprocess
import sys
import time

import pytest

from code.common.constants import ExitCode
from code.common.paths import LIB_DIR, REPO_ROOT
from code.mlperf.run_logs import read_detail_log

pytestmark = pytest.mark.slow
TINY_SERVER = ["--scenarios=server", "--model_name=tiny", "--precision=fp32", "--device=cpu", "--gpu_batch_size=8",
               "--input_data=synthetic", "--synthetic_sample_count=64", "--min_duration=6000", "--min_query_count=1"]


def test_two_runs_at_once_keep_their_own_settings(tmp_path, harness_built):
    build = tmp_path / "build"
    build.mkdir()
    (build / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    env = {**os.environ, "MLPERF_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1"}

    def main(*args: str, **popen_args) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "code.main", *TINY_SERVER, *args], cwd=REPO_ROOT, env=env,
                                stdout=popen_args.pop("stdout", subprocess.PIPE), stderr=subprocess.STDOUT, text=True)

    engines = main("--action=generate_engines")
    assert engines.wait(timeout=120) == 0, engines.stdout.read()

    rates = {"a": 20.0, "b": 35.0}
    outputs = {name: tmp_path / f"{name}.out" for name in rates}
    runs = {}
    for name, qps in rates.items():
        with open(outputs[name], "w") as out:
            runs[name] = main("--action=run_harness", f"--server_target_qps={qps}",
                              f"--log_dir={tmp_path / name}", stdout=out)
    overlapped = False  # both inside LoadGen at one moment
    deadline = time.monotonic() + 240
    while any(run.poll() is None for run in runs.values()) and time.monotonic() < deadline:
        texts = [path.read_text() for path in outputs.values()]
        overlapped |= all("starting LoadGen" in t and "LoadGen finished" not in t for t in texts)
        time.sleep(0.1)
    for name, run in runs.items():
        # Both runs must finish; a 6 s Server test on a busy 2-core machine may miss early stopping (INVALID, exit
        # 3), which is not what this test is about.
        assert run.wait(timeout=5) in (ExitCode.OK, ExitCode.INVALID), outputs[name].read_text()
    assert overlapped, "the two runs never ran LoadGen at the same time"

    for name, qps in rates.items():
        test_dir = tmp_path / name / "CPU" / "bert-99" / "Server"
        assert f"bert.Server.target_qps = {qps}" in (test_dir / "user.conf").read_text()
        metadata = json.loads((test_dir / "metadata.json").read_text())
        assert metadata["config"]["fields"]["server_target_qps"] == qps
        assert f"bert.Server.target_qps = {qps}" in metadata["user_conf"]
        assert read_detail_log(test_dir)["requested_server_target_qps"] == qps  # what LoadGen ran with
    assert sorted(p.name for p in build.iterdir()) == ["engines", "lib"]  # nothing shared was written
