"""A noisy machine is named: the host's load from /proc (code/common/host_load.py), read on the power sampler's one
thread (code/mlperf/power.py), and the summary's ``noise:`` line (code/mlperf/noise.py).

The logic is tested with recorded inputs: /proc files written to a folder (as a 2-CPU virtual machine with steal
shows them) and a stand-in for NVML. The real /proc of the machine running the tests is read once too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from code.common.host_load import (
    CLOCK_TICKS,
    CpuTimes,
    HostReader,
    HostReading,
    host_line,
    host_summary,
    parse_cpu_times,
    parse_own_ticks,
)
from code.mlperf.noise import gpu_findings, host_findings, noise_line
from code.mlperf.power import PowerSampler, power_sampler
from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord, read_record, write_record
from code.mlperf.summary import format_summary
from tests.common.test_power import POWER_CAP, Clock, FakeNvml

# /proc/stat of a machine with three CPUs; the run may use CPUs 0 and 2. Columns: user nice system idle iowait irq
# softirq steal guest guest_nice.
STAT = """cpu  3000 0 600 9000 300 0 100 200 0 0
cpu0 1000 0 200 3000 100 0 0 100 0 0
cpu1 1000 0 200 3000 100 0 100 0 0 0
cpu2 1000 0 200 3000 100 0 0 100 0 0
intr 123456
ctxt 999
"""
# /proc/self/stat of a process whose command holds a space and a parenthesis: utime 150, stime 50.
SELF_STAT = "4242 (python (x) y) R 1 4242 4242 0 -1 4194304 100 0 0 0 150 50 0 0 20 0 9 0 100 1000 200\n"


class FakeProc:
    """A folder standing in for /proc: loadavg, stat and self/stat, changed by the test between readings."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "self").mkdir(parents=True)
        self.set(load=0.5, stat=STAT, own_ticks=200)

    def set(self, load: float, stat: str, own_ticks: int) -> None:
        (self.root / "loadavg").write_text(f"{load:.2f} 1.00 1.00 3/400 12345\n")
        (self.root / "stat").write_text(stat)
        (self.root / "self" / "stat").write_text(SELF_STAT.replace(" 150 50 ", f" {own_ticks - 50} 50 "))


def stat_after(busy: int, idle: int, steal: int) -> str:
    """STAT with ``busy`` more user ticks, ``idle`` more idle ticks and ``steal`` more stolen ticks on CPUs 0 and 2
    each."""
    lines = STAT.splitlines()
    for index in (1, 3):
        fields = lines[index].split()
        fields[1] = str(int(fields[1]) + busy)
        fields[4] = str(int(fields[4]) + idle)
        fields[8] = str(int(fields[8]) + steal)
        lines[index] = " ".join(fields)
    return "\n".join(lines) + "\n"


def test_proc_files_are_read_for_the_usable_cpus_only():
    assert parse_cpu_times(STAT, (0, 2)) == CpuTimes(total=2 * 4400, idle=2 * 3100, steal=200)
    assert parse_cpu_times(STAT, (7,)) is None
    assert parse_own_ticks(SELF_STAT) == 200
    old_kernel = "cpu0 10 0 5 100\n"  # four columns: no iowait, irq, softirq nor steal
    assert parse_cpu_times(old_kernel, (0,)) == CpuTimes(total=115, idle=100, steal=0)


def test_load_steal_and_own_use_over_the_timed_part(tmp_path):
    proc = FakeProc(tmp_path)
    reader = HostReader(proc=tmp_path, cpus=(0, 2))
    readings = [reader(9.0)]
    # Over 10 s: each of the two CPUs 60% busy, 10% stolen; this process used 1 CPU; the load average climbs.
    for second, load in ((10.0, 3.0), (15.0, 4.0), (20.0, 5.0)):
        proc.set(load, stat_after(busy=int(60 * (second - 9)), idle=int(30 * (second - 9)),
                                  steal=int(10 * (second - 9))), own_ticks=200 + int(CLOCK_TICKS * (second - 9)))
        readings.append(reader(second))
    host = host_summary(readings, (10.0, 20.0), usable_cpus=2)
    assert host["load_avg_1m"] == {"mean": 4.0, "max": 5.0} and host["readings"] == 3
    assert host["own_cpus"] == pytest.approx(1.0) and host["others_load"] == pytest.approx(3.0)
    assert host["steal_share"] == pytest.approx(0.1) and host["busy_share"] == pytest.approx(0.7)
    assert host_line(host) == ("host: load average 4.0 (max 5.0) over 2 usable CPUs; the test's process used 1.0 "
                               "CPUs; steal 10%, busy 70% of the usable CPUs' time")
    assert host_findings(host) == ["host loaded (load average 4.0 over 2 usable CPUs; the test's process used 1.0 "
                                   "of them)", "CPU steal 10% (a hypervisor gave the CPUs' time to other machines)"]
    assert host_summary(readings, (5.0, 20.0), 2) is None  # readings that do not bracket the timed part
    assert host_summary(readings, None, 2) is None


