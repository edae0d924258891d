"""Several devices on the CPU: one fake runner per "device", fed by the C++ core's batcher against the real LoadGen,
either in the LoadGen process or each in a worker process of its own (code/harness/workers.py: real processes and
sockets, the product's protocol; only the runner inside is fake).

What the dispatch must do, whatever the devices are: complete every sample exactly once, give a faster device more
work (work stealing), send each Server batch to the least loaded device, and end cleanly when one device fails or
its worker is killed (the run's error names the device, LoadGen's logs stay). Each LoadGen test runs in a child
process (one test per process): this file, run as a script with a JSON job; a fake worker is this file too, run
with ``worker`` first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from code.common.gpu_models import by_name
from code.common.paths import REPO_ROOT
from tests.conftest import CORE_ROUND

QSL_SIZE = 240
CHILD_TIMEOUT_S = 90
USER_CONF = """\
bert.*.performance_sample_count_override = 0
*.Offline.min_duration = 300
*.Offline.min_query_count = 100
*.Offline.target_qps = 10000
*.Server.min_duration = 1500
*.Server.min_query_count = 300
*.Server.target_qps = 300
"""


def response_of(index: int) -> np.ndarray:
    return np.array([index, index * 3 + 1], dtype=np.int64)


def die_now() -> None:
    """What the out-of-memory killer does to a worker: SIGKILL, no cleanup, no last word."""
    os.kill(os.getpid(), signal.SIGKILL)


class SleepyRunner:
    """A device whose batches take ``per_batch_s`` (plus ``per_sample_s`` a sample); fails once it has been given
    more than ``fail_after`` samples (with ``die``: its process is killed instead)."""

    def __init__(self, per_batch_s: float, per_sample_s: float, fail_after: int | None, die: bool = False) -> None:
        self.per_batch_s, self.per_sample_s, self.fail_after, self.die = per_batch_s, per_sample_s, fail_after, die
        self.samples: list[int] = []
        self.busy = 0
        self.most_busy = 0
        self.lock = threading.Lock()

    def run_batch(self, sample_indices: np.ndarray) -> list[np.ndarray]:
        with self.lock:
            self.busy += 1
            self.most_busy = max(self.most_busy, self.busy)
            self.samples.extend(int(i) for i in sample_indices)
            given = len(self.samples)
        try:
            if self.fail_after is not None and given > self.fail_after:
                if self.die:
                    die_now()
                raise MemoryError("fake device ran out of memory")
            time.sleep(self.per_batch_s + self.per_sample_s * len(sample_indices))
            return [response_of(int(i)) for i in sample_indices]
        finally:
            with self.lock:
                self.busy -= 1


class SleepyEngine:
    """A continuous-batching device: up to ``slots`` samples, each done after ``steps`` steps of ``step_s``."""

    def __init__(self, slots: int, step_s: float, fail_after: int | None, die: bool = False,
                 first_tokens: bool = False) -> None:
        self.slots, self.step_s, self.fail_after, self.die = slots, step_s, fail_after, die
        self.first_tokens = first_tokens  # report each sample's first token (its first 4 bytes) when taken
        self.samples: list[int] = []
        self.returned_cleanly = False

    def run_continuous(self, session) -> None:  # noqa: ANN001 - the core's Session
        running: dict[int, list[int]] = {}
        while True:
            got = session.take(self.slots - len(running), 0.0 if running else 0.01)
            if got is None and not running:
                self.returned_cleanly = True
                return
            if got is not None:
                for response_id, index in zip(got[0].tolist(), got[1].tolist(), strict=True):
                    running[response_id] = [index, 1 + index % 3]
                    self.samples.append(index)
                if self.first_tokens and len(got[0]):
                    session.first_tokens(got[0], np.array([response_of(i).view(np.int32)[0] for i in got[1].tolist()],
                                                          dtype=np.int32))
            time.sleep(self.step_s)
            for response_id in list(running):
                running[response_id][1] -= 1
                if running[response_id][1] == 0:
                    index = running.pop(response_id)[0]
                    session.complete(np.array([response_id], dtype=np.uint64), [response_of(index)])
            if self.fail_after is not None and len(self.samples) >= self.fail_after:
                if self.die:
                    die_now()
                raise MemoryError("fake engine ran out of memory")


def fake_runners(job: dict) -> list:
    """One fake runner per device, as the job describes them."""
    die = job.get("die", False)
    if job.get("continuous"):
        return [SleepyEngine(4, step, fail, die, job.get("first_tokens", False))
                for step, fail in zip(job["step_s"], job["fail"], strict=True)]
    return [SleepyRunner(batch, sample, fail, die)
            for batch, sample, fail in zip(job["per_batch_s"], job["per_sample_s"], job["fail"], strict=True)]


def _worker_main(job: dict, argv: list[str]) -> int:
    """A fake device's worker process: the product's ``serve`` over the inherited sockets, a fake runner inside."""
    import socket

    from code.common.supervision import die_with_parent
    from code.harness.workers import serve

    die_with_parent()
    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv)
    device = int(options["device"].split(":")[1])
    runner = fake_runners(job)[device]
    sockets = [socket.socket(fileno=int(fd)) for fd in options["fds"].split(",")]
    serve(sockets, runner, {"device": options["device"], "pid": os.getpid()})
    Path(job["log_dir"], f"worker{device}.json").write_text(json.dumps(
        {"samples": runner.samples, "most_busy": getattr(runner, "most_busy", None),
         "returned_cleanly": getattr(runner, "returned_cleanly", None)}), encoding="utf-8")
    return 0


def _child_main(job: dict) -> int:
    from code.harness.core import CoreSettings, progress, run_test, timeline
    from code.harness.workers import WorkerPlan, WorkerPool

    runners = fake_runners(job)
    names = [f"fake:{d}" for d in range(len(runners))]
    pool = None
    if job.get("workers"):
        plans = [WorkerPlan(name, "cpu", "", (), None) for name in names]
        pool = WorkerPool([sys.executable, __file__, "worker", json.dumps(job)], plans,
                          connections=job.get("num_workers", 1)).__enter__()
        pool.wait_ready()
    settings = CoreSettings(model="bert", scenario=job["scenario"], mode=job.get("mode", "PerformanceOnly"),
                            user_conf=Path(job["user_conf"]), log_dir=Path(job["log_dir"]),
                            total_sample_count=QSL_SIZE, performance_sample_count=QSL_SIZE,
                            max_batch_size=job.get("max_batch_size", 8), round=CORE_ROUND,
                            num_workers=job.get("num_workers", 1),
                            token_responses=job.get("token_responses", False))
    lengths = np.array([(i * 7919) % 383 + 1 for i in range(QSL_SIZE)], dtype=np.int64)
    result: dict = {}
    try:
        run_test(settings, lengths, pool.connections_for_core(bool(job.get("continuous"))) if pool else runners,
                 device_names=names)
    except Exception as exc:  # the parent checks type, message and the note naming the device
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["notes"] = list(getattr(exc, "__notes__", []))
    if pool is not None:  # what each worker's runner did, as it wrote it once told the test is over
        result["stats"] = pool.finish(timeout_s=10.0)
        result["exit_notes"] = pool.exit_notes()
        pool.stop()
        said = [Path(job["log_dir"], f"worker{d}.json") for d in range(len(runners))]
        seen = [json.loads(path.read_text()) if path.is_file() else {} for path in said]
        runners = [SimpleNamespace(samples=one.get("samples", []), most_busy=one.get("most_busy"),
                                   returned_cleanly=one.get("returned_cleanly")) for one in seen]
    times = timeline(CORE_ROUND).with_device_names(names)
    result.update(progress=progress(CORE_ROUND), per_device=times.per_device(), timeline_device=times.device.tolist(),
                  samples=[runner.samples for runner in runners],
                  most_busy=[getattr(runner, "most_busy", None) for runner in runners],
                  returned_cleanly=[getattr(runner, "returned_cleanly", None) for runner in runners])
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


def run_child(tmp_path: Path, user_conf: str = USER_CONF, **job: object) -> dict:
    conf = tmp_path / "user.conf"
    conf.write_text(user_conf, encoding="utf-8")
    job.update(user_conf=str(conf), log_dir=str(tmp_path / "logs"), result=str(tmp_path / "result.json"))
    proc = subprocess.run([sys.executable, __file__, json.dumps(job)], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    result["log_dir"] = tmp_path / "logs"
    result["stderr"] = proc.stderr
    return result


def accuracy_log(log_dir: Path) -> dict[int, bytes]:
    """QSL index -> response bytes, every entry of LoadGen's accuracy log (an index twice fails the test)."""
    seen: dict[int, bytes] = {}
    for entry in json.loads((log_dir / "mlperf_log_accuracy.json").read_text(encoding="utf-8")):
        assert entry["qsl_idx"] not in seen, f"sample {entry['qsl_idx']} completed twice"
        seen[entry["qsl_idx"]] = bytes.fromhex(entry["data"])
    return seen


