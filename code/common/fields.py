"""The one table of configuration fields.

A config class (configs/) may set only the fields listed here, RUN_ARGS may override any of them, and each has
one default. Keeping name, type, default, description and where a field applies in one table is what lets the
registry reject a misspelt field at import time and lets ``make info`` explain every resolved value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from code.common.constants import Benchmark, ChoiceError, Scenario
from code.common.rounds import DEFAULT_ROUND, ROUNDS


class FieldError(ValueError):
    """A field name or value that is not valid; the message says which and what is allowed."""


@dataclass(frozen=True)
class Field:
    """One setting: how it is typed, what it defaults to, and which benchmarks/scenarios it applies to."""

    name: str
    type: type
    default: Any
    description: str
    benchmarks: tuple[Benchmark, ...] | None = None  # None: every benchmark
    scenarios: tuple[Scenario, ...] | None = None  # None: every scenario
    required: bool = False  # a registered config class must set it (where it applies)
    choices: tuple[str, ...] | None = None

    def applies_to(self, benchmark: Benchmark, scenario: Scenario) -> bool:
        return (self.benchmarks is None or benchmark in self.benchmarks) and (
            self.scenarios is None or scenario in self.scenarios
        )

    def check(self, value: Any, where: str) -> Any:
        """Type-check a value from a config class; ints are accepted for float fields."""
        ok = isinstance(value, self.type) and not (self.type is int and isinstance(value, bool))
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if value is None and self.default is None:
            ok = True
        if not ok:
            raise FieldError(f"{where}: field '{self.name}' must be {self.type.__name__}, got {value!r}")
        if self.choices is not None and value is not None and value not in self.choices:
            raise FieldError(f"{where}: field '{self.name}' = {value!r}; valid choices: {', '.join(self.choices)}")
        return value

    def parse(self, text: str) -> Any:
        """Turn a RUN_ARGS string into a typed value, with an error that names the field."""
        try:
            if self.type is bool:
                lowered = text.strip().lower()
                if lowered in ("1", "true", "yes", "on", ""):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            value = self.type(text)
        except ValueError:
            raise FieldError(f"--{self.name}={text}: expected {self.type.__name__}") from None
        return self.check(value, f"--{self.name}")


FIELDS: dict[str, Field] = {
    f.name: f
    for f in [
        # Which round the result is for.
        Field("round", str, DEFAULT_ROUND, "MLPerf round the run is for: its LoadGen build (and so its RNG seeds) "
              "and what a SubmissionRun may run (documentation/rounds.md)", choices=tuple(ROUNDS)),
        # What runs.
        Field("backend", str, "pytorch", "Backend that runs the model: pytorch (our model), inflight (GPT-J: "
              "continuous batching of beam search, code/gptj/inflight), oracle (gold answers; checks the pipeline, "
              "not a model)", choices=("pytorch", "inflight", "oracle")),
        Field("precision", str, "fp32", "Numeric precision of the engine's matrix products (fp8: FP8 GEMMs with "
              "calibrated scales, 16-bit elsewhere, GPU only)", choices=("fp32", "fp16", "bf16", "fp8")),
        Field("device", str, "auto", "Where the model runs: auto (cuda when present, else cpu), cpu, cuda, cuda:N"),
        Field("cpu_threads", int, 0, "On a CPU device: torch's intra-op threads; 0: torch's default capped at "
              "the CPUs the process may use, one fewer in Server (LoadGen's threads need a free core; "
              "code/common/cpu_threads.py)"),
        Field("model_name", str, None, "Model architecture: the MLPerf model (bert: large, gptj: 6b; set by each "
              "benchmark's base config) or a small one for tests (tiny)"),
        Field("weights", str, "auto", "auto: the downloaded checkpoint, else random weights (performance only); "
              "random; or a checkpoint path"),
        Field("input_data", str, "auto", "auto: the preprocessed data set, else synthetic inputs (performance "
              "only); synthetic; or a preprocessed-data folder"),
        Field("synthetic_sample_count", int, None, "Samples in the synthetic data set (default: the real set's "
              "size)"),
        Field("synthetic_lengths", str, "dataset", "Lengths of synthetic samples: dataset (like the real set's) or "
              "max (every sample at the longest input: the worst case)", choices=("dataset", "max")),
        Field("seed", int, 0, "Seed for random weights and synthetic inputs"),
        Field("synthetic_length_scale", float, 1.0, "GPT-J: multiplies synthetic prompt lengths (0 < s <= 1; "
              "e.g. 0.05 for quick CPU tests)", benchmarks=(Benchmark.GPTJ,)),
        Field("num_beams", int, 4, "GPT-J beam width: 4 is the closed-division rule; 1 is greedy search (open "
              "division, debugging)", benchmarks=(Benchmark.GPTJ,)),
        Field("oracle_shift", int, 0, "oracle backend, a deliberately failing oracle: bert: move the gold answer by "
              "this many tokens; gptj: drop this many tokens from the end of every reference summary"),
        # How the C++ core batches.
        Field("gpu_batch_size", int, None, "Largest batch the batcher hands to the backend", required=True),
        Field("num_workers", int, 1, "Batcher threads, each driving the backend (NVIDIA: inference streams)"),
        Field("sort_by_length", bool, True, "Sort each query's samples longest first before batching"),
        Field("batch_timeout_us", int, 0, "Server: how long a worker waits to fill a batch once it holds a sample",
              scenarios=(Scenario.Server,)),
        # BERT GPU path (code/bert/fast; documentation/bert_gpu.md). Only the pytorch backend on CUDA reads these.
        Field("fast_path", bool, True, "BERT on CUDA: packed fast path (fused kernels, varlen attention, FP8 "
              "GEMMs, CUDA graphs) for fp16/bf16/fp8 engines; off: the eager padded model",
              benchmarks=(Benchmark.BERT,)),
        Field("cuda_graphs", bool, True, "CUDA graphs: BERT fast path, one per token bucket for small batches; "
              "GPT-J inflight, one per decode step"),
        Field("graph_max_tokens", int, 16384, "BERT fast path: largest token bucket with a CUDA graph (larger "
              "batches run eagerly)", benchmarks=(Benchmark.BERT,)),
        Field("fp8_fast_accum", bool, False, "BERT fast path, fp8: cuBLASLt fast accumulation in the FP8 GEMMs",
              benchmarks=(Benchmark.BERT,)),
        Field("fp8_gemms", str, "qkv+wo+w1+w2", "BERT fast path, fp8: which GEMMs of every layer run in FP8, "
              "'+'-joined from qkv, wo, w1, w2 (the others stay 16-bit)", benchmarks=(Benchmark.BERT,)),
        Field("attention_kernel", str, "triton", "BERT fast path: varlen attention kernel (triton: ours, "
              "code/bert/fast/attention.py, which also adds the QKV bias; flash: torch's FlashAttention-2)",
              benchmarks=(Benchmark.BERT,), choices=("triton", "flash")),
        Field("gelu_in_gemm", bool, False, "BERT fast path: bias + GELU in the first FFN GEMM's cuBLASLt "
              "epilogue (tanh form; FP8 w1: also writes w2's FP8 input); off: a separate erf-GELU kernel, the "
              "reference's form (the 99.9% target needs it)",
              benchmarks=(Benchmark.BERT,)),
        # GPT-J in-flight engine (code/gptj/inflight; documentation/gptj_gpu.md).
        Field("kv_cache_dtype", str, "auto", "GPT-J inflight: what the KV cache stores: auto (the model's 16-bit "
              "type) or fp8 (e4m3, per-layer scales from calibration; GPU only)", benchmarks=(Benchmark.GPTJ,),
              choices=("auto", "fp8")),
        Field("synthetic_output_lengths", str, "model", "GPT-J inflight on synthetic inputs: model (outputs end "
              "where the model chooses EOS; random weights never do, so every output is 128 tokens) or forced "
              "(EOS forced at lengths drawn with mean ~70, what real weights produce; code/gptj/dataset.py)",
              benchmarks=(Benchmark.GPTJ,), choices=("model", "forced")),
        # LoadGen (written to user.conf).
        Field("offline_expected_qps", float, None, "Offline: expected samples/s; LoadGen sizes the query from it "
              "(set it at or above the real throughput)", scenarios=(Scenario.Offline,), required=True),
        Field("server_target_qps", float, None, "Server: the Poisson arrival rate LoadGen issues at",
              scenarios=(Scenario.Server,), required=True),
        Field("single_stream_expected_latency_ns", int, None, "SingleStream: expected latency, a hint to LoadGen",
              scenarios=(Scenario.SingleStream,), required=True),
        Field("min_duration", int, None, "LoadGen minimum duration in ms (mlperf.conf: 600000)"),
        Field("max_duration", int, None, "LoadGen maximum duration in ms (0 = none)"),
        Field("min_query_count", int, None, "LoadGen minimum query count"),
        Field("max_query_count", int, None, "LoadGen maximum query count (0 = none)"),
        Field("performance_sample_count_override", int, None, "Samples LoadGen loads for performance runs "
              "(may only go up from the benchmark's)"),
        Field("test_mode", str, "PerformanceOnly", "PerformanceOnly, AccuracyOnly, or SubmissionRun (accuracy "
              "then performance)", choices=("PerformanceOnly", "AccuracyOnly", "SubmissionRun")),
        Field("test_run", bool, False, "Short run: min_duration 60 s, min_query_count 1 (alias --fast); "
              "not a valid submission"),
        # Where results go.
        Field("log_enable_trace", bool, False, "LoadGen's trace (mlperf_log_trace.json, for debugging): GBs at GPU "
              "rates, written during the timed run; the submission checker rejects files over 50 MB"),
        Field("log_dir", str, None, "Log folder (default build/logs/<timestamp>); must not hold an earlier run"),
    ]
}


def get_field(name: str) -> Field:
    """Look a field up by name; an unknown name gets the list of fields."""
    try:
        return FIELDS[name]
    except KeyError:
        raise FieldError(f"unknown field '{name}'; valid fields: {', '.join(sorted(FIELDS))}") from None


def applicable_fields(benchmark: Benchmark, scenario: Scenario) -> list[Field]:
    return [f for f in FIELDS.values() if f.applies_to(benchmark, scenario)]


__all__ = ["FIELDS", "ChoiceError", "Field", "FieldError", "applicable_fields", "get_field"]