def host(load: float, own: float | None, steal: float | None = 0.0, usable: int = 2) -> dict:
    return {"usable_cpus": usable, "load_avg_1m": {"mean": load, "max": load}, "own_cpus": own,
            "others_load": None if own is None else max(0.0, load - own), "steal_share": steal, "busy_share": 0.9}


@pytest.mark.parametrize("reading,named", [
    (host(1.2, 1.0), False),  # below the usable CPUs
    (host(2.6, 2.0), False),  # a CPU run's own threads: 0.6 above its own use
    (host(4.6, 0.7), True),  # others ask for about 4 CPUs of 2
    (host(20.0, None, None, usable=16), True),  # no own use read: the load alone decides
    (host(0.5, 0.5, steal=0.02), False),  # steal of a few % is ordinary
])
def test_a_loaded_host_is_named_and_the_run_s_own_load_is_not(reading, named):
    assert bool(host_findings(reading)) is named


def power(reasons: dict | None, p5: float | None = 1980.0, p95: float | None = 1980.0) -> dict:
    return {"throttle_reasons": reasons, "sm_clock_mhz_p5": p5, "sm_clock_mhz_p95": p95}


def test_a_throttled_gpu_or_a_moving_clock_is_named():
    assert gpu_findings(power({"power cap": 0.97, "idle": 0.4, "sync boost": 1.0, "thermal": 0.02})) == [
        "GPU throttled by power cap 97% of readings"]
    assert gpu_findings(power({"thermal": 0.1, "hardware slowdown": 0.3})) == [
        "GPU throttled by hardware slowdown 30%, thermal 10% of readings"]
    assert gpu_findings(power({}, p5=1410.0, p95=1980.0)) == ["GPU SM clock moved 1,410-1,980 MHz (5th-95th "
                                                              "percentile)"]
    assert gpu_findings(power({}, p5=1950.0, p95=1980.0)) == []  # 1.5%: steady
    assert gpu_findings(power(None, None, None)) == [] and gpu_findings(None) == []


def sampler_of(tmp_path: Path, clock: Clock, nvml: FakeNvml | None, devices: tuple[str, ...]) -> PowerSampler:
    sampler = power_sampler(devices, nvml=nvml, period_s=3600, clock=clock,
                            host=HostReader(proc=tmp_path, cpus=(0, 2)))
    assert isinstance(sampler, PowerSampler)
    return sampler


def test_one_sampler_thread_reads_the_gpu_and_the_host(tmp_path):
    proc, clock = FakeProc(tmp_path / "proc"), Clock()
    # The clock drops under a power cap half-way through; NVML fails after the timed part.
    nvml = FakeNvml(clock, fail_at=30.0, reasons=lambda t: POWER_CAP if t >= 15 else 0)
    sampler = sampler_of(tmp_path / "proc", clock, nvml, ("cuda:0",))
    with sampler:
        assert [thread.name for thread in threading.enumerate()].count("power") == 1
        for second in (10.0, 15.0, 20.0, 30.0):
            clock.now = second
            proc.set(3.5, stat_after(busy=60 * int(second), idle=40 * int(second), steal=0), own_ticks=200)
            sampler.tick()
        clock.now = 31.0
    assert len(sampler.trace.host) == 6 and len(sampler.trace.ticks) == 4  # the GPU's stopped at its failure
    section = sampler.section({"power_begin": "01-01-1970 00:00:10.000", "power_end": "01-01-1970 00:00:20.000"},
                              samples=100)
    assert section["power"]["throttle_reasons"] == {"power cap": pytest.approx(2 / 3, abs=1e-4)}
    assert section["host_load"]["load_avg_1m"]["mean"] == 3.5 and section["host_load"]["usable_cpus"] == 2
    record = written(tmp_path / "test", ["cuda:0"], **section)
    assert noise_line(record) == ("noise: host loaded (load average 3.5 over 2 usable CPUs; the test's process used "
                                  "0.0 of them); GPU throttled by power cap 67% of readings")


