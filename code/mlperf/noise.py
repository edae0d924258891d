"""Whether the machine was quiet during a performance test: the one summary line that names a loaded host or a throttled
GPU, so a low figure is not taken for the harness's speed. It reads metadata.json's ``host_load``
(code/common/host_load.py) and ``power`` (code/mlperf/power.py); a quiet machine gets no line."""

from __future__ import annotations

from typing import Any

from code.mlperf.run_record import RunRecord

# A load average above the usable CPUs is the run's own (its threads waiting for a CPU count in it) unless the others'
# load is above this many CPUs.
OTHERS_MIN = 1.0
STEAL_SHARE = 0.03  # CPU steal above this share of the usable CPUs' time: a hypervisor ran other machines on them
# Clock event reasons that hold the GPU's clock below what the work asks (idle, sync boost and the like do not), and
# the share of the readings that makes one worth naming.
SLOWING_REASONS = ("power cap", "thermal", "hardware slowdown", "hardware thermal", "power brake", "board limit",
                   "reliability")
SLOWING_SHARE = 0.05
CLOCK_SPREAD = 0.05  # the SM clock's 5th to 95th percentile spread over its 95th above which the clock "moved"


def host_findings(host: dict[str, Any] | None) -> list[str]:
    """What made the host noisy (``host_load`` of metadata.json); [] for a quiet host or none read."""
    if not host:
        return []
    findings = []
    load, usable, others = host["load_avg_1m"]["mean"], host["usable_cpus"], host.get("others_load")
    if load > usable and (others is None or others > OTHERS_MIN):
        own = f"; the test's process used {host['own_cpus']:.1f} of them" if host.get("own_cpus") is not None else ""
        findings.append(f"host loaded (load average {load:.1f} over {usable} usable CPUs{own})")
    steal = host.get("steal_share")
    if steal is not None and steal > STEAL_SHARE:
        findings.append(f"CPU steal {steal:.0%} (a hypervisor gave the CPUs' time to other machines)")
    return findings


def gpu_findings(power: dict[str, Any] | None) -> list[str]:
    """What held the GPU back (``power`` of metadata.json); [] for a steady GPU or none read."""
    if not power:
        return []
    findings = []
    reasons = power.get("throttle_reasons") or {}
    slowing = sorted(((name, share) for name, share in reasons.items()
                      if name in SLOWING_REASONS and share >= SLOWING_SHARE), key=lambda item: -item[1])
    if slowing:
        findings.append("GPU throttled by " + ", ".join(f"{name} {share:.0%}" for name, share in slowing)
                        + " of readings")
    low, high = power.get("sm_clock_mhz_p5"), power.get("sm_clock_mhz_p95")
    if low is not None and high and (high - low) / high > CLOCK_SPREAD:
        findings.append(f"GPU SM clock moved {low:,.0f}-{high:,.0f} MHz (5th-95th percentile)")
    return findings


def noise_line(record: RunRecord) -> str | None:
    """``noise: host loaded (...); GPU throttled by power cap 97% of readings``; None for a quiet machine."""
    findings = host_findings(record.host_load) + gpu_findings(record.power)
    return "noise: " + "; ".join(findings) if findings else None
