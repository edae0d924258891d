"""GPU power over a test's timed part (code/mlperf/power.py): energy from the counter or from integrated power, the
throttle reasons' names and shares, the timed window, an NVML failure during the test, and how the summary,
metadata.json, report.md and `make results` state it.

Every NVML here is ``FakeNvml``, a module-like stand-in with a made-up clock: these tests check the sampler's
logic and arithmetic only, never that a driver answers these calls as assumed (that needs a GPU).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from code.mlperf.power import (
    NoPower,
    PowerSampler,
    loadgen_time,
    power_line,
    power_sampler,
    reason_names,
    timed_window,
)
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord, read_record, write_record
from code.mlperf.summary import format_summary
from code.report.pages import REPORT_FILE, write_test_report
from code.report.results import Result, results_csv, results_table

POWER_CAP, THERMAL, IDLE = 0x4, 0x20, 0x1


class NVMLError(Exception):
    pass


class Clock:
    """The sampler's clock, moved by the test: every reading of a tick is at ``now``."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeNvml:
    """A stand-in for pynvml (logic only): GPUs whose power is ``power_w(index, t)`` watts at the clock's time ``t``,
    whose energy counter reads ``counter_w`` x t (None: Not Supported), SM clock 1,500 MHz, a 700 W limit and the
    reasons ``reasons(t)``. ``fail_at``: power readings fail from that time on. ``old_driver``: only the older
    throttle reasons call exists."""

    NVML_CLOCK_SM = 1

    def __init__(self, clock: Clock, gpus: int = 1, power_w=lambda index, t: 500.0, counter_w: float | None = 500.0,
                 reasons=lambda t: POWER_CAP, fail_at: float | None = None, old_driver: bool = False,
                 init_error: str | None = None) -> None:
        self.clock, self.gpus, self.power_w, self.counter_w = clock, gpus, power_w, counter_w
        self.reasons, self.fail_at, self.init_error = reasons, fail_at, init_error
        self.shut_down = False
        if not old_driver:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlInit(self) -> None:
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if self.fail_at is not None and self.clock.now >= self.fail_at:
            raise NVMLError("GPU is lost")
        return round(self.power_w(handle, self.clock.now) * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if self.counter_w is None:
            raise NVMLError("Not Supported")
        return round(self.counter_w * (1000 + self.clock.now) * 1000)  # mJ since the driver loaded, long ago

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return 1500 + handle

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return 700_000

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self._reasons(handle)

    def _reasons(self, handle: int) -> int:
        return self.reasons(self.clock.now)


def sampled(nvml: FakeNvml, clock: Clock, times: list[float], devices: tuple[str, ...] = ("cuda:0",)) -> PowerSampler:
    """A sampler run by hand: its first reading at times[0] (entering), one at each of the others, the last on
    exit; the thread's period is long enough never to tick."""
    sampler = power_sampler(devices, nvml=nvml, period_s=3600, clock=clock)
    assert isinstance(sampler, PowerSampler)
    clock.now = times[0]
    with sampler:
        for now in times[1:-1]:
            clock.now = now
            sampler.tick()
        clock.now = times[-1]
    return sampler


@pytest.fixture()
def clock() -> Clock:
    return Clock()


def every(start: float, stop: float, step: float = 0.1) -> list[float]:
    return [round(start + k * step, 6) for k in range(round((stop - start) / step) + 1)]


def test_energy_comes_from_the_counter_where_the_gpu_has_one(clock):
    # The counter says 600 W while the power readings say 500 W: the counter decides energy and the mean.
    nvml = FakeNvml(clock, counter_w=600.0)
    power = sampled(nvml, clock, every(9.95, 20.05)).trace.summarize((10.0, 20.0), samples=12_000)
    assert power["gpus"][0]["energy_from"] == "energy counter"
    assert power["energy_j"] == pytest.approx(6000.0) and power["mean_w"] == pytest.approx(600.0)
    assert power["max_w"] == 500.0 and power["samples_per_joule"] == pytest.approx(2.0)
    assert power["limit_w"] == 700.0 and power["sm_clock_mhz_median"] == 1500
    assert nvml.shut_down


def test_energy_is_integrated_power_without_a_counter(clock):
    # 100 W per second of a ramp: the trapezoids of a straight line are exact, cut at the window's edges.
    nvml = FakeNvml(clock, power_w=lambda index, t: 100.0 * t, counter_w=None)
    power = sampled(nvml, clock, every(9.95, 20.05)).trace.summarize((10.0, 20.0), samples=3000)
    assert power["gpus"][0]["energy_from"] == "integrated power"
    assert power["energy_j"] == pytest.approx(50.0 * (20.0**2 - 10.0**2), rel=1e-6)
    assert power["mean_w"] == pytest.approx(1500.0) and power["samples_per_joule"] == pytest.approx(0.2)


def test_readings_outside_the_timed_part_do_not_count(clock):
    # Loading draws 50 W with the GPU idle, the timed part 690 W, the tail after it 1,000 W.
    def draw(index: int, t: float) -> float:
        return 50.0 if t < 10 else 690.0 if t <= 20 else 1000.0

    nvml = FakeNvml(clock, power_w=draw, counter_w=None, reasons=lambda t: IDLE if t < 10 or t > 20 else POWER_CAP)
    power = sampled(nvml, clock, [0.0, 5.0, 9.0, *every(10.0, 20.0, 0.5), 25.0, 30.0]).trace.summarize(
        (10.0, 20.0), samples=100)
    assert power["readings"] == 21 and power["max_w"] == 690.0
    assert power["mean_w"] == pytest.approx(690.0) and power["throttle_reasons"] == {"power cap": 1.0}
    assert power["longest_gap_s"] == 0.5


def test_throttle_reasons_are_named_and_shared_over_the_readings(clock):
    assert reason_names(POWER_CAP | THERMAL) == ["power cap", "thermal"]
    assert reason_names(0) == [] and reason_names(0x40 | 0x8000) == ["hardware thermal", "0x8000"]
    # Thermal in the last of four readings of the window, on a driver with only the older call.
    nvml = FakeNvml(clock, old_driver=True, reasons=lambda t: POWER_CAP | (THERMAL if t >= 2.5 else 0))
    power = sampled(nvml, clock, [0.0, 1.0, 1.5, 2.0, 2.5, 4.0]).trace.summarize((1.0, 3.0), samples=10)
    assert power["throttle_reasons"] == {"power cap": 1.0, "thermal": 0.25}


def test_loadgen_window_is_read_from_the_detail_log():
    detail = {"power_begin": "01-02-2026 03:04:05.250", "power_end": "01-02-2026 03:14:05.000"}
    begin, end = timed_window(detail)
    assert begin == pytest.approx(time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, 0)) - time.timezone + 0.25)
    assert end - begin == pytest.approx(599.75)
    assert loadgen_time("01-02-2026 03:04:05") == int(begin)
    assert timed_window({}) is None and timed_window({"power_begin": "x", "power_end": "y"}) is None


