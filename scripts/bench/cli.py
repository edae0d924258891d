"""``python -m scripts.bench``: the options, and the order of the measurements (per benchmark: its Offline cases,
Server, SingleStream; then each benchmark family's baseline).

Why here: the measuring modules take plain arguments, so tests drive them without parsing options.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from code.common.cli import exits_on
from code.common.constants import Scenario
from code.common.paths import BUILD_DIR
from code.mlperf.run_logs import LogDirError, new_timestamped_dir
from scripts.bench.baseline import measure_baseline, measure_gptj_baseline
from scripts.bench.report import Figure, build_figures, format_table, render_text, write_reports
from scripts.bench.runs import HarnessRunner, OfflineResult, measure_offline, measure_singlestream, merge_flags
from scripts.bench.server_search import search_server_qps, server_try
from scripts.bench.settings import (
    BENCHMARK_NAMES,
    DEFAULT_BENCHMARKS,
    DEFAULT_DURATION_MS,
    HINT_FIELDS,
    MLPERF_DURATION_MS,
    PROFILES,
    QUICK_DURATION_MS,
    REFUSED_FIELDS,
    SCENARIO_NAMES,
    SERVER_START_FRACTION,
    BenchError,
    Profile,
    profile_of,
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
        description="BERT and GPT-J Offline/Server/SingleStream through the harness, vs an "
        "HF baseline (documentation/benchmarking.md).",
    )
    parser.add_argument(
        "--benchmarks",
        default=DEFAULT_BENCHMARKS,
        help=f"comma list: bert-99, bert-99.9, gptj-99, gptj-99.9 (default {DEFAULT_BENCHMARKS})",
    )
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
        default="all",
        help="Offline cases: all (default), or a comma list of bert's dataset (SQuAD-like input lengths), max (all "
        "384 tokens) and gptj's forced (EOS forced, mean ~70 new tokens), full (128 new tokens); a benchmark runs "
        "those of its own",
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
        "--baseline_prompts", type=int, default=8, help="GPT-J baseline: prompts timed per case (--quick: 1)"
    )
    parser.add_argument(
        "--baseline_attention",
        default="sdpa",
        choices=("sdpa", "eager"),
        help="HF attention implementation of the BERT baseline (transformers' default: sdpa)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny models on CPU, 1 s tests: checks the bench itself, not the GPU"
    )
    parser.add_argument(
        "--extra_run_args",
        default="",
        help="RUN_ARGS added to every run, e.g. "
        '"--gpu_batch_size=512 --num_workers=2" (GPT-J FP8: '
        '"--precision=fp8 --kv_cache_dtype=fp8 --fp8_fast_accum=true"); '
        "--offline_expected_qps / --server_target_qps / --single_stream_expected_latency_ns here are starting hints",
    )
    parser.add_argument("--out", type=Path, default=None, help="also copy bench.json and bench.md here")
    parser.add_argument("--verbose", action="store_true", help="stream each run's output (always in runs/*.log)")
    args = parser.parse_args(argv)
    if args.min_duration_ms is not None and args.min_duration_ms <= 0:
        raise BenchError("--min_duration_ms must be positive")
    if args.baseline_prompts <= 0:
        raise BenchError("--baseline_prompts must be positive")
    return args


# -------------------------------------------------------------------------------------------------------- main


def _flag(run_args: list[str], name: str, default: str) -> str:
    """The value the runs get for ``--name`` (the last one wins, as in the harness), else ``default``."""
    return next((t.split("=", 1)[1] for t in reversed(run_args) if t.startswith(f"--{name}=")), default)


def _device(run_args: list[str]) -> str:
    """Where the runs (and so the baseline) execute: --device from the run args, else cuda when present."""
    value = _flag(run_args, "device", "auto")
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


def _later_case_hint(benchmark: str, first: OfflineResult | None) -> float | None:
    """Where a later (worst) Offline case starts, from the first case's throughput: BERT's cost grows at least
    linearly with input length, so a little above the linear estimate at 384 tokens; GPT-J's 128 new tokens cost
    at least what fewer do, so the first case's throughput is an upper bound."""
    if first is None or not first.samples_per_second:
        return None
    if profile_of(benchmark).counts_generated:
        return first.samples_per_second
    if not first.run or not first.run.mean_length:
        return None
    return first.samples_per_second * first.run.mean_length / 384 * 1.25


