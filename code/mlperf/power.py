"""GPU power and energy over the timed part of a LoadGen performance test, from NVML; and the line that states them. The
same sampler thread reads the host's load (code/common/host_load.py).

Why: a GPU at its power limit gains speed only by doing more work per joule, so samples per joule is the figure a run at
the limit improves, and the clock and throttle reasons say whether the limit held the GPU back.

Only LoadGen's timed part counts (``power_begin`` to ``power_end`` in its detail log), the interval of the
samples-per-second figure, as the MLPerf power rules measure it. Energy is the board counter's rise over it, else the
integral of the power readings; mean watts are that energy over the interval, so samples per joule and the mean agree
with the figure.

Power never fails a run: without NVML or a GPU, or after an NVML error, metadata.json says ``"power": null`` and
``power_missing`` says why; no figure is made up.
"""

from __future__ import annotations

import calendar
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from code.common.constants import TestMode
from code.common.host_load import HostReader, HostReading, host_summary
from code.common.log import get_logger
from code.common.periodic import Periodic
from code.common.systems import cuda_visible_entries, nvml_handle
from code.mlperf.run_record import RunRecord

log = get_logger("power")

PERIOD_S = 0.1
# NVML's clock event reasons (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*; the bits are the same),
# named as the summary writes them.
THROTTLE_REASONS = {1 << bit: name for bit, name in enumerate((
    "idle", "application clocks", "power cap", "hardware slowdown", "sync boost", "thermal", "hardware thermal",
    "power brake", "display clock", "board limit", "reliability"))}
# LoadGen's power_begin and power_end: UTC, to the millisecond (loadgen/utils.cc DateTimeStringForPower).
LOADGEN_TIME_FORMAT = "%m-%d-%Y %H:%M:%S"


class PowerUnavailableError(RuntimeError):
    """Nothing can be read for this test (no GPU, no NVML, no power reading); the message says why."""


