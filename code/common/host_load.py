"""The host's load during a performance test, from /proc, over LoadGen's timed part.

A figure measured while other programs used the CPUs, or while a hypervisor gave their time away (steal), is below
what the machine can do, and nothing in it says so: the summary names such a host (code/mlperf/noise.py), and
metadata.json's ``host_load`` keeps the numbers. Read each period on the test's sampler thread (code/mlperf/power.py):
the 1-minute load average of the whole machine, the CPU times of the CPUs this process may use, and this process's
own CPU time, so its threads are not taken for another program's. Reading /proc never fails a test.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common.placement import allowed_cpu_set

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""The unit of /proc's CPU times (USER_HZ, 100 on Linux): ticks per second."""


@dataclass(frozen=True)
class CpuTimes:
    """CPU time, in clock ticks, summed over the usable CPUs."""

    total: int  # user + nice + system + idle + iowait + irq + softirq + steal (guest time is inside user)
    idle: int  # idle + iowait
    steal: int


@dataclass(frozen=True)
class HostReading:
    """The host read once at ``time_s`` (seconds since the epoch, the sampler's clock)."""

    time_s: float
    load_1m: float
    cpu: CpuTimes | None  # None: /proc/stat names none of the usable CPUs
    own_ticks: int | None  # this process's user + system time; None: /proc/self/stat unreadable


def parse_cpu_times(text: str, cpus: Sequence[int]) -> CpuTimes | None:
    """The CPU times of ``/proc/stat`` summed over ``cpus`` (its ``cpuN`` lines); None when it names none of them."""
    wanted = {f"cpu{cpu}" for cpu in cpus}
    total = idle = steal = 0
    found = False
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in wanted:
            continue
        ticks = [int(value) for value in fields[1:9]] + [0] * max(0, 9 - len(fields))
        user, nice, system, idle_, iowait, irq, softirq, steal_ = ticks[:8]
        total += user + nice + system + idle_ + iowait + irq + softirq + steal_
        idle += idle_ + iowait
        steal += steal_
        found = True
    return CpuTimes(total, idle, steal) if found else None


def parse_own_ticks(text: str) -> int:
    """utime + stime of ``/proc/self/stat``, counted after the command's ``)`` (a command may hold spaces)."""
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


class HostReader:
    """Reads the host once per call; ``proc`` and ``cpus`` stand in for /proc and the affinity mask in tests."""

    def __init__(self, proc: Path = PROC, cpus: Sequence[int] | None = None) -> None:
        self.proc = proc
        self.cpus = tuple(cpus) if cpus is not None else allowed_cpu_set()

    def __call__(self, time_s: float) -> HostReading | None:
        load = self._parsed("loadavg", lambda text: float(text.split()[0]))  # "1.34 1.07 1.12 7/118 25573"
        if load is None:
            return None
        return HostReading(time_s, load, self._parsed("stat", lambda text: parse_cpu_times(text, self.cpus)),
                           self._parsed("self/stat", parse_own_ticks))

    def _parsed(self, name: str, parse: Callable[[str], Any]) -> Any:
        """``parse`` of the file ``name`` under ``proc``; None where it does not read or parse."""
        try:
            return parse((self.proc / name).read_text())
        except (OSError, ValueError, IndexError):
            return None


def host_summary(readings: Sequence[HostReading], window: tuple[float, float] | None,
                 usable_cpus: int) -> dict[str, Any] | None:
    """metadata.json's ``host_load`` over ``window`` (the timed part); None when the readings do not bracket it.

    ``load_avg_1m``: mean and max of the readings inside the window (the two around it for a window shorter than a
    period); ``own_cpus``: this process's CPU time over the window's length (2.0: two CPUs busy all along);
    ``others_load``: the mean load less that, what other programs asked of the CPUs; ``steal_share`` and
    ``busy_share``: of the usable CPUs' time across the window."""
    if window is None or not readings or readings[0].time_s > window[0] or readings[-1].time_s < window[1]:
        return None
    begin, end = window
    before = max(index for index, reading in enumerate(readings) if reading.time_s <= begin)
    after = min(index for index, reading in enumerate(readings) if reading.time_s >= end)
    first, last = readings[before], readings[after]
    inside = [reading for reading in readings[before:after + 1] if begin <= reading.time_s <= end] or [first, last]
    loads = [reading.load_1m for reading in inside]
    seconds = last.time_s - first.time_s
    summary: dict[str, Any] = {
        "usable_cpus": usable_cpus,
        "online_cpus": os.cpu_count(),
        "readings": len(inside),
        "load_avg_1m": {"mean": round(statistics.fmean(loads), 2), "max": round(max(loads), 2)},
        "own_cpus": None, "others_load": None, "steal_share": None, "busy_share": None,
    }
    if first.own_ticks is not None and last.own_ticks is not None and seconds > 0:
        own = (last.own_ticks - first.own_ticks) / CLOCK_TICKS / seconds
        summary["own_cpus"] = round(own, 2)
        summary["others_load"] = round(max(0.0, statistics.fmean(loads) - own), 2)
    if first.cpu is not None and last.cpu is not None and last.cpu.total > first.cpu.total:
        spent = last.cpu.total - first.cpu.total
        summary["steal_share"] = round((last.cpu.steal - first.cpu.steal) / spent, 4)
        summary["busy_share"] = round(1 - (last.cpu.idle - first.cpu.idle) / spent, 4)
    return summary


def host_line(host: dict[str, Any]) -> str:
    """report.md's line of ``host_summary``'s numbers."""
    load = host["load_avg_1m"]
    parts = [f"host: load average {load['mean']:.1f} (max {load['max']:.1f}) over {host['usable_cpus']} usable CPUs"]
    if host.get("own_cpus") is not None:
        parts.append(f"the test's process used {host['own_cpus']:.1f} CPUs")
    if host.get("steal_share") is not None:
        parts.append(f"steal {host['steal_share']:.0%}, busy {host['busy_share']:.0%} of the usable CPUs' time")
    return "; ".join(parts)