@pytest.fixture(scope="module")
def built_core() -> Path:
    from code.harness.build import build

    return build(CORE_ROUND)


IN_PROCESS_OR_WORKERS = pytest.mark.parametrize("workers", [False, True], ids=["in-process", "worker-processes"])


@pytest.mark.slow
@IN_PROCESS_OR_WORKERS
@pytest.mark.parametrize("continuous", [False, True], ids=["batches", "continuous"])
def test_every_sample_once_across_devices(built_core: Path, tmp_path: Path, continuous: bool, workers: bool) -> None:
    job = ({"continuous": True, "step_s": [0.001, 0.001, 0.001], "fail": [None] * 3} if continuous else
           {"per_batch_s": [0.002] * 3, "per_sample_s": [0.0] * 3, "fail": [None] * 3})
    result = run_child(tmp_path, scenario="Offline", mode="AccuracyOnly", workers=workers, **job)
    assert "error" not in result, result["error"]
    logged = accuracy_log(result["log_dir"])
    assert sorted(logged) == list(range(QSL_SIZE))
    assert all(data == response_of(i).tobytes() for i, data in logged.items())
    taken = [i for device in result["samples"] for i in device]
    assert sorted(taken) == list(range(QSL_SIZE)), "each sample goes to exactly one device"
    assert all(result["samples"]), "every device got work"
    assert result["progress"]["completed_by_device"] == [len(device) for device in result["samples"]]
    assert sum(row["samples"] for row in result["per_device"]) == QSL_SIZE
    if workers:
        assert result["exit_notes"] == [] and all("host" in stats for stats in result["stats"])


