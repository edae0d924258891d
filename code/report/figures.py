"""The numbers and plots of one test, from the core's per-sample record (``code.harness.core.SampleTimes``).

Latency is completion minus issue time of each sample, as LoadGen measures it (for Offline, every sample is issued
at the start, so its "latency" is when it finished). Batches are read back from the record: the core stamps every
sample of one completion call with the same time, so samples sharing a completion time were one batch (one engine
step, for a continuous-batching engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from code.harness.core import SampleTimes

PERCENTILES = (50.0, 90.0, 99.0)
TIME_BINS = 60  # throughput and latency over a test's time: at most this many bins
HIST_BINS = 60  # latency and batch-size histograms: at most this many bins
# A bin holds this many samples on average at least: a run of a few samples gets a few wide bars, not 60 bins
# that are nearly all empty.
SAMPLES_PER_BIN = 4
# Scatter and CDF plots draw at most this many points (evenly spaced in completion order): a long run's millions
# of samples would make a file of megabytes that draws no better.
MAX_POINTS = 20_000
FEW_POINTS = 200  # up to this many points, scatter markers are drawn large enough to see one by one


def bin_count(samples: int, most: int) -> int:
    return max(1, min(most, samples // SAMPLES_PER_BIN))


def marker_size(points: int) -> float:
    """Scatter marker area (points^2): large for a run of a few samples, small dots for a dense cloud."""
    return 16.0 if points <= FEW_POINTS else 2.0


def thinned(count: int) -> np.ndarray:
    """Indices of at most ``MAX_POINTS`` of ``count`` points, evenly spaced, the first and the last included."""
    if count <= MAX_POINTS:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, MAX_POINTS).round().astype(np.int64))


@dataclass(frozen=True)
class SampleStats:
    samples: int
    duration_s: float  # first issue to last completion
    samples_per_s: float
    mean_ms: float
    percentiles_ms: dict[float, float]
    batches: int
    mean_batch: float


def latencies_ms(times: SampleTimes) -> np.ndarray:
    return (times.completed_s - times.issued_s) * 1e3


def batch_sizes(times: SampleTimes) -> np.ndarray:
    if len(times.completed_s) == 0:
        return np.zeros(0, dtype=np.int64)
    _, counts = np.unique(times.completed_s, return_counts=True)
    return counts


def sample_stats(times: SampleTimes) -> SampleStats:
    count = len(times.index)
    if count == 0:
        return SampleStats(0, 0.0, 0.0, 0.0, {p: 0.0 for p in PERCENTILES}, 0, 0.0)
    latency = latencies_ms(times)
    duration = float(times.completed_s.max() - times.issued_s.min())
    batches = batch_sizes(times)
    return SampleStats(samples=count, duration_s=duration, samples_per_s=count / duration if duration > 0 else 0.0,
                       mean_ms=float(latency.mean()),
                       percentiles_ms={p: float(np.percentile(latency, p)) for p in PERCENTILES},
                       batches=len(batches), mean_batch=float(batches.mean()))


def _pyplot():  # noqa: ANN202 - matplotlib.pyplot, imported only when a report is drawn
    import matplotlib

    matplotlib.use("Agg")  # files only: a headless machine has no display
    import matplotlib.pyplot as plt

    return plt


def _mark_percentiles(axis, stats: SampleStats, bound_ms: float | None) -> None:  # noqa: ANN001
    for (p, value), style in zip(stats.percentiles_ms.items(), (":", "--", "-."), strict=True):
        axis.axvline(value, color="tab:orange", linestyle=style, label=f"p{p:g} {value:,.1f} ms")
    if bound_ms is not None:
        axis.axvline(bound_ms, color="tab:red", linewidth=2, label=f"bound {bound_ms:,.0f} ms")


def draw_latency(times: SampleTimes, stats: SampleStats, bound_ms: float | None, title: str, path: Path) -> Path:
    """Histogram and CDF of the samples' latencies, with p50/p90/p99 and the scenario's bound marked."""
    plt = _pyplot()
    latency = latencies_ms(times)
    figure, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    hist.hist(latency, bins=bin_count(len(latency), HIST_BINS), color="tab:blue", edgecolor="white")
    hist.set(xlabel="latency (ms)", ylabel="samples", title="latency distribution")
    _mark_percentiles(hist, stats, bound_ms)
    hist.legend(fontsize=8)
    ordered = np.sort(latency)
    kept = thinned(len(ordered))
    share = (kept + 1) / max(len(ordered), 1)
    cdf.step(ordered[kept], share, where="post", color="tab:blue",
             marker="o" if len(kept) <= FEW_POINTS else None, markersize=4)
    cdf.set(xlabel="latency (ms)", ylabel="share of samples", title="latency CDF", ylim=(0, 1.01))
    _mark_percentiles(cdf, stats, bound_ms)
    return _save(plt, figure, title, path)


def _save(plt, figure, title: str, path: Path) -> Path:  # noqa: ANN001 - pyplot and its Figure
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def draw_timeline(times: SampleTimes, scenario: str, bound_ms: float | None, title: str, path: Path) -> Path:
    """Throughput and latency over time; for Offline also the batch sizes and the input lengths in the order they
    ran."""
    plt = _pyplot()
    offline = scenario == "Offline"
    figure, axes = plt.subplots(2 if offline else 1, 2, figsize=(11, 7.5 if offline else 4), squeeze=False)
    done = times.completed_s
    end = float(done.max()) if len(done) and done.max() > 0 else 1.0
    edges = np.linspace(0.0, end, bin_count(len(done), TIME_BINS) + 1)
    counts, _ = np.histogram(done, bins=edges)
    width = edges[1] - edges[0]
    rate, latency_axis = axes[0]
    rate.bar(edges[:-1], counts / width, width=width, align="edge", color="tab:green")
    rate.set(xlabel="time since the test started (s)", ylabel="samples/s", title="throughput over time")
    kept = thinned(len(done))
    size = marker_size(len(kept))
    latency_axis.scatter(done[kept], latencies_ms(times)[kept], s=size, color="tab:blue")
    latency_axis.set(xlabel="completion time (s)", ylabel="latency (ms)", title="latency over time")
    if bound_ms is not None:
        latency_axis.axhline(bound_ms, color="tab:red", linewidth=2, label=f"bound {bound_ms:,.0f} ms")
        latency_axis.legend(fontsize=8)
    if offline:
        sizes, lengths = axes[1]
        batches = batch_sizes(times)
        values, counts = np.unique(batches, return_counts=True)
        if len(values) <= HIST_BINS:  # one bar per batch size that occurred, however few batches ran
            sizes.bar(values, counts, width=0.8 * max(1.0, float(values.max()) / HIST_BINS), color="tab:purple")
        else:
            sizes.hist(batches, bins=bin_count(len(batches), HIST_BINS), color="tab:purple", edgecolor="white")
        sizes.set(xlabel="samples per batch", ylabel="batches", title="batch sizes")
        sizes.xaxis.get_major_locator().set_params(integer=True)
        sizes.yaxis.get_major_locator().set_params(integer=True)
        if times.length is not None:
            lengths.scatter(done[kept], times.length[kept], s=size, color="tab:gray")
            lengths.set(xlabel="completion time (s)", ylabel="input length (tokens)", title="input lengths run")
        else:
            lengths.set_axis_off()
    return _save(plt, figure, title, path)