def reason_names(bits: int) -> list[str]:
    """The reasons set in an NVML clock event bit mask; an unknown bit as its hex."""
    names = [name for bit, name in THROTTLE_REASONS.items() if bits & bit]
    unknown = bits & ~sum(THROTTLE_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def loadgen_time(text: str) -> float:
    """Seconds since the epoch of a LoadGen power timestamp (``07-15-2025 10:11:12.345``, UTC)."""
    whole, _, millis = text.strip().partition(".")
    return calendar.timegm(time.strptime(whole, LOADGEN_TIME_FORMAT)) + (int(millis) / 1000 if millis else 0.0)


def timed_window(detail: dict[str, Any]) -> tuple[float, float] | None:
    """``power_begin`` to ``power_end`` in seconds since the epoch; None when the test did not get that far."""
    try:
        begin, end = loadgen_time(str(detail["power_begin"])), loadgen_time(str(detail["power_end"]))
    except (KeyError, ValueError):
        return None
    return (begin, end) if end >= begin else None


@dataclass(frozen=True)
class Reading:
    """One GPU read once; None: its GPU does not report that value."""

    power_w: float
    energy_j: float | None  # the board's energy counter since the driver loaded
    sm_mhz: float | None
    limit_w: float | None
    reasons: int | None  # clock event reasons, a bit mask


@dataclass(frozen=True)
class Tick:
    time_s: float  # seconds since the epoch: the clock of LoadGen's power timestamps
    readings: tuple[Reading, ...]  # one per GPU, in the sampler's order


@dataclass(frozen=True)
class Gpu:
    """One GPU of the test, and which of the optional readings its driver gives."""

    device: str  # as the run names it: cuda:0
    nvml_device: str  # its CUDA_VISIBLE_DEVICES entry: NVML's index or the GPU's UUID
    handle: Any
    pci_bus_id: str = ""
    energy_counter: bool = False
    clock: bool = False
    limit: bool = False
    reasons: Callable[[Any], int] | None = None  # the driver's clock event reasons call


@dataclass
class PowerTrace:
    """What a sampler read, and the NVML error that stopped it."""

    gpus: list[Gpu]
    ticks: list[Tick] = field(default_factory=list)
    error: str | None = None
    period_s: float = PERIOD_S
    host: list[HostReading] = field(default_factory=list)  # the host's readings, one a tick

    def summarize(self, window: tuple[float, float] | None, samples: int | None) -> dict[str, Any]:
        """The power figures over ``window`` with ``samples`` completed in it, where the readings cover it."""
        if window is None or not self.ticks or self.ticks[0].time_s > window[0] or self.ticks[-1].time_s < window[1]:
            raise PowerUnavailableError(
                f"NVML failed during the test ({self.error}); the readings do not cover its timed part" if self.error
                else "the readings do not cover the test's timed part" if window
                else "LoadGen's detail log has no power_begin/power_end: the test has no timed part to measure")
        begin, end = window
        times = np.array([tick.time_s for tick in self.ticks])
        # The last reading at or before the timed part and the first at or after it: they bracket it.
        first, last = int(np.searchsorted(times, begin, side="right")) - 1, int(np.searchsorted(times, end))
        inside = [tick for tick in self.ticks[first:last + 1] if begin <= tick.time_s <= end]
        # A timed part shorter than a period holds no reading: the two around it stand for it.
        shown = inside or [self.ticks[first], self.ticks[last]]
        seconds = end - begin
        gpus = [self._gpu(index, times, shown, begin, end) for index in range(len(self.gpus))]
        energy = sum(gpu["energy_j"] for gpu in gpus)
        limits = {gpu["limit_w"] for gpu in gpus}
        clocks = [r.sm_mhz for tick in shown for r in tick.readings if r.sm_mhz is not None]
        summary: dict[str, Any] = {
            "begin": begin, "end": end, "seconds": round(seconds, 3), "period_s": self.period_s,
            "readings": len(inside), "longest_gap_s": round(float(np.diff(times[first:last + 1]).max(initial=0.0)), 3),
            "energy_j": round(energy, 1),
            "mean_w": round(energy / seconds, 1) if seconds > 0 else round(sum(g["mean_w"] for g in gpus), 1),
            "max_w": round(max(sum(r.power_w for r in tick.readings) for tick in shown), 1),
            "limit_w": limits.pop() if len(limits) == 1 else None,
            "sm_clock_mhz_median": statistics.median(clocks) if clocks else None,
            # How far the clock moved: the 5th and 95th percentiles, so one reading at a step does not count.
            "sm_clock_mhz_p5": round(float(np.percentile(clocks, 5)), 1) if clocks else None,
            "sm_clock_mhz_p95": round(float(np.percentile(clocks, 95)), 1) if clocks else None,
            "throttle_reasons": _shares([r.reasons for tick in shown for r in tick.readings]),
            "samples": samples,
            "samples_per_joule": float(f"{samples / energy:.4g}") if samples and energy > 0 else None,
            "gpus": gpus,
        }
        if self.error:  # after the timed part (else the readings would not cover it): the figures stand
            summary["note"] = f"NVML failed after the timed part: {self.error}"
        return summary

    def _gpu(self, index: int, times: np.ndarray, shown: list[Tick], begin: float, end: float) -> dict[str, Any]:
        gpu = self.gpus[index]
        readings = [tick.readings[index] for tick in self.ticks]
        mine = [tick.readings[index] for tick in shown]
        if gpu.energy_counter:
            counter = np.array([r.energy_j for r in readings], dtype=float)
            energy = float(np.interp(end, times, counter) - np.interp(begin, times, counter))
        else:  # the integral of the line through the readings, from begin to end: watts to joules
            at = np.concatenate(([begin], times[(times > begin) & (times < end)], [end]))
            energy = float(np.trapezoid(np.interp(at, times, [r.power_w for r in readings]), at))
        seconds = end - begin
        limits = [r.limit_w for r in mine if r.limit_w is not None]
        clocks = [r.sm_mhz for r in mine if r.sm_mhz is not None]
        return {
            "device": gpu.device, "nvml_device": gpu.nvml_device, "pci_bus_id": gpu.pci_bus_id,
            "energy_from": "energy counter" if gpu.energy_counter else "integrated power",
            "energy_j": round(energy, 1),
            "mean_w": round(energy / seconds, 1) if seconds > 0 else round(mine[0].power_w, 1),
            "max_w": round(max(r.power_w for r in mine), 1),
            "limit_w": max(limits) if limits else None,
            "sm_clock_mhz_median": statistics.median(clocks) if clocks else None,
            "throttle_reasons": _shares([r.reasons for r in mine]),
        }


def _shares(masks: list[int | None]) -> dict[str, float] | None:
    """Each reason's share of the readings that report reasons, most frequent first; None when none report."""
    known = [mask for mask in masks if mask is not None]
    if not known:
        return None
    counts = Counter(name for mask in known for name in reason_names(mask))
    return {name: round(count / len(known), 4) for name, count in counts.most_common()}


class PowerSampler:
    """Reads the test's GPUs, and the host where ``host`` is given, every ``period_s`` while the ``with`` block runs,
    once more on entry and on exit so the readings bracket it. An NVML error ends the GPU readings (``trace.error``),
    never the test nor the host's readings. ``power_missing``: why no GPU is read, for a sampler of the host alone."""

    def __init__(self, nvml: Any, gpus: list[Gpu], period_s: float = PERIOD_S,
                 clock: Callable[[], float] = time.time, host: HostReader | None = None,
                 power_missing: str | None = None) -> None:
        self._nvml, self._clock, self._host = nvml, clock, host
        self._host_failed = False
        self.power_missing = power_missing
        self.trace = PowerTrace(gpus, period_s=period_s)
        self._periodic = Periodic(self.tick, period_s, "power", on_error=self._failed)

    def tick(self) -> None:
        """Read the host and every GPU once, at the middle of the reads (eight GPUs take a few milliseconds)."""
        started = self._clock()
        if self._host is not None and not self._host_failed:
            try:
                reading = self._host(started)
            except Exception as error:  # noqa: BLE001 - the host's load never fails a test
                log.warning("host load reading stopped (%s: %s); the test goes on", type(error).__name__, error)
                self._host_failed, reading = True, None
            if reading is not None:
                self.trace.host.append(reading)
        if not self.trace.gpus or self.trace.error is not None:
            return
        try:
            readings = tuple(self._read(gpu) for gpu in self.trace.gpus)
        except Exception as error:  # noqa: BLE001 - power never fails a test, nor stops the host's readings
            self._failed(error)
            return
        self.trace.ticks.append(Tick((started + self._clock()) / 2, readings))

    def _read(self, gpu: Gpu) -> Reading:
        nvml, handle = self._nvml, gpu.handle
        return Reading(
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
            energy_j=nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000 if gpu.energy_counter else None,
            sm_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)) if gpu.clock else None,
            limit_w=nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000 if gpu.limit else None,
            reasons=int(gpu.reasons(handle)) if gpu.reasons else None,
        )

    def _failed(self, error: BaseException) -> None:
        self.trace.error = f"{type(error).__name__}: {error}"
        log.warning("GPU power reading stopped (%s); the test goes on, and metadata.json says what is missing",
                    self.trace.error)

    def __enter__(self) -> PowerSampler:
        self.tick()
        self._periodic.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._periodic.stop()
        try:
            self.tick()
        finally:
            if self._nvml is not None:
                _shutdown(self._nvml)

    def section(self, detail: dict[str, Any], samples: int | None) -> dict[str, Any]:
        """metadata.json's ``power`` (or ``power_missing``), and ``host_load`` where the host was read."""
        window = timed_window(detail)
        if self.power_missing is not None:
            power: dict[str, Any] = {"power": None, "power_missing": self.power_missing}
        else:
            try:
                power = {"power": self.trace.summarize(window, samples)}
            except PowerUnavailableError as error:
                power = {"power": None, "power_missing": str(error)}
        if self._host is None:
            return power
        return {**power, "host_load": host_summary(self.trace.host, window, len(self._host.cpus))}