@pytest.mark.slow
@IN_PROCESS_OR_WORKERS
def test_streamed_first_tokens_across_devices(built_core: Path, tmp_path: Path, workers: bool) -> None:
    """Engines on several devices, in this process or in workers, report first tokens before their responses:
    LoadGen logs each sample's reported first token beside its response, every sample once."""
    result = run_child(tmp_path, USER_CONF + "bert.Server.use_token_latencies = 1\n", scenario="Server",
                       mode="AccuracyOnly", workers=workers, continuous=True, step_s=[0.001] * 2, fail=[None] * 2,
                       first_tokens=True, token_responses=True)
    assert "error" not in result, result["error"]
    entries = json.loads((result["log_dir"] / "mlperf_log_accuracy.json").read_text(encoding="utf-8"))
    assert sorted(entry["qsl_idx"] for entry in entries) == list(range(QSL_SIZE))
    for entry in entries:
        response = response_of(entry["qsl_idx"])
        assert bytes.fromhex(entry["data"]) == response.tobytes()
        assert bytes.fromhex(entry["token_data"]) == response.tobytes()[:4]
    assert all(result["samples"]), "every device got work"


@pytest.mark.slow
@IN_PROCESS_OR_WORKERS
def test_offline_work_follows_each_devices_speed(built_core: Path, tmp_path: Path, workers: bool) -> None:
    # Device 0 is three times faster per sample: it takes about three times the samples, and both finish together.
    result = run_child(tmp_path, scenario="Offline", per_batch_s=[0.0, 0.0], per_sample_s=[0.0005, 0.0015],
                       fail=[None, None], max_batch_size=4, workers=workers)
    assert "error" not in result, result["error"]
    assert "Result is : VALID" in (result["log_dir"] / "mlperf_log_summary.txt").read_text(encoding="utf-8")
    fast, slow = (row["samples"] for row in result["per_device"])
    assert fast + slow == result["progress"]["completed"]
    assert 2.0 <= fast / slow <= 4.5, f"work should follow speed (3:1), got {fast}:{slow}"


