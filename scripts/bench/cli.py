"""``python -m scripts.bench``: the options, and the order of the measurements (Offline, Server, SingleStream,
baseline).

Why here: the measuring modules take plain arguments, so tests drive them without parsing options.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from code.common.constants import Scenario
from code.common.paths import BUILD_DIR
from code.common.run_logs import LogDirError, new_timestamped_dir
from scripts.bench.baseline import measure_baseline
from scripts.bench.report import Figure, build_figures, format_table, render_text, write_reports
from scripts.bench.runs import HarnessRunner, OfflineResult, measure_offline, measure_singlestream
from scripts.bench.server_search import search_server_qps, server_try
from scripts.bench.settings import (
    DEFAULT_DURATION_MS,
    HINT_FIELDS,
    MLPERF_DURATION_MS,
    QUICK_DURATION_MS,
    QUICK_OFFLINE_MIN_QUERIES,
    QUICK_RUN_ARGS,
    REFUSED_FIELDS,
    SCENARIO_NAMES,
    SERVER_MIN_QUERIES,
    SERVER_START_FRACTION,
    SINGLE_STREAM_HINT_NS,
    BenchError,
)

# ---------------------------------------------------------------------------------------------------- options


def new_bench_dir(root: Path | None = None) -> Path:
    """A fresh ``build/bench/<timestamp>[-N]``: a bench never writes into an earlier one."""
    try:
        return new_timestamped_dir(root or BUILD_DIR / "bench")
    except LogDirError as error:
        raise BenchError(str(error)) from None


def split_extra_run_args(text: str) -> tuple[list[str], dict[str, str]]:
    """``--extra_run_args``: flags passed to every run, and the hint fields (see HINT_FIELDS) taken out."""
    passed, hints = [], {}
    for token in shlex.split(text or ""):
        if not token.startswith("--"):
            raise BenchError(f"--extra_run_args: expected --name=value, got '{token}'")
        name, _, value = token[2:].partition("=")
        name = name.replace("-", "_")
        if name in REFUSED_FIELDS:
            raise BenchError(f"--extra_run_args: --{name} is set by the bench ({REFUSED_FIELDS[name]})")
        if name in HINT_FIELDS:
            hints[name] = value
        else:
            passed.append(token)
    return passed, hints


def parse_list(text: str, valid: dict[str, Any], what: str) -> list[Any]:
    chosen = []
    for item in (part.strip().lower() for part in text.split(",") if part.strip()):
        if item not in valid:
            raise BenchError(f"unknown {what} '{item}'; valid: {', '.join(valid)}")
        if valid[item] not in chosen:
            chosen.append(valid[item])
    if not chosen:
        raise BenchError(f"--{what}s is empty")
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench",
        description="BERT Offline/Server/SingleStream through the harness, vs an "
        "HF baseline (documentation/benchmarking.md)."
    )
    parser.add_argument("--benchmarks", default="bert-99,bert-99.9", help="comma list: bert-99, bert-99.9")
    parser.add_argument(
        "--scenarios", default="offline,server,singlestream", help="comma list: offline, server, singlestream"
    )
    parser.add_argument(
        "--min_duration_ms",
        type=int,
        default=None,
        help="LoadGen min duration of every test (default: Offline/SingleStream 20,000, Server 30,000; --quick: 1,000)",
    )
    parser.add_argument(
        "--probe_ms",
        type=int,
        default=None,
        help="Offline probe duration (default: a quarter of the Offline duration, at least 500)",
    )
    parser.add_argument(
        "--offline_lengths",
        default="dataset,max",
        help="Offline input lengths: dataset (SQuAD-like), max (all 384 tokens), or both",
    )
    parser.add_argument("--server_max_runs", type=int, default=6, help="Server tries at most")
    parser.add_argument(
        "--server_tolerance",
        type=float,
        default=0.03,
        help="stop the Server search when VALID and INVALID are this close (relative)",
    )
    parser.add_argument("--skip_baseline", action="store_true", help="do not time the HF baseline")
    parser.add_argument(
        "--baseline_attention",
        default="sdpa",
        choices=("sdpa", "eager"),
        help="HF attention implementation of the baseline (transformers' default: sdpa)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny model on CPU, 1 s tests: checks the bench itself, not the GPU"
    )
    parser.add_argument(
        "--extra_run_args",
        default="",
        help="RUN_ARGS added to every run, e.g. "
        '"--gpu_batch_size=512 --num_workers=2"; --offline_expected_qps / --server_target_qps / '
        "--single_stream_expected_latency_ns here are starting hints",
    )
    parser.add_argument("--out", type=Path, default=None, help="also copy bench.json and bench.md here")
    parser.add_argument("--verbose", action="store_true", help="stream each run's output (always in runs/*.log)")
    args = parser.parse_args(argv)
    if args.min_duration_ms is not None and args.min_duration_ms <= 0:
        raise BenchError("--min_duration_ms must be positive")
    return args


# -------------------------------------------------------------------------------------------------------- main


def _device(run_args: list[str]) -> str:
    """Where the runs (and so the baseline) execute: --device from the run args, else cuda when present."""
    for token in reversed(run_args):
        if token.startswith("--device="):
            value = token.split("=", 1)[1]
            if value != "auto":
                return value
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    from code.common.systems import detect_system

    return detect_system().cpu_model or platform.processor() or "cpu"


def _server_start(benchmark: str, offline: OfflineResult | None, hints: dict[str, str], run_args: list[str]) -> float:
    """0.8 x the Offline throughput; else the --server_target_qps hint; else the config's value."""
    if "server_target_qps" in hints:
        return float(hints["server_target_qps"])
    if offline and offline.samples_per_second:
        return SERVER_START_FRACTION * offline.samples_per_second
    from code.actions.common import resolved_configs, system_name
    from code.common.arguments import parse_run_args

    request = parse_run_args(["--action=info", f"--benchmarks={benchmark}", "--scenarios=server", *run_args])
    (config,) = resolved_configs(request, system_name(request))
    return float(config["server_target_qps"])