class NoPower(nullcontext):
    """A test whose power is not read, and why: the sampler's stand-in, so the caller has one path."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def section(self, detail: dict[str, Any], samples: int | None) -> dict[str, Any]:
        return {"power": None, "power_missing": self.why}


def power_sampler(devices: Sequence[str], why_not: str | None = None, nvml: Any = None, period_s: float = PERIOD_S,
                  clock: Callable[[], float] = time.time, host: HostReader | None = None) -> PowerSampler | NoPower:
    """A sampler of the GPUs among ``devices`` and of ``host``; of the host alone without GPUs to read
    (``why_not``), or ``NoPower`` without either. ``nvml``: for tests."""
    gpus: list[Gpu] = []
    if why_not is None:
        try:
            nvml, gpus = _open_gpus(devices, nvml)
        except PowerUnavailableError as error:
            log.debug("GPU power not read: %s", error)
            why_not = str(error)
    if why_not is not None:
        return NoPower(why_not) if host is None else PowerSampler(None, [], period_s, clock, host, why_not)
    return PowerSampler(nvml, gpus, period_s, clock, host)


def _open_gpus(devices: Sequence[str], nvml: Any) -> tuple[Any, list[Gpu]]:
    """NVML, started (the sampler shuts it down), and each GPU of ``devices`` with the readings it gives."""
    cuda = [device for device in devices if device.startswith("cuda")]
    if not cuda:
        raise PowerUnavailableError(f"no GPU among the test's devices ({', '.join(devices) or 'none'})")
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            raise PowerUnavailableError("nvidia-ml-py is not installed") from None
    try:
        nvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise PowerUnavailableError(f"NVML unavailable: {error}") from None
    try:
        entries = cuda_visible_entries(nvml.nvmlDeviceGetCount())
        gpus = []
        for device in cuda:
            index = int(device.split(":")[1]) if ":" in device else 0
            if index >= len(entries):
                raise PowerUnavailableError(f"{device} is not among the GPUs CUDA_VISIBLE_DEVICES shows NVML")
            gpus.append(_probe(nvml, device, entries[index]))
        return nvml, gpus
    except Exception as error:
        _shutdown(nvml)
        if isinstance(error, PowerUnavailableError):
            raise
        raise PowerUnavailableError(f"NVML cannot read the test's GPUs: {type(error).__name__}: {error}") from None


def _probe(nvml: Any, device: str, entry: str) -> Gpu:
    """The GPU of a CUDA_VISIBLE_DEVICES entry and the optional readings its driver gives: each is tried once, here,
    so a GPU or driver without one reads without it rather than failing every tick."""
    handle = nvml_handle(nvml, entry)
    try:
        nvml.nvmlDeviceGetPowerUsage(handle)
    except Exception as error:  # noqa: BLE001 - NVMLError_NotSupported (a MIG slice, a vGPU), ...
        raise PowerUnavailableError(f"NVML gives no power reading for {device}: {error}") from None

    def works(call: Callable[[], object]) -> bool:
        try:
            call()
        except Exception:  # noqa: BLE001 - not supported by this GPU or driver
            return False
        return True

    reasons = None  # the newer name first; drivers before 535 have only the older one
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        call = getattr(nvml, name, None)
        if call is not None and works(lambda call=call: call(handle)):
            reasons = call
            break
    try:
        bus_id = nvml.nvmlDeviceGetPciInfo(handle).busId
        bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    except Exception:  # noqa: BLE001 - not said by this GPU or stand-in
        bus_id = ""
    return Gpu(device, entry, handle, bus_id,
               energy_counter=works(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
               clock=works(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
               limit=works(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
               reasons=reasons)


def _shutdown(nvml: Any) -> None:
    with suppress(Exception):  # nothing is left to read
        nvml.nvmlShutdown()


def power_line(power: dict[str, Any]) -> str:
    """``power: 693 W mean (limit 700 W), 11.9 samples/J, SM clock 1,515 MHz median; throttled by power cap 97% of
    readings``; several GPUs' mean is their sum, each one's mean in brackets."""
    gpus = power.get("gpus") or []
    limits = sorted({gpu["limit_w"] for gpu in gpus if gpu.get("limit_w") is not None})
    limit = (f"limits {limits[0]:,.0f}-{limits[-1]:,.0f} W" if len(limits) > 1 else
             f"limit {limits[0]:,.0f} W" + (" each" if len(gpus) > 1 else "") if limits else "")
    if len(gpus) > 1:
        each = ", ".join(f"{gpu['mean_w']:,.0f}" for gpu in gpus)
        line = f"power: {power['mean_w']:,.0f} W mean over {len(gpus)} GPUs ({each} W" + (f"; {limit})" if limit
                                                                                          else ")")
    else:
        line = f"power: {power['mean_w']:,.0f} W mean" + (f" ({limit})" if limit else "")
    per_joule = power.get("samples_per_joule")
    if per_joule is not None:
        line += f", {per_joule:,.1f} samples/J" if per_joule >= 100 else f", {per_joule:.3g} samples/J"
    if power.get("sm_clock_mhz_median") is not None:
        line += f", SM clock {power['sm_clock_mhz_median']:,.0f} MHz median"
    reasons = power.get("throttle_reasons")
    if reasons is not None:
        ranked = sorted(reasons.items(), key=lambda item: -item[1])  # metadata.json sorts its keys by name
        shares = ", ".join(f"{name} {'<1%' if 0 < share < 0.005 else f'{share:.0%}'}" for name, share in ranked)
        line += f"; throttled by {shares} of readings" if ranked else "; no clock throttling"
    return line


def power_note(record: RunRecord) -> str | None:
    """The power line of a test, or why a performance test on GPUs has none; nothing for a CPU or accuracy test."""
    if record.power:
        return power_line(record.power)
    used = record.devices.get("used") or []
    gpus = any(str(device).startswith("cuda") for device in used)
    if gpus and record.power_missing and record.result.mode == TestMode.PerformanceOnly.value:
        return f"power: not measured ({record.power_missing})"
    return None