@pytest.mark.slow
@IN_PROCESS_OR_WORKERS
def test_server_sends_each_batch_to_the_least_loaded_device(built_core: Path, tmp_path: Path, workers: bool) -> None:
    # Two workers per device: a device with a batch in flight still has a free worker, yet the idle device must
    # take the next batch first, so no device ever runs two batches while another runs none.
    result = run_child(tmp_path, scenario="Server", per_batch_s=[0.004] * 2, per_sample_s=[0.0] * 2,
                       fail=[None, None], num_workers=2, max_batch_size=2, workers=workers)
    assert "error" not in result, result["error"]
    shares = [row["share"] for row in result["per_device"]]
    assert min(shares) >= 0.35, f"equal devices should share the load, got {shares}"
    assert sum(result["progress"]["completed_by_device"]) == result["progress"]["completed"]


@pytest.mark.slow
@pytest.mark.parametrize("continuous", [False, True], ids=["batches", "continuous"])
def test_one_failing_device_ends_the_run_with_its_name(built_core: Path, tmp_path: Path, continuous: bool) -> None:
    job = ({"continuous": True, "step_s": [0.001, 0.001], "fail": [None, 20]} if continuous else
           {"per_batch_s": [0.002, 0.002], "per_sample_s": [0.0, 0.0], "fail": [None, 16]})
    result = run_child(tmp_path, scenario="Offline", **job)
    assert result["error"].startswith("MemoryError: fake")
    where = "run_continuous" if continuous else "run_batch"
    assert any(f"raised in {where} on fake:1 (device 2 of 2)" in note for note in result["notes"]), result["notes"]
    assert f"error in {where} on fake:1" in result["stderr"]
    assert (result["log_dir"] / "mlperf_log_detail.txt").is_file(), "LoadGen's logs of the run are kept"
    assert result["progress"]["completed"] == result["progress"]["issued"], "every issued sample is answered"
    if continuous:
        assert result["returned_cleanly"][0], "the healthy engine finishes what it holds and returns"


@pytest.mark.slow
@pytest.mark.parametrize("continuous", [False, True], ids=["batches", "continuous"])
@pytest.mark.parametrize("die", [False, True], ids=["raises", "killed"])
def test_one_failing_worker_ends_the_run_with_its_name(built_core: Path, tmp_path: Path, continuous: bool,
                                                       die: bool) -> None:
    """A worker's exception (its traceback) or its death by SIGKILL ends the test: the error names the device,
    the dead worker's end is said, every issued sample is answered, LoadGen's logs stay."""
    job = ({"continuous": True, "step_s": [0.001, 0.001], "fail": [None, 20]} if continuous else
           {"per_batch_s": [0.002, 0.002], "per_sample_s": [0.0, 0.0], "fail": [None, 16]})
    result = run_child(tmp_path, scenario="Offline", workers=True, die=die, **job)
    where = "run_continuous" if continuous else "run_batch"
    assert result["error"].startswith(f"DeviceError: {where} on fake:1 (device 2 of 2): "), result["error"]
    if die:
        assert "worker process closed its connection" in result["error"]
        assert len(result["exit_notes"]) == 1 and "fake:1" in result["exit_notes"][0]
        assert "was killed by SIGKILL" in result["exit_notes"][0]
    else:
        assert "MemoryError: fake" in result["error"] and "Traceback" in result["error"]
        assert result["exit_notes"] == [], "a worker that reported its error still ends cleanly"
    assert f"error in {where} on fake:1" in result["stderr"]
    assert (result["log_dir"] / "mlperf_log_detail.txt").is_file(), "LoadGen's logs of the run are kept"
    assert result["progress"]["completed"] == result["progress"]["issued"], "every issued sample is answered"
    assert "host" in result["stats"][0], "the healthy worker still reports"
    if continuous:
        assert result["returned_cleanly"][0], "the healthy engine finishes what it holds and returns"