def _scenario_fields(profile: Profile, scenario: Scenario, quick: bool) -> dict[str, int]:
    """The profile's run fields for every test of a scenario."""
    return dict((profile.quick_scenario_fields if quick else profile.scenario_fields).get(scenario, {}))


def _cases(profile: Profile, chosen: list[str]) -> list[str]:
    """The benchmark's Offline cases named in --offline_lengths, in the profile's order."""
    return [case.name for case in profile.cases if "all" in chosen or case.name in chosen]


def _measure_baseline(profile: Profile, run_args: list[str], cases: list[str], args: argparse.Namespace) -> dict:
    """One family's baseline on its runs' device and model (GPT-J: also their seed, prompt lengths and cases)."""
    device = _device(run_args)
    if profile.family == "bert":
        model_name = _flag(run_args, "model_name", "large")
        print(f"[bench] baseline: HF BertForQuestionAnswering ({model_name}), fp32, batch 1, 384 tokens, on {device}")
        return measure_baseline(
            model_name, device, args.baseline_attention, seconds_per_repeat=0.5 if args.quick else 2.0
        )
    model_name = _flag(run_args, "model_name", "6b")
    prompts = 1 if args.quick else args.baseline_prompts
    print(
        f"[bench] baseline: HF GPTJForCausalLM.generate ({model_name}), beam 4, batch 1, {prompts} prompts per "
        f"case ({', '.join(cases)}), on {device}",
        flush=True,
    )
    realistic = profile.cases[0].name
    return measure_gptj_baseline(
        model_name,
        device,
        prompts,
        seed=int(_flag(run_args, "seed", "0")),
        length_scale=float(_flag(run_args, "synthetic_length_scale", "1.0")),
        cases=(realistic, *(case for case in cases if case != realistic)),
    )


def _server_start(benchmark: str, offline: OfflineResult | None, hints: dict[str, str], run_args: list[str]) -> float:
    """0.8 x the Offline throughput; else the --server_target_qps hint; else the config's value."""
    if "server_target_qps" in hints:
        return float(hints["server_target_qps"])
    if offline and offline.samples_per_second:
        return SERVER_START_FRACTION * offline.samples_per_second
    from code.mlperf.arguments import parse_run_args
    from code.tuning.plans import resolved_configs, system_name

    request = parse_run_args(["--action=info", f"--benchmarks={benchmark}", "--scenarios=server", *run_args])
    (config,) = resolved_configs(request, system_name(request))
    return float(config["server_target_qps"])


@dataclass(frozen=True)
class BenchPlan:
    """What the options ask for, made concrete: the benchmarks and their profiles, scenarios, Offline cases, each
    family's run flags and device, and every test's duration."""

    benchmarks: list[str]
    profiles: dict[str, Profile]  # family -> profile
    scenarios: list[Scenario]
    chosen_cases: list[str]
    hints: dict[str, str]
    run_args: dict[str, list[str]]  # family -> the flags of its runs
    durations: dict[Scenario, int]  # ms
    probe_ms: int
    devices: dict[str, str]  # family -> device

    @property
    def title(self) -> str:
        return " + ".join(p.title for p in self.profiles.values())

    @property
    def durations_text(self) -> str:
        text = ", ".join(f"{s.value} {self.durations[s]:,} ms" for s in self.scenarios)
        return text + (f" (Offline probe {self.probe_ms:,} ms)" if Scenario.Offline in self.scenarios else "")