def run_bench(args: argparse.Namespace, argv: list[str]) -> int:
    benchmarks = parse_list(
        args.benchmarks, {"bert": "bert-99", "bert-99": "bert-99", "bert-99.9": "bert-99.9"}, "benchmark"
    )
    scenarios = parse_list(args.scenarios, {name: s for s, name in SCENARIO_NAMES.items()}, "scenario")
    lengths = parse_list(args.offline_lengths, {"dataset": "dataset", "max": "max"}, "offline_length")
    run_args, hints = split_extra_run_args(args.extra_run_args)
    if args.quick:
        run_args = QUICK_RUN_ARGS + run_args
    durations = {
        s: args.min_duration_ms or (QUICK_DURATION_MS if args.quick else DEFAULT_DURATION_MS[s])
        for s in DEFAULT_DURATION_MS
    }
    probe_ms = args.probe_ms or max(500, durations[Scenario.Offline] // 4)
    device = _device(run_args)

    bench_dir = new_bench_dir()
    runner = HarnessRunner(bench_dir, run_args, args.verbose)
    durations_text = ", ".join(f"{s.value} {durations[s]:,} ms" for s in scenarios)
    if Scenario.Offline in scenarios:
        durations_text += f" (Offline probe {probe_ms:,} ms)"
    print(
        f"[bench] folder: {bench_dir}\n[bench] durations: {durations_text} (shortened; MLPerf: "
        f"{MLPERF_DURATION_MS:,} ms)\n[bench] device: {device}",
        flush=True,
    )
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "bench_dir": str(bench_dir),
        "device": _device_name(device),
        "device_kind": device,
        "quick": args.quick,
        "benchmarks": benchmarks,
        "scenarios": [s.value for s in scenarios],
        "durations_ms": {s.value: durations[s] for s in scenarios},
        "probe_ms": probe_ms,
        "durations_text": durations_text,
        "run_args": run_args,
        "hints": hints,
        "bench_command": shlex.join([sys.executable, "-m", "scripts.bench", *argv]),
        "server_search": {},
        "runs": [],
    }
    parts: dict[str, dict[str, Any]] = {}

    def figures() -> list[Figure]:
        rows = []
        for benchmark, part in parts.items():
            rows += build_figures(
                benchmark,
                part.get("offline"),
                part.get("worst"),
                part.get("server"),
                part.get("single"),
                report.get("baseline"),
            )
        return rows

    def save() -> None:
        """Written after every step, so an interrupted bench keeps what it measured."""
        report["runs"] = [{**asdict(o), "verdict": o.verdict()} for o in runner.outcomes]
        first = next((o for o in runner.outcomes if o.system), None)
        if first:
            report["system"], report["versions"] = first.system, first.versions
        write_reports(bench_dir, report, figures(), args.out)

    for benchmark in benchmarks:
        part: dict[str, Any] = parts.setdefault(benchmark, {})
        base: dict[str, Any] = {}
        if Scenario.Offline in scenarios:
            offline_base = {**base, "min_query_count": QUICK_OFFLINE_MIN_QUERIES} if args.quick else base
            hint = float(hints["offline_expected_qps"]) if "offline_expected_qps" in hints else None
            if "dataset" in lengths:
                part["offline"] = measure_offline(
                    runner, benchmark, "dataset", durations[Scenario.Offline], probe_ms, hint, offline_base
                )
                save()
            if "max" in lengths:
                known = part.get("offline")
                worst_hint = None
                if known and known.samples_per_second and known.run.mean_length:
                    # Cost grows at least linearly with length: start a little above the linear estimate.
                    worst_hint = known.samples_per_second * known.run.mean_length / 384 * 1.25
                part["worst"] = measure_offline(
                    runner, benchmark, "max", durations[Scenario.Offline], probe_ms, worst_hint, offline_base
                )
                save()
        if Scenario.Server in scenarios:
            server_base = {**base, "min_query_count": SERVER_MIN_QUERIES}
            start = _server_start(benchmark, part.get("offline"), hints, run_args)
            search = search_server_qps(
                lambda qps, b=benchmark, sb=server_base: server_try(runner, b, durations[Scenario.Server], sb, qps),
                start,
                args.server_max_runs,
                args.server_tolerance,
            )
            part["server"] = search
            report["server_search"][benchmark] = {
                "start_qps": start,
                "best_qps": search.best_qps,
                "stopped_because": search.stopped_because,
                "tries": [asdict(t) for t in search.tries],
            }
            save()
        if Scenario.SingleStream in scenarios:
            hint_ns = int(hints.get("single_stream_expected_latency_ns", SINGLE_STREAM_HINT_NS))
            part["single"] = measure_singlestream(runner, benchmark, durations[Scenario.SingleStream], hint_ns, base)
            save()

    baseline = None
    if not args.skip_baseline:
        model_name = next((t.split("=", 1)[1] for t in reversed(run_args) if t.startswith("--model_name=")), "large")
        print(
            f"[bench] baseline: HF BertForQuestionAnswering ({model_name}), fp32, batch 1, 384 tokens, on {device}",
            flush=True,
        )
        baseline = measure_baseline(
            model_name, device, args.baseline_attention, seconds_per_repeat=0.5 if args.quick else 2.0
        )
        report["baseline"] = baseline
    save()

    rows = format_table(figures(), baseline)
    print("\n" + "=" * 32 + " BERT bench " + "=" * 32)
    print(
        f"device: {report['device']} (system {report.get('system', '?')}); torch "
        f"{report.get('versions', {}).get('torch', '?')}; {report['date']}"
    )
    print(f"durations: {durations_text} (shortened; MLPerf: {MLPERF_DURATION_MS:,} ms)")
    print("inputs: synthetic SQuAD-like lengths, random weights: NOT MLPerf results")
    print(render_text(rows))
    print(f"reports: {bench_dir / 'bench.md'}, {bench_dir / 'bench.json'}")
    return 1 if any(o.valid is None for o in runner.outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        return run_bench(parse_args(argv), argv)
    except BenchError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