def test_runner_lists_are_checked(tmp_path: Path) -> None:
    from code.harness.core import CoreSettings, run_test

    conf = tmp_path / "user.conf"
    conf.write_text(USER_CONF, encoding="utf-8")
    settings = CoreSettings(model="bert", scenario="Offline", mode="PerformanceOnly", user_conf=conf,
                            log_dir=tmp_path / "logs", total_sample_count=4, performance_sample_count=4,
                            max_batch_size=2, round=CORE_ROUND)
    lengths = np.ones(4, dtype=np.int64)
    with pytest.raises(ValueError, match="at least one"):
        run_test(settings, lengths, [])
    with pytest.raises(ValueError, match="mix run_batch and run_continuous"):
        run_test(settings, lengths, [SleepyRunner(0, 0, None), SleepyEngine(1, 0, None)])
    with pytest.raises(ValueError, match="2 names for 1 runners"):
        run_test(settings, lengths, [SleepyRunner(0, 0, None)], device_names=["a", "b"])


# --- the Python side: which devices, one backend instance each, and the figures per device ---


def gptj_config(scenario: str = "Offline", **overrides: object):  # noqa: ANN201 - ResolvedConfig
    from code.common.constants import Benchmark, Scenario
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting

    tiny = {"model_name": "tiny", "precision": "fp32", "input_data": "synthetic", "weights": "random",
            "synthetic_length_scale": 0.05, "synthetic_sample_count": 6}
    return resolve_config(Benchmark.GPTJ, Scenario(scenario), "CPU", WorkloadSetting(), {**tiny, **overrides})


def test_devices_on_a_cpu_run() -> None:
    from code.mlperf.benchmarks import InputsUnavailableError
    from code.mlperf.devices import resolve_devices

    assert resolve_devices(gptj_config(device="cpu")) == ["cpu"]
    with pytest.raises(InputsUnavailableError, match="--devices=0,1 names GPUs.*leave --devices out"):
        resolve_devices(gptj_config(device="cpu", devices="0,1"))


def test_devices_name_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from code.mlperf import devices as module
    from code.mlperf.benchmarks import InputsUnavailableError

    monkeypatch.setattr(module, "visible_gpus", lambda: 2)
    monkeypatch.setattr(module, "gpu_of", lambda device: by_name("H100_SXM_80GB"))  # what PyTorch would say
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    bf16 = {"device": "cuda", "precision": "bf16"}
    assert module.resolve_devices(gptj_config(**bf16)) == ["cuda:0", "cuda:1"]
    assert module.resolve_devices(gptj_config("SingleStream", **bf16)) == ["cuda:0"], "one sample in flight"
    assert module.resolve_devices(gptj_config("SingleStream", **bf16, devices="1")) == ["cuda:1"]
    assert module.resolve_devices(gptj_config(**bf16, devices="1")) == ["cuda:1"]
    assert module.resolve_devices(gptj_config(device="cuda:1", precision="bf16")) == ["cuda:1"]
    with pytest.raises(InputsUnavailableError, match=r"GPU 2 is not there.*CUDA_VISIBLE_DEVICES=4,5 shows 2"):
        module.resolve_devices(gptj_config(**bf16, devices="0,2"))
    with pytest.raises(InputsUnavailableError, match="names GPU 1 more than once"):
        module.resolve_devices(gptj_config(**bf16, devices="1,0,1"))
    with pytest.raises(InputsUnavailableError, match="--device=cuda:1 and --devices=0 disagree"):
        module.resolve_devices(gptj_config(device="cuda:1", precision="bf16", devices="0"))