def plan_bench(args: argparse.Namespace) -> BenchPlan:
    """The plan of a bench from its parsed options; BenchError names a bad list entry."""
    benchmarks = parse_list(args.benchmarks, BENCHMARK_NAMES, "benchmark")
    profiles = {profile_of(b).family: profile_of(b) for b in benchmarks}
    scenarios = parse_list(args.scenarios, {name: s for s, name in SCENARIO_NAMES.items()}, "scenario")
    case_names = {"all": "all"} | {c.name: c.name for p in profiles.values() for c in p.cases}
    extra_args, hints = split_extra_run_args(args.extra_run_args)
    run_args = {family: merge_flags(p.run_args, p.quick_run_args if args.quick else (), extra_args)
                for family, p in profiles.items()}
    durations = {s: args.min_duration_ms or (QUICK_DURATION_MS if args.quick else DEFAULT_DURATION_MS[s])
                 for s in DEFAULT_DURATION_MS}
    return BenchPlan(
        benchmarks=benchmarks,
        profiles=profiles,
        scenarios=scenarios,
        chosen_cases=parse_list(args.offline_lengths, case_names, "offline_length"),
        hints=hints,
        run_args=run_args,
        durations=durations,
        probe_ms=args.probe_ms or max(500, durations[Scenario.Offline] // 4),
        devices={family: _device(flags) for family, flags in run_args.items()},
    )


def _test_seconds(plan: BenchPlan, benchmark: str, scenario: Scenario, quick: bool,
                  duration_ms: int | None = None) -> tuple[float, Any]:
    """One LoadGen test of the bench at the config's expected rate (the product's estimate,
    code/actions/announce.py), with the flags and duration (``duration_ms``: a probe's) the bench gives it; and
    the resolved config."""
    from code.actions.announce import seconds_of_test
    from code.common.constants import TestMode
    from code.config.tuned import TUNED_FIELDS
    from code.mlperf.arguments import parse_run_args
    from code.tuning.plans import resolved_configs, system_name

    profile = profile_of(benchmark)
    fields: dict[str, Any] = {**_scenario_fields(profile, scenario, quick),
                              "min_duration": duration_ms or plan.durations[scenario]}
    hint = plan.hints.get(TUNED_FIELDS[scenario])
    if scenario is Scenario.SingleStream:
        hint = hint or profile.single_stream_hint_ns
    if hint is not None:
        fields[TUNED_FIELDS[scenario]] = hint
    flags = merge_flags(plan.run_args[profile.family], [f"--{name}={value}" for name, value in fields.items()])
    request = parse_run_args(["--action=info", f"--benchmarks={benchmark}", f"--scenarios={SCENARIO_NAMES[scenario]}",
                              "--input_data=synthetic", "--weights=random", *flags])
    (config,) = resolved_configs(request, system_name(request))
    return seconds_of_test(config, TestMode.PerformanceOnly), config


def plan_lines(plan: BenchPlan, args: argparse.Namespace) -> list[str]:
    """What the bench will run and for about how long, said before anything runs, as ``make run`` says its plan:
    the tests of each benchmark with its model, precision and device, and a lower bound of their time at the
    configs' expected rates (the probes and searches then measure the real ones; a model the flags change has no
    config rate, so no estimate). On a CPU, which runs the bench's full-length tests for hours, ``--quick`` is
    named as the check of the bench itself."""
    from code.actions.announce import duration_text
    from code.common.constants import TestMode
    from code.mlperf.benchmarks import load_benchmark

    lines, total, unknown = [], 0.0, []
    for benchmark in plan.benchmarks:
        profile = profile_of(benchmark)
        tests, config = [], None
        for scenario in plan.scenarios:
            seconds, config = _test_seconds(plan, benchmark, scenario, args.quick)
            runs = len(_cases(profile, plan.chosen_cases)) if scenario is Scenario.Offline else 1
            total += runs * seconds
            if scenario is Scenario.Offline:  # a run of each case, after a probe unless a hint gives the rate
                probe = "offline_expected_qps" not in plan.hints
                total += _test_seconds(plan, benchmark, scenario, args.quick, plan.probe_ms)[0] if probe else 0
                tests.append(f"Offline {', '.join(_cases(profile, plan.chosen_cases))}: {'a probe, then ' * probe}"
                             f"{runs} run{'s' * (runs > 1)}")
            elif scenario is Scenario.Server:
                tests.append(f"Server: a search of up to {args.server_max_runs} runs")
            else:
                tests.append("SingleStream: 1 run")
            if config.sources.get("model_name") != "RUN_ARGS":
                tests[-1] += f" of about {duration_text(seconds)}"
        assert config is not None, "parse_list refuses an empty --scenarios"
        if config.sources.get("model_name") == "RUN_ARGS":
            unknown.append(benchmark)
        model = load_benchmark(config.benchmark).describe_inputs(config, TestMode.PerformanceOnly)["model"]
        lines.append(f"{benchmark}: {model}, {config['precision']}, on {plan.devices[profile.family]}; "
                     f"{'; '.join(tests)}")
    baseline = "" if args.skip_baseline else ", then the HF baseline"
    if len(unknown) < len(plan.benchmarks):
        lines.append(f"estimated time: at least {duration_text(total)} of LoadGen tests at the configs' expected "
                     f"rates (model loading, engine builds and further Server runs come on top{baseline})")
    if unknown:
        lines.append(f"{', '.join(unknown)}: no estimate (the configs' rates are not of the model the flags give); "
                     "the probes measure the rates")
    on_cpu = [benchmark for benchmark in plan.benchmarks if plan.devices[profile_of(benchmark).family] == "cpu"]
    if on_cpu and not args.quick:
        lines.append(f"{', '.join(on_cpu)} on a CPU: the bench measures the GPU work; make bench BENCH_ARGS=--quick "
                     "checks the bench itself with tiny models in minutes")
    return lines


class BenchRecord:
    """The bench's report (bench.json, bench.md) and each benchmark's measurements, written after every step so an
    interrupted bench keeps what it measured."""

    def __init__(self, plan: BenchPlan, args: argparse.Namespace, argv: list[str], bench_dir: Path,
                 runner: HarnessRunner) -> None:
        self.bench_dir, self.runner, self.out = bench_dir, runner, args.out
        self.parts: dict[str, dict[str, Any]] = {}  # benchmark -> "offline", "server", "single" results
        first_device = next(iter(plan.devices.values()))
        self.report: dict[str, Any] = {
            "title": plan.title,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "bench_dir": str(bench_dir),
            "device": _device_name(first_device),
            "device_kind": first_device,
            "quick": args.quick,
            "benchmarks": plan.benchmarks,
            "scenarios": [s.value for s in plan.scenarios],
            "durations_ms": {s.value: plan.durations[s] for s in plan.scenarios},
            "probe_ms": plan.probe_ms,
            "durations_text": plan.durations_text,
            "inputs": {p.title: p.inputs for p in plan.profiles.values()},
            "run_args": plan.run_args,
            "hints": plan.hints,
            "bench_command": shlex.join([sys.executable, "-m", "scripts.bench", *argv]),
            "server_search": {},
            "baselines": {},
            "runs": [],
        }

    def part(self, benchmark: str) -> dict[str, Any]:
        return self.parts.setdefault(benchmark, {"offline": []})

    def figures(self) -> list[Figure]:
        rows = []
        for benchmark, part in self.parts.items():
            rows += build_figures(benchmark, part.get("offline", []), part.get("server"), part.get("single"),
                                  self.report["baselines"].get(profile_of(benchmark).family))
        return rows

    def save(self) -> None:
        self.report["runs"] = [{**asdict(o), "verdict": o.verdict()} for o in self.runner.outcomes]
        first = next((o for o in self.runner.outcomes if o.system), None)
        if first:
            self.report["system"], self.report["versions"] = first.system, first.versions
        write_reports(self.bench_dir, self.report, self.figures(), self.out)


def _bench_offline(plan: BenchPlan, record: BenchRecord, benchmark: str, quick: bool) -> None:
    """Each chosen Offline case; a later case starts from the first (realistic) case's throughput."""
    profile = profile_of(benchmark)
    realistic = profile.cases[0].name
    results = record.part(benchmark)["offline"]
    for case in _cases(profile, plan.chosen_cases):
        if case == realistic:
            hint = float(plan.hints["offline_expected_qps"]) if "offline_expected_qps" in plan.hints else None
        else:
            hint = _later_case_hint(benchmark, next((r for r in results if r.case == realistic), None))
        results.append(measure_offline(record.runner, benchmark, case, plan.durations[Scenario.Offline],
                                       plan.probe_ms, hint, _scenario_fields(profile, Scenario.Offline, quick)))
        record.save()


def _bench_server(plan: BenchPlan, record: BenchRecord, benchmark: str, args: argparse.Namespace) -> None:
    """The Server search on the realistic case, from 0.8 x its Offline throughput (or the hint, or the config)."""
    profile = profile_of(benchmark)
    realistic = profile.cases[0]
    part = record.part(benchmark)
    server_base = {**realistic.fields, **_scenario_fields(profile, Scenario.Server, args.quick)}
    known = next((r for r in part["offline"] if r.case == realistic.name), None)
    start = _server_start(benchmark, known, plan.hints, plan.run_args[profile.family])
    duration = plan.durations[Scenario.Server]
    search = search_server_qps(lambda qps: server_try(record.runner, benchmark, duration, server_base, qps),
                               start, args.server_max_runs, args.server_tolerance)
    part["server"] = search
    record.report["server_search"][benchmark] = {
        "start_qps": start,
        "best_qps": search.best_qps,
        "stopped_because": search.stopped_because,
        "tries": [asdict(t) for t in search.tries],
    }
    record.save()


def _bench_singlestream(plan: BenchPlan, record: BenchRecord, benchmark: str, quick: bool) -> None:
    profile = profile_of(benchmark)
    hint_ns = int(plan.hints.get("single_stream_expected_latency_ns", profile.single_stream_hint_ns))
    record.part(benchmark)["single"] = measure_singlestream(
        record.runner, benchmark, plan.durations[Scenario.SingleStream], hint_ns,
        {**profile.cases[0].fields, **_scenario_fields(profile, Scenario.SingleStream, quick)})
    record.save()


def _print_summary(plan: BenchPlan, record: BenchRecord) -> None:
    report = record.report
    print("\n" + "=" * 32 + f" {plan.title} bench " + "=" * 32)
    print(f"device: {report['device']} (system {report.get('system', '?')}); torch "
          f"{report.get('versions', {}).get('torch', '?')}; {report['date']}")
    print(f"durations: {plan.durations_text} (shortened; MLPerf: {MLPERF_DURATION_MS:,} ms)")
    for profile in plan.profiles.values():
        print(f"{profile.title} inputs: {profile.inputs}: NOT MLPerf results")
    print(render_text(format_table(record.figures(), report["baselines"])))
    print(f"reports: {record.bench_dir / 'bench.md'}, {record.bench_dir / 'bench.json'}")


def run_bench(args: argparse.Namespace, argv: list[str]) -> int:
    """Per benchmark its Offline cases, Server, SingleStream; then each family's baseline; then the table. Exit 1
    when a run did not finish."""
    plan = plan_bench(args)
    for line in plan_lines(plan, args):  # what runs and for how long, before anything runs
        print(f"[bench] plan: {line}", flush=True)
    bench_dir = new_bench_dir()
    runner = HarnessRunner(bench_dir, plan.run_args, args.verbose)
    device_text = ", ".join(f"{PROFILES[f].title} {d}" for f, d in plan.devices.items())
    print(f"[bench] folder: {bench_dir}\n[bench] durations: {plan.durations_text} (shortened; MLPerf: "
          f"{MLPERF_DURATION_MS:,} ms)\n[bench] device: {device_text}", flush=True)
    record = BenchRecord(plan, args, argv, bench_dir, runner)
    for benchmark in plan.benchmarks:
        record.part(benchmark)
        if Scenario.Offline in plan.scenarios:
            _bench_offline(plan, record, benchmark, args.quick)
        if Scenario.Server in plan.scenarios:
            _bench_server(plan, record, benchmark, args)
        if Scenario.SingleStream in plan.scenarios:
            _bench_singlestream(plan, record, benchmark, args.quick)
    if not args.skip_baseline:
        for family, profile in plan.profiles.items():
            cases = _cases(profile, plan.chosen_cases)
            record.report["baselines"][family] = _measure_baseline(profile, plan.run_args[family], cases, args)
            record.save()
    record.save()
    _print_summary(plan, record)
    return 1 if any(o.valid is None for o in runner.outcomes) else 0


@exits_on(BenchError)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_bench(parse_args(argv), argv)