def test_an_nvml_failure_during_the_test_stops_the_readings_not_the_test(clock):
    """On its thread: the readings stop at the failure, the ``with`` block (the test) ends normally, and the record
    says why power is missing."""
    nvml = FakeNvml(clock, fail_at=1.0)
    sampler = power_sampler(["cuda:0"], nvml=nvml, period_s=0.005, clock=clock)
    with sampler:
        clock.now = 1.0
        deadline = time.monotonic() + 2.0
        while sampler.trace.error is None and time.monotonic() < deadline:
            time.sleep(0.005)
        clock.now = 5.0
    assert sampler.trace.error == "NVMLError: GPU is lost" and nvml.shut_down
    section = sampler.section({"power_begin": "01-01-1970 00:00:00.500", "power_end": "01-01-1970 00:00:04.000"}, 10)
    assert section["power"] is None
    assert section["power_missing"] == ("NVML failed during the test (NVMLError: GPU is lost); the readings do not "
                                        "cover its timed part")


def test_a_failure_after_the_timed_part_keeps_the_figures(clock):
    nvml = FakeNvml(clock, fail_at=5.0)
    sampler = power_sampler(["cuda:0"], nvml=nvml, period_s=3600, clock=clock)
    with sampler:
        clock.now = 3.0
        sampler.tick()
        clock.now = 5.0  # the reading on exit fails: noted, not raised
    power = sampler.trace.summarize((0.0, 2.0), samples=10)
    assert power["energy_j"] == pytest.approx(1000.0) and power["note"].endswith("GPU is lost")