def test_a_bad_device_list_is_refused_as_a_field() -> None:
    from code.config.fields import FIELDS, FieldError

    assert FIELDS["devices"].parse("0,1,7") == "0,1,7"
    for bad in ("gpu0", "0,", "cuda:0", "0;1"):
        with pytest.raises(FieldError, match=f"field 'devices' = '{bad}'"):
            FIELDS["devices"].parse(bad)


def test_out_of_memory_on_one_device_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import nullcontext
    from dataclasses import dataclass

    from code.mlperf import devices
    from code.mlperf.benchmarks import BenchmarkError

    monkeypatch.setattr(devices, "current_device", lambda device: nullcontext())  # no GPU here

    class OutOfMemoryError(RuntimeError):  # what torch.cuda raises, by name
        pass

    @dataclass(frozen=True)
    class Context:
        device: str
        seed: int

    class Backend:
        @staticmethod
        def options_from(config: object, context: Context) -> Context:
            return context

        def __init__(self, options: Context) -> None:
            if options.device == "cuda:1":
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            self.options = options

    config = gptj_config(device="cuda", precision="bf16")  # no stand-in: nothing caps the GPU's memory
    made = [devices.backend_on(device, config, Backend, Context("cuda:0", seed=7)) for device in ("cuda:0", "cuda:2")]
    assert [backend.options for backend in made] == [Context("cuda:0", 7), Context("cuda:2", 7)]
    with pytest.raises(BenchmarkError, match="cuda:1 ran out of memory.*leave it out with --devices"):
        devices.backend_on("cuda:1", config, Backend, Context("cuda:0", seed=7))
    with pytest.raises(BenchmarkError, match="^cuda:3 ran out of memory"):  # a worker names the run's device
        devices.backend_on("cuda:1", config, Backend, Context("cuda:0", seed=7), name="cuda:3")


def test_one_backend_instance_per_device() -> None:
    from code.common.constants import TestMode
    from code.gptj import benchmark

    prepared = benchmark.prepare_test(gptj_config(device="cpu"), TestMode.PerformanceOnly)
    assert prepared.devices == ["cpu"] and prepared.provenance["devices"] == ["cpu"]
    first, second = (prepared.runner_on("cpu", "cpu") for _ in range(2))
    assert first.backend is not second.backend, "each call builds its own backend instance"
    indices = np.array([0, 3], dtype=np.int64)
    for a, b in zip(first.run_batch(indices), second.run_batch(indices), strict=True):
        np.testing.assert_array_equal(a, b)


def test_cpu_workers_are_devices_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from code.mlperf import devices
    from code.mlperf.benchmarks import InputsUnavailableError
    from code.mlperf.devices import resolve_devices, torch_device

    assert resolve_devices(gptj_config(device="cpu", cpu_workers=3)) == ["cpu:0", "cpu:1", "cpu:2"]
    assert resolve_devices(gptj_config("SingleStream", device="cpu", cpu_workers=3)) == ["cpu"], "one in flight"
    assert [torch_device(name) for name in ("cpu:1", "cpu", "cuda:1")] == ["cpu", "cpu", "cuda:1"]
    monkeypatch.setattr(devices, "visible_gpus", lambda: 2)
    monkeypatch.setattr(devices, "gpu_of", lambda device: by_name("H100_SXM_80GB"))  # what PyTorch would say
    with pytest.raises(InputsUnavailableError, match="--cpu_workers=2 is for runs on the CPU"):
        resolve_devices(gptj_config(device="cuda", precision="bf16", cpu_workers=2))


