"""The one table of configuration fields: the harness's own, listed here, and each backend's switches.

A config class may set only the fields in the table, RUN_ARGS may override any of them, and each has one default:
one table of name, type, default, description and scope lets the registry reject a misspelt field at import time
and ``make info`` explain every resolved value. A switch only one backend reads is declared beside that backend
(``code/<bench>/backends/__init__.py``) and joins the table from there (``switches_of``), so this module names none.

This is the one validation layer: every value is checked here before anything runs. Every numeric field has a range
(NaN and infinity are outside all), because LoadGen and the C++ core take what they are given: a rate of 0, a
negative duration (read as a huge unsigned one) or too few samples hang a run, exhaust memory or void the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from code.common.constants import DATASET_SIZE, Benchmark, Scenario
from code.common.gpu_models import model_names
from code.common.loadgen_rules import OFFLINE_SLACK, offline_query_samples
from code.common.rounds import ROUNDS
from code.common.systems import memory_bytes
from code.config.backends import BackendDeclaration, Given, Origin, declaration, declarations, needs_gpu
from code.config.field_spec import Field, FieldError, Range

# LoadGen reads counts and durations as uint64 and keeps durations as int64 ns; a seed feeds numpy (no negative
# seeds) and torch (at most 64 bits), and 32 bits suit both.
INT64_MAX = 2**63 - 1
LOADGEN_MAX_MS = INT64_MAX // 1_000_000
SEED_MAX = 2**32 - 1
# LoadGen plans every query before a performance run starts (about rate x min_duration): a rate or latency far
# from the system's costs memory and time in proportion.
MAX_RATE = 1_000_000.0  # samples/s; 1 us per sample
MIN_LATENCY_NS = 1_000
# What LoadGen runs with where user.conf sets nothing: mlperf.conf's minimums; LoadGen's default min_query_count for
# Server and SingleStream (Offline's one query holds the data set, far below any memory bound); --test_run's.
MLPERF_MIN_DURATION_MS = 600_000
MLPERF_MIN_QUERY_COUNT = {Scenario.Offline: 1, Scenario.Server: 100, Scenario.SingleStream: 100}
TEST_RUN_MIN_DURATION_MS = 60_000  # --test_run / --fast (NVIDIA's values)
TEST_RUN_MIN_QUERY_COUNT = 1
# Measured on the 2-core dev VM (BERT Offline, --test_run): peak memory grows 166-178 bytes per planned sample from
# 1 M to 7.9 M samples, 143 bytes for 50.6 M (7.2 GB). A plan may take this share of the machine's memory.
BYTES_PER_PLANNED_SAMPLE = 170
PLAN_MEMORY_SHARE = 0.2
# LoadGen's start to the first completed sample, which no progress line covers: 4 s for 10 M samples, 8 s for 20 M,
# 30-45 s for 50.6 M (BERT-tiny). From PLAN_SAID_FROM samples on the test says so first (``plan_note``).
SECONDS_PER_PLANNED_SAMPLE = 0.4e-6
PLAN_SAID_FROM = 1_000_000
PLAN_FIELDS = ("offline_expected_qps", "server_target_qps", "single_stream_expected_latency_ns", "min_duration",
               "min_query_count")  # what sizes the plan



HARNESS_FIELDS: tuple[Field, ...] = (
    # No fixed default: each test's is the newest round that accepts it and builds from PyPI (``default_round``,
    # filled in by code/config/resolve.py once the test's system type and test mode are known).
    Field("round", str, None, "MLPerf round the run is for: its LoadGen build (and so its RNG seeds) and what a "
          "SubmissionRun may run; unset: per test, the newest round that accepts it and whose LoadGen builds from "
          "PyPI (documentation/rounds.md)", choices=tuple(ROUNDS)),
    Field("backend", str, "pytorch", "Backend that runs the model: pytorch (our model), inflight (continuous "
          "batching: GPT-J's beam search, llama3.1-8b's greedy search; code/llm/inflight_engine.py), oracle (gold "
          "answers; checks the pipeline, "
          "not a model)", choices=("pytorch", "inflight", "oracle"), engine=True),
    Field("precision", str, "fp32", "Numeric precision of the engine's matrix products (fp8: FP8 GEMMs with "
          "calibrated scales, 16-bit elsewhere, GPU only; int8, BERT: INT8 GEMMs with calibrated scales, 16-bit "
          "elsewhere, GPU only, for GPUs without FP8)", choices=("fp32", "fp16", "bf16", "fp8", "int8"),
          engine=True),
    Field("device", str, "auto", "Where the model runs: auto (cuda when present, else cpu), cpu, cuda, cuda:N",
          pattern=r"auto|cpu|cuda(:[0-9]{1,3})?"),
    Field("devices", str, "all", "GPUs a run uses, one backend instance each (NVIDIA's --devices): all (every "
          "GPU PyTorch sees, after CUDA_VISIBLE_DEVICES) or a comma list of their indices, e.g. 0,1 "
          "(documentation/multi_gpu.md)", pattern=r"all|[0-9]{1,3}(,[0-9]{1,3})*"),
    Field("gpu_as", str, None, "Run as if on this GPU model (code/common/gpu_models.py), a stand-in for a GPU "
          "no one at hand has: its system name and configs, the engines its compute capability runs, its memory "
          "as a cap on each GPU; the result says so and is not submittable (documentation/adding_a_system.md)",
          choices=tuple(model_names())),
    Field("cpu_threads", int, 0, "On a CPU device: torch's intra-op threads; 0: torch's default capped at "
          "the CPUs the process may use, one fewer in Server (LoadGen's threads need a free core; "
          "code/mlperf/devices.py)", range=Range(0, 4096)),
    Field("cpu_workers", int, 1, "On the CPU: worker processes, each a device with its share of the CPUs, as a "
          "GPU run has one per GPU (for tests of the several-device path; 1: the model runs in the LoadGen "
          "process)", range=Range(1, 64)),
    Field("cluster", str, None, "A Ray cluster's address (host:port of its head, or auto): the run's workers "
          "are one per GPU of every node (on the CPU: cpu_workers per node), LoadGen stays here; not given: this "
          "machine alone (documentation/cluster.md)", pattern=r"auto|[A-Za-z0-9._-]+:[0-9]{1,5}"),
    Field("cluster_host", str, None, "With --cluster: the IP address of this node that the workers connect "
          "back to; not given: the address Ray knows this node by",
          pattern=r"[0-9]{1,3}(\.[0-9]{1,3}){3}"),
    Field("cluster_port", int, 0, "With --cluster: the port the workers connect back to; 0: a free one "
          "(give one where a firewall lets only known ports through)", range=Range(0, 65535)),
    Field("cluster_ready_timeout_s", int, 1800, "With --cluster: seconds every worker has to connect and load "
          "before the run stops, naming the late node", range=Range(1, 86400)),
    Field("model_name", str, None, "Model architecture: the MLPerf model (bert: large, gptj: 6b, llama3.1-8b: "
          "8b; set by each benchmark's base config) or a small one for tests (tiny)"),
    Field("weights", str, "auto", "auto: the downloaded checkpoint, else random weights (performance only); "
          "random; or a checkpoint path"),
    Field("input_data", str, "auto", "auto: the preprocessed data set, else synthetic inputs (performance "
          "only); synthetic; or a preprocessed-data folder"),
    Field("synthetic_sample_count", int, None, "Samples in the synthetic data set (default: the real set's "
          "size)", range=Range(1, 1_000_000)),
    Field("synthetic_lengths", str, "dataset", "Lengths of synthetic samples: dataset (like the real set's) or "
          "max (every sample at the longest input: the worst case)", choices=("dataset", "max")),
    Field("seed", int, 0, "Seed for random weights and synthetic inputs", range=Range(0, SEED_MAX)),
    Field("synthetic_length_scale", float, 1.0, "GPT-J, llama3.1-8b: multiplies synthetic prompt lengths (e.g. "
          "0.05 for quick CPU tests)", benchmarks=(Benchmark.GPTJ, Benchmark.LLAMA31),
          range=Range(0, 1, above_low=True)),
    Field("num_beams", int, 4, "GPT-J beam width: 4 is the closed-division rule; 1 is greedy search (open "
          "division, debugging)", benchmarks=(Benchmark.GPTJ,), range=Range(1, 64), engine=True),
    # How the C++ core batches.
    Field("gpu_batch_size", int, None, "Largest batch the batcher hands to the backend", required=True,
          range=Range(1, 65_536)),
    Field("num_workers", int, 1, "Batcher threads per device, each driving the backend (alias "
          "--gpu_inference_streams, NVIDIA's name)", range=Range(1, 256)),
    Field("sort_by_length", bool, True, "Sort each query's samples longest first before batching"),
    Field("batch_timeout_us", int, 0, "Server: how long a worker waits to fill a batch once it holds a sample",
          scenarios=(Scenario.Server,), range=Range(0, 60_000_000)),
    # LoadGen (written to user.conf).
    Field("offline_expected_qps", float, None, "Offline: expected samples/s of the whole system, of one GPU in a "
          "GPU model's class; LoadGen sizes the query from it (set it at or above the real throughput)",
          scenarios=(Scenario.Offline,), required=True, range=Range(0, MAX_RATE, above_low=True),
          system_rate=True),
    Field("server_target_qps", float, None, "Server: the Poisson arrival rate LoadGen issues at, in queries/s, "
          "for the whole system; of one GPU in a GPU model's class", scenarios=(Scenario.Server,),
          required=True, range=Range(0, MAX_RATE, above_low=True), system_rate=True),
    Field("single_stream_expected_latency_ns", int, None, "SingleStream: expected latency in ns, a hint to "
          "LoadGen", scenarios=(Scenario.SingleStream,), required=True,
          range=Range(MIN_LATENCY_NS, 1_000_000_000_000)),
    Field("min_duration", int, None, "LoadGen minimum duration in ms (mlperf.conf: 600000)",
          range=Range(0, LOADGEN_MAX_MS)),
    Field("max_duration", int, None, "LoadGen maximum duration in ms (0 = none)", range=Range(0, LOADGEN_MAX_MS)),
    Field("min_query_count", int, None, "LoadGen minimum query count", range=Range(0, INT64_MAX)),
    Field("max_query_count", int, None, "LoadGen maximum query count (0 = none)", range=Range(0, INT64_MAX)),
    Field("performance_sample_count_override", int, None, "Samples LoadGen loads for performance runs; "
          "may only go up from the benchmark's (mlperf.conf: bert 10,833, gptj 13,368); a smaller data set "
          "gets its own size without it", range=Range(1, INT64_MAX)),
    Field("test_mode", str, "PerformanceOnly", "PerformanceOnly, AccuracyOnly, or SubmissionRun (accuracy "
          "then performance)", choices=("PerformanceOnly", "AccuracyOnly", "SubmissionRun")),
    Field("test_run", bool, False, "Short run: min_duration 60 s, min_query_count 1 (alias --fast); GPT-J and "
          "llama3.1-8b load only the samples that duration issues; not a valid submission"),
    Field("num_samples", int, None, "AccuracyOnly: run and score only the first N real samples, a quick "
          "accuracy check; never a valid result (default: the whole data set)", range=Range(1, 1_000_000)),
    Field("log_enable_trace", bool, False, "LoadGen's trace (mlperf_log_trace.json, for debugging): GBs at GPU "
          "rates, written during the timed run; the submission checker rejects files over 50 MB"),
    Field("log_dir", str, None, "Log folder (default build/logs/<timestamp>); must not hold an earlier run"),
)


def switches_of(harness: tuple[Field, ...]) -> dict[str, Field]:
    """The harness's fields, then every backend's switches in declaration order, each once with its declarers."""
    table = {fld.name: fld for fld in harness}
    switches: dict[str, Field] = {}
    for benchmark in Benchmark:
        for declared in declarations(benchmark):
            owner = (benchmark, declared.name)
            for switch in declared.switches:
                if switch.name in table:
                    raise TypeError(f"the {benchmark.value} {declared.name} backend declares switch '{switch.name}', "
                                    "a field of the harness (code/config/fields.py): give the switch another name")
                known = switches.get(switch.name)
                switches[switch.name] = switch.owned_by(owner) if known is None else known.merged(switch, owner)
    return table | switches


FIELDS: dict[str, Field] = switches_of(HARNESS_FIELDS)


def origin_of(sources: Mapping[str, str]) -> Origin:
    """How an error names where a value came from: ``--name``, or ``name (set by <source>)``."""
    return lambda name: (f"--{name}" if sources.get(name) == "RUN_ARGS"
                         else f"{name} (set by {sources.get(name, 'default')})")


def check_combination(benchmark: Benchmark, values: dict[str, Any], sources: dict[str, str]) -> None:
    """The rules between a resolved config's fields (each already in its range), its benchmark and its backend's
    declaration."""
    origin = origin_of(sources)
    override = values.get("performance_sample_count_override")
    minimum = DATASET_SIZE[benchmark]
    if override is not None and override < minimum:
        raise FieldError(
            f"{origin('performance_sample_count_override')} = {override} is below {benchmark.value}'s performance "
            f"sample count, {minimum:,} (mlperf.conf), and may only go up from it; leave it out (a smaller data "
            f"set gets its own size) or set it to at least {minimum:,}"
        )
    if values.get("num_samples") is not None and values.get("test_mode") != "AccuracyOnly":
        raise FieldError(f"{origin('num_samples')} = {values['num_samples']} is for a quick accuracy check: add "
                         f"--test_mode=AccuracyOnly (it is {values.get('test_mode')}), or leave --num_samples out")
    backend = values.get("backend")
    declared = declaration(benchmark, backend)
    if declared is None:
        names = ", ".join(other.name for other in declarations(benchmark))
        raise FieldError(f"{origin('backend')} = {backend!r} is not a {benchmark.value} backend; "
                         f"{benchmark.value} has: {names}")
    precision = values.get("precision")
    if declared.precisions is not None and precision not in declared.precisions:
        raise FieldError(_precision_elsewhere(benchmark, backend, precision, origin))
    problem = _foreign_switch(benchmark, declared, values, sources)
    problem = problem or (declared.check(values, origin) if declared.check else None)
    if problem:
        raise FieldError(problem)
    _check_durations(values, origin)
    _check_cluster(values, sources, origin)


def _check_durations(values: dict[str, Any], origin: Origin) -> None:
    """A maximum duration below the minimum makes every performance test INVALID, with a hint (raise the target QPS)
    that does not apply."""
    maximum = values.get("max_duration")
    if not maximum or values.get("test_mode") == "AccuracyOnly":
        return  # 0: no maximum; an accuracy test issues each sample once, whatever the durations
    minimum = min_duration_ms(values)
    if maximum < minimum:
        by = (origin("min_duration") if values.get("min_duration") is not None else
              "--test_run's" if values.get("test_run") else "mlperf.conf's")
        raise FieldError(f"{origin('max_duration')} = {maximum:,} ms is below the minimum duration, {minimum:,} ms "
                         f"({by}): LoadGen would stop before the minimum is met and the test would be INVALID; "
                         f"raise --max_duration to at least {minimum}, lower --min_duration, or leave --max_duration "
                         "out")


def _check_cluster(values: dict[str, Any], sources: dict[str, str], origin: Origin) -> None:
    """A cluster port no TCP connection can have (the pattern takes 5 digits), and cluster fields given without
    --cluster, which a run on this machine alone would silently ignore."""
    cluster = values.get("cluster")
    if cluster and cluster != "auto":
        port = int(cluster.rpartition(":")[2])
        if not 0 < port <= 65535:
            raise FieldError(f"{origin('cluster')} = {cluster!r}: port {port} is not a TCP port (1 to 65,535); give "
                             "the host:port of the cluster's head, as `ray start --head` printed it (its port is "
                             "6379 unless --port was given)")
    if not cluster:
        for name in FIELDS:
            if name.startswith("cluster_") and sources.get(name) == "RUN_ARGS":
                raise FieldError(f"{origin(name)} = {values[name]} applies with --cluster only, and this run has "
                                 f"none (it runs on this machine alone): add --cluster=<the head's host:port>, or "
                                 f"leave --{name} out")


def min_duration_ms(values: dict[str, Any]) -> int:
    """min_duration where set, else --test_run's or mlperf.conf's."""
    duration_ms = values.get("min_duration")
    if duration_ms is None:
        duration_ms = TEST_RUN_MIN_DURATION_MS if values.get("test_run") else MLPERF_MIN_DURATION_MS
    return int(duration_ms)


def planned_samples(scenario: Scenario, values: dict[str, Any]) -> int:
    """The samples LoadGen plans (and holds in memory) before a performance run starts: rate (or 1 / latency) x
    minimum duration, at least the minimum query count, at most a maximum query count (Server, SingleStream)."""
    duration_ms = min_duration_ms(values)
    if scenario is Scenario.Offline:
        return offline_query_samples(float(values["offline_expected_qps"]), duration_ms)
    if scenario is Scenario.Server:
        by_rate = float(values["server_target_qps"]) * duration_ms / 1000
    else:
        by_rate = duration_ms * 1e6 / int(values["single_stream_expected_latency_ns"])
    minimum = values.get("min_query_count")
    if minimum is None:
        minimum = TEST_RUN_MIN_QUERY_COUNT if values.get("test_run") else MLPERF_MIN_QUERY_COUNT[scenario]
    planned = max(int(round(by_rate)), minimum)
    maximum = values.get("max_query_count")
    return min(planned, maximum) if maximum else planned


def plan_note(scenario: Scenario, values: dict[str, Any]) -> str | None:
    """The line a performance test prints before a large plan (``PLAN_SAID_FROM``): the samples, their memory and
    the wait before the first one runs, a silence no progress line can fill; None for a small plan or an accuracy
    run."""
    if values.get("test_mode") == "AccuracyOnly":
        return None
    planned = planned_samples(scenario, values)
    if planned < PLAN_SAID_FROM:
        return None
    seconds = max(1, round(planned * SECONDS_PER_PLANNED_SAMPLE))
    line = (f"LoadGen plans {planned:,} samples (about {planned * BYTES_PER_PLANNED_SAMPLE / 2**30:.1f} GiB of "
            f"memory) and takes about {seconds} s before the first one runs; progress lines start then")
    if scenario is Scenario.Offline:
        rate = float(values["offline_expected_qps"])
        line += (f"; they last {planned / rate:,.0f} s at --offline_expected_qps={rate:g} samples/s and longer on a "
                 "slower system (make find_performance measures its rate)")
    return line


def check_plan(scenario: Scenario, values: dict[str, Any], sources: dict[str, str]) -> None:
    """Refuse RUN_ARGS whose plan takes more than ``PLAN_MEMORY_SHARE`` of this machine's memory: LoadGen would
    spend minutes and gigabytes on it before the first sample, showing nothing. The message names the value that
    fits."""
    if values.get("test_mode") == "AccuracyOnly":
        return  # an accuracy run issues each sample once, whatever the rate
    if not any(sources.get(name) == "RUN_ARGS" for name in PLAN_FIELDS):
        # A config class's or tuned value is sized for the system it describes, which need not be this machine
        # (make info of an 8-GPU system on a laptop); what RUN_ARGS give is for a run here.
        return
    memory = memory_bytes()
    if not memory:
        return
    planned = planned_samples(scenario, values)
    bound = int(memory * PLAN_MEMORY_SHARE / BYTES_PER_PLANNED_SAMPLE)
    if planned <= bound:
        return
    duration_ms = min_duration_ms(values)
    seconds = duration_ms / 1000
    if scenario is Scenario.SingleStream:
        name, fits = "single_stream_expected_latency_ns", f"{math.ceil(duration_ms * 1e6 / bound)} at least"
    else:
        name = "offline_expected_qps" if scenario is Scenario.Offline else "server_target_qps"
        per_second = seconds * (OFFLINE_SLACK if scenario is Scenario.Offline else 1)
        fits = f"{math.floor(bound / per_second)} at most"
    raise FieldError(
        f"{origin_of(sources)(name)} = {values[name]:g} with a {seconds:g} s minimum duration asks LoadGen to plan "
        f"{planned:,} samples before the run starts (about {planned * BYTES_PER_PLANNED_SAMPLE / 2**30:.1f} GiB), "
        f"more than {PLAN_MEMORY_SHARE:.0%} of this machine's {memory / 2**30:.1f} GiB: set it to what the system "
        f"does (make find_performance measures it; --{name}={fits} here), or plan fewer samples with a shorter "
        f"--min_duration{'' if scenario is Scenario.Offline else ' or a --max_query_count'}")


def _foreign_switch(benchmark: Benchmark, declared: BackendDeclaration, values: dict[str, Any],
                    sources: dict[str, str]) -> str | None:
    """A non-default value, not from RUN_ARGS (``check_run_args_used`` judges those over the whole run), of a switch
    of another backend than this model-running one: the run would be labelled with an engine option it lacks. A
    backend that runs no model reads no engine option and is labelled with none."""
    if not declared.runs_model:
        return None
    for name, value in values.items():
        fld = FIELDS[name]
        source = sources.get(name, "default")
        if fld.used_by(benchmark, declared.name) or value == fld.default or source == "RUN_ARGS":
            continue
        owners = [backend for owner, backend in fld.owners if owner is benchmark]
        value_text = str(value).lower() if isinstance(value, bool) else value
        return (f"{name}={value_text} (set by {source}) is an option of the {' and '.join(owners)} backend, not of "
                f"{declared.name}: set --backend={owners[0]}, or --{name}={fld.default_text()}")
    return None


def _precision_elsewhere(benchmark: Benchmark, backend: str, precision: str, origin: Origin) -> str:
    """The error for a precision the chosen backend does not run: which of the benchmark's backends do."""
    default = FIELDS["precision"].default
    others = [other.name for other in declarations(benchmark) if precision in (other.precisions or ())]
    if not others:
        runs = list(dict.fromkeys(p for other in declarations(benchmark) for p in (other.precisions or ())))
        return (f"{origin('precision')} = {precision!r}: no {benchmark.value} backend runs it ({benchmark.value} runs "
                f"{', '.join(runs)}); set --precision={default}, or one of those")
    return (f"{origin('precision')} = {precision!r} needs --backend={' or --backend='.join(others)} (the {backend} "
            f"backend has no {precision.upper()}); set --backend={others[0]}, or --precision={default}")


def given_of(values: Mapping[str, Any], sources: Mapping[str, str]) -> Given:
    """How an error names a value and where it came from: ``--name=value``, or ``name=value (set by <source>)``."""
    return lambda name: (f"--{name}={values.get(name)}" if sources.get(name) == "RUN_ARGS"
                         else f"{name}={values.get(name)} (set by {sources.get(name, 'default')})")


def check_device(benchmark: Benchmark, values: dict[str, Any], sources: dict[str, str], device: str) -> None:
    """The rules between a resolved config and the device it runs on (``auto`` already made concrete)."""
    declared = declaration(benchmark, values.get("backend"))
    if declared is None or not declared.runs_model:
        return  # runs no model: precision and device mean nothing to it
    on = "--device=cpu" if device == "cpu" else f"device {device}"
    given = given_of(values, sources)
    problem = needs_gpu("precision", values.get("precision"), FIELDS["precision"].default, device, on, given)
    if problem is None and declared.check_device:
        problem = declared.check_device(values, device, on, given)
    if problem:
        raise FieldError(problem)