def test_a_failure_on_the_first_reading_reads_nothing(clock):
    sampler = power_sampler(["cuda:0"], nvml=FakeNvml(clock, fail_at=1.0), period_s=0.005, clock=clock)
    clock.now = 1.0  # after NVML was opened, before the first reading
    with sampler:
        pass
    assert sampler.trace.ticks == [] and "GPU is lost" in sampler.section({}, 1)["power_missing"]


def test_nothing_is_read_without_gpus_or_nvml(clock):
    assert power_sampler(["cpu"]).section({}, 5) == {
        "power": None, "power_missing": "no GPU among the test's devices (cpu)"}
    no_nvml = power_sampler(["cuda:0"], nvml=FakeNvml(clock, init_error="Driver Not Loaded"))
    assert isinstance(no_nvml, NoPower) and no_nvml.why == "NVML unavailable: Driver Not Loaded"
    assert power_sampler(["cuda:0"], why_not="not a performance test").section({}, 5)["power_missing"] == (
        "not a performance test")


def test_the_run_s_gpus_are_found_through_cuda_visible_devices(clock, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    nvml = FakeNvml(clock, gpus=8, power_w=lambda index, t: 100.0 * index, counter_w=None)
    power = sampled(nvml, clock, [0.0, 1.0, 2.0], devices=("cuda:0", "cuda:1")).trace.summarize((0.5, 1.5), 10)
    assert [(g["device"], g["nvml_device"], g["mean_w"]) for g in power["gpus"]] == [("cuda:0", "3", 300.0),
                                                                                    ("cuda:1", "5", 500.0)]
    assert power["mean_w"] == 800.0 and power["max_w"] == 800.0 and power["sm_clock_mhz_median"] == 1504
    missing = power_sampler(["cuda:2"], nvml=FakeNvml(clock, gpus=8))
    assert missing.why == "cuda:2 is not among the GPUs CUDA_VISIBLE_DEVICES shows NVML"


ONE_GPU = {"mean_w": 693.2, "max_w": 700.0, "energy_j": 415_920.0, "samples_per_joule": 11.94,
           "sm_clock_mhz_median": 1515.0, "limit_w": 700.0, "throttle_reasons": {"power cap": 0.97, "idle": 0.004},
           "gpus": [{"device": "cuda:0", "mean_w": 693.2, "max_w": 700.0, "limit_w": 700.0, "energy_j": 415_920.0,
                     "sm_clock_mhz_median": 1515.0, "throttle_reasons": {"power cap": 0.97, "idle": 0.004}}]}


def test_the_power_line():
    assert power_line(ONE_GPU) == ("power: 693 W mean (limit 700 W), 11.9 samples/J, SM clock 1,515 MHz median; "
                                   "throttled by power cap 97%, idle <1% of readings")
    two = {**ONE_GPU, "mean_w": 1380.0, "samples_per_joule": 0.0571, "throttle_reasons": {},
           "gpus": [{**ONE_GPU["gpus"][0], "mean_w": 690.0}, {**ONE_GPU["gpus"][0], "mean_w": 690.0}]}
    assert power_line(two) == ("power: 1,380 W mean over 2 GPUs (690, 690 W; limit 700 W each), 0.0571 samples/J, "
                               "SM clock 1,515 MHz median; no clock throttling")
    bare = {"mean_w": 250.0, "samples_per_joule": None, "sm_clock_mhz_median": None, "throttle_reasons": None,
            "gpus": [{"device": "cuda:0", "mean_w": 250.0, "limit_w": None}]}
    assert power_line(bare) == "power: 250 W mean"


def record_of(tmp_path: Path, devices: list[str], **power: object) -> RunRecord:
    result = TestResult("Offline", "PerformanceOnly", str(tmp_path), metric="samples_per_second", value=8276.0,
                        unit="samples/s", valid=True)
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_record(tmp_path, RunRecord.of(result, devices={"used": devices}, **power))
    return read_record(tmp_path)  # as metadata.json holds it


def test_summary_and_metadata_state_power_only_where_it_was_read(tmp_path):
    on_gpu = record_of(tmp_path / "gpu", ["cuda:0"], power=ONE_GPU)
    assert on_gpu.power == ONE_GPU and json.loads((tmp_path / "gpu" / "metadata.json").read_text())["power"]
    lost = record_of(tmp_path / "lost", ["cuda:0"], power=None, power_missing="NVML failed during the test (x)")
    on_cpu = record_of(tmp_path / "cpu", ["cpu"], power=None, power_missing="no GPU among the test's devices (cpu)")
    assert json.loads((tmp_path / "cpu" / "metadata.json").read_text())["power"] is None
    text = format_summary("H200_SXM_141GBx1", tmp_path, [("bert-99", on_gpu.result, on_gpu)]).splitlines()
    figure = next(i for i, line in enumerate(text) if "samples_per_second = 8,276.000" in line)
    assert text[figure + 1] == f"      {power_line(ONE_GPU)}"
    text = format_summary("H200_SXM_141GBx1", tmp_path, [("bert-99", lost.result, lost)])
    assert "      power: not measured (NVML failed during the test (x))" in text
    assert "power" not in format_summary("CPU", tmp_path, [("bert-99", on_cpu.result, on_cpu)])


def test_report_md_states_power(tmp_path):
    folder = tmp_path / "H200_SXM_141GBx2" / "bert-99" / "Offline"
    folder.mkdir(parents=True)
    (folder / "mlperf_log_detail.txt").write_text("")
    second = {**ONE_GPU["gpus"][0], "device": "cuda:1", "throttle_reasons": {"power cap": 0.5, "thermal": 0.6}}
    two = {**ONE_GPU, "gpus": [ONE_GPU["gpus"][0], second]}
    record_of(folder, ["cuda:0", "cuda:1"], power=two)
    write_test_report(folder)
    text = (folder / REPORT_FILE).read_text()
    assert f"- {power_line(two)}" in text
    assert "| cuda:1 | 693 | 700 | 700 | 415,920 | 1,515 | thermal 60%, power cap 50% |" in text


def test_make_results_shows_samples_per_joule_where_a_record_has_power(tmp_path):
    def result(system: str, per_joule: float | None) -> Result:
        return Result(system, "bert-99", "Offline", 1, "performance", "samples_per_second", 8276.0, "samples/s",
                      "VALID", 0.0, tmp_path, samples_per_joule=per_joule)

    assert "samples/J" not in results_table([result("CPU", None)])
    lines = results_table([result("CPU", None), result("H200_SXM_141GBx1", 11.94)]).splitlines()
    assert lines[0].split()[8:10] == ["unit", "samples/J"]
    assert lines[2].split()[9] == "-" and lines[3].split()[9] == "11.94"
    rows = results_csv([result("H200_SXM_141GBx1", 11.94)]).splitlines()
    assert rows[0].split(",")[8] == "samples_per_joule" and rows[1].split(",")[8] == "11.94"