def test_a_gpu_runs_only_the_engines_it_has_and_a_stand_in_no_more_than_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before anything loads: an FP8 engine on an A100 (compute capability 8.0) is refused, naming the field; a
    stand-in of higher capability than the GPU too (its engines would not run there); one of lower runs as itself."""
    from code.config.fields import FieldError
    from code.mlperf import devices
    from code.mlperf.benchmarks import InputsUnavailableError

    monkeypatch.setattr(devices, "visible_gpus", lambda: 1)
    monkeypatch.setattr(devices, "gpu_of", lambda device: by_name("A100_SXM4_80GB"))
    with pytest.raises(FieldError, match=r"precision=fp8.*cannot run on cuda.*need compute capability 8\.9"):
        devices.resolve_device(gptj_config(device="cuda", precision="fp8", kv_cache_dtype="fp8",
                                           backend="inflight"))
    with pytest.raises(InputsUnavailableError, match=r"--gpu_as=L40S has compute capability 8\.9 .* 8\.0"):
        devices.resolve_device(gptj_config(device="cuda", precision="bf16", gpu_as="L40S"))
    assert devices.resolve_device(gptj_config(device="cuda", precision="bf16", gpu_as="A100_SXM4_40GB")) == "cuda"


def test_runners_are_called_on_their_device() -> None:
    from code.mlperf.devices import on_device

    batch, engine = SleepyRunner(0, 0, None), SleepyEngine(1, 0, None)
    assert on_device(batch, "cpu").runner is batch  # on the CPU too: an out-of-memory batch names the fix
    wrapped = on_device(batch, "cuda:1")
    assert wrapped.runner is batch and wrapped.device == "cuda:1" and not hasattr(wrapped, "run_continuous")
    assert hasattr(on_device(engine, "cuda:0"), "run_continuous") and not hasattr(on_device(engine, "cuda:0"),
                                                                                   "run_batch")


def test_expected_qps_follows_the_share_of_gpus_used() -> None:
    from code.common.constants import Benchmark, Scenario
    from code.config.resolve import device_share, resolve_config, scales_qps
    from code.config.resolved import WorkloadSetting
    from code.mlperf.user_conf import user_conf_entries

    assert device_share(["cuda:0"], 8) == 0.125
    assert device_share(["cuda:0", "cuda:1"], 2) == 1.0
    assert device_share(["cpu"], 0) == 1.0
    config = resolve_config(Benchmark.BERT, Scenario.Server, "CPU", WorkloadSetting(), {"server_target_qps": 80.0})
    assert user_conf_entries(config, 10833, device_share=0.125)["target_qps"] == "10.0"
    assert not scales_qps(config), "a rate given in RUN_ARGS is the run's own: not scaled"
    assert scales_qps(resolve_config(Benchmark.BERT, Scenario.Server, "CPU", WorkloadSetting(), {}))
    assert not scales_qps(resolve_config(Benchmark.BERT, Scenario.SingleStream, "CPU", WorkloadSetting(), {}))


def test_summary_and_report_show_each_device(tmp_path: Path) -> None:
    from code.harness.core import SampleTimes
    from code.mlperf.summary import _device_lines
    from code.report.pages import _device_table

    times = SampleTimes(index=np.arange(4), issued_s=np.zeros(4), completed_s=np.array([1.0, 1.0, 2.0, 2.0]),
                        length=np.array([10, 20, 30, 40]), device=np.array([0, 1, 0, 0], dtype=np.int32),
                        device_names=("cuda:0", "cuda:1"))
    rows = times.per_device()
    assert [(r["device"], r["samples"], r["input_tokens"]) for r in rows] == [("cuda:0", 3, 80), ("cuda:1", 1, 20)]
    assert rows[0]["samples_per_s"] == 1.5 and rows[1]["share"] == 0.25
    times.save(tmp_path / "times.npz")
    assert SampleTimes.load(tmp_path / "times.npz").per_device() == rows
    lines = _device_lines({"used": ["cuda:0", "cuda:1"], "expected_qps_share": 0.25, "completed": rows})
    assert "cuda:0 1.5/s (75.0%), cuda:1 0.5/s (25.0%)" in lines[0]
    assert "x 0.25 (2 of the system's GPUs)" in lines[1]
    assert _device_table(rows)[-1] == "| cuda:1 | 1 | 0.50 | 25.0% | 20 |"
    assert _device_table(rows[:1]) == []


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        sys.exit(_worker_main(json.loads(sys.argv[2]), sys.argv[3:]))
    sys.exit(_child_main(json.loads(sys.argv[1])))