def test_a_cpu_run_reads_the_host_alone(tmp_path):
    FakeProc(tmp_path / "proc")
    clock = Clock(5.0)
    sampler = sampler_of(tmp_path / "proc", clock, None, ("cpu",))
    with sampler:
        clock.now = 10.0
        sampler.tick()
        clock.now = 12.0
    section = sampler.section({"power_begin": "01-01-1970 00:00:06.000", "power_end": "01-01-1970 00:00:11.000"}, 5)
    assert section["power"] is None and section["power_missing"] == "no GPU among the test's devices (cpu)"
    assert section["host_load"]["load_avg_1m"] == {"mean": 0.5, "max": 0.5}
    assert noise_line(written(tmp_path / "test", ["cpu"], **section)) is None  # a quiet host: no line
    # An accuracy test reads nothing: no host, no thread.
    assert power_sampler(["cpu"], why_not="not a performance test").section({}, 1) == {
        "power": None, "power_missing": "not a performance test"}


def test_a_machine_without_proc_reads_nothing(tmp_path):
    reader = HostReader(proc=tmp_path / "none", cpus=(0,))
    assert reader(1.0) is None
    sampler = power_sampler(["cpu"], period_s=3600, host=reader)
    with sampler:
        pass
    assert sampler.section({"power_begin": "01-01-1970 00:00:00.000", "power_end": "01-01-1970 00:00:01.000"}, 1)[
        "host_load"] is None


def test_the_real_proc_of_this_machine():
    reader = HostReader()
    first = reader(time.time())
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # keep this process busy: its own CPU time must show
        sum(range(10_000))
    last = reader(time.time())
    assert isinstance(first, HostReading) and first.load_1m >= 0 and first.cpu is not None
    assert last.own_ticks > first.own_ticks and last.cpu.total > first.cpu.total
    summary = host_summary([first, last], (first.time_s, last.time_s), len(reader.cpus))
    assert 0.3 < summary["own_cpus"] <= len(reader.cpus) + 0.5 and 0 <= summary["steal_share"] < 1


def written(folder: Path, devices: list[str], **sections: object) -> RunRecord:
    result = TestResult("Offline", "PerformanceOnly", str(folder), metric="samples_per_second", value=100.0,
                        unit="samples/s", valid=True)
    folder.mkdir(parents=True, exist_ok=True)
    write_record(folder, RunRecord.of(result, devices={"used": devices}, **sections))
    return read_record(folder)


def test_the_summary_names_a_noisy_machine_in_one_line(tmp_path):
    noisy = written(tmp_path / "a", ["cuda:0"], host_load=host(4.6, 0.7),
                    power={"mean_w": 690.0, "gpus": [], "throttle_reasons": {"thermal": 0.5}, "sm_clock_mhz_p5": 1500,
                           "sm_clock_mhz_p95": 1980, "samples_per_joule": None, "sm_clock_mhz_median": 1700})
    text = format_summary("H200_SXM_141GBx1", tmp_path, [("bert-99", noisy.result, noisy)])
    lines = [line for line in text.splitlines() if "noise:" in line]
    assert lines == ["      noise: host loaded (load average 4.6 over 2 usable CPUs; the test's process used 0.7 of "
                     "them); GPU throttled by thermal 50% of readings; GPU SM clock moved 1,500-1,980 MHz (5th-95th "
                     "percentile)"]
    quiet = written(tmp_path / "b", ["cpu"], host_load=host(0.4, 0.3))
    assert "noise" not in format_summary("CPU", tmp_path, [("bert-99", quiet.result, quiet)])
