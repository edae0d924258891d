"""The fixed vocabulary of a run: benchmarks, scenarios, workload settings and test modes.

Every user-facing spelling (``bert-99``, ``offline``, ``0.999``, ``high_accuracy``) is turned into one of these
enums in a single place, so the rest of the code compares enums, never strings.
"""

from __future__ import annotations

import difflib
import re
from enum import Enum, IntEnum
from typing import NamedTuple, Self


class ChoiceError(ValueError):
    """A user-facing value that is not one of the valid choices; the message lists them."""


def closest(value: str, choices: list[str]) -> str | None:
    """The choice ``value`` is most likely a typo of (case-insensitive), or None: a typo costs one try."""
    by_lower = {choice.lower(): choice for choice in choices}
    found = difflib.get_close_matches(value.strip().lower(), list(by_lower), n=1)
    return by_lower[found[0]] if found else None


def choice_error(kind: str, value: str, choices: list[str]) -> ChoiceError:
    guess = closest(value, choices)
    hint = f" (did you mean {guess}?)" if guess else ""
    return ChoiceError(f"unknown {kind} '{value}'{hint}; valid choices: {', '.join(choices)}")


class _Choice(Enum):
    """An enum a user names by its value, in any case; an unknown name gets the valid values listed."""

    @classmethod
    def parse(cls, text: str) -> Self:
        for member in cls:
            if text.strip().lower() == str(member.value).lower():
                return member
        kind = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()  # HarnessType -> "harness type"
        raise choice_error(kind, text, [str(member.value) for member in cls])


class Benchmark(Enum):
    """A benchmark family; its accuracy target picks bert-99 or bert-99.9 (a submission's benchmark name)."""

    BERT = "bert"
    GPTJ = "gptj"
    LLAMA31 = "llama3.1-8b"

    @property
    def loadgen_model(self) -> str:
        """The key mlperf.conf uses for this benchmark (the same for the 99% and 99.9% variants); a run of its edge
        set reads that set's own key (``EDGE_SETS``, code/config/resolve.py's ``loadgen_model``)."""
        return "llama3_1-8b" if self is Benchmark.LLAMA31 else self.value

    @property
    def package(self) -> str:
        """Its folder under code/ and configs/: a Python package name, which ``llama3.1-8b`` cannot be."""
        return "llama31" if self is Benchmark.LLAMA31 else self.value

    @property
    def accuracy_targets(self) -> tuple[AccuracyTarget, ...]:
        """The targets MLPerf defines for it: llama3.1-8b has one (99%), and its name no suffix."""
        return (AccuracyTarget.k_99,) if self is Benchmark.LLAMA31 else tuple(AccuracyTarget)

    def submission_name(self, target: AccuracyTarget) -> str:
        """bert-99, bert-99.9, gptj-99, llama3.1-8b: the name a round's tables and a submission use."""
        if len(self.accuracy_targets) == 1:
            return self.value
        return f"{self.value}-{target.suffix}"

    @classmethod
    def parse(cls, text: str) -> tuple[Benchmark, AccuracyTarget | None]:
        """``bert`` -> (BERT, None); ``bert-99.9`` -> (BERT, k_99_9): the suffix fixes the accuracy target."""
        name = text.strip().lower()
        for benchmark in cls:
            if name == benchmark.value:
                return benchmark, None
            for target in benchmark.accuracy_targets:
                if name == benchmark.submission_name(target):
                    return benchmark, target
        valid = list(dict.fromkeys([b.value for b in cls] + [b.submission_name(t) for b in cls
                                                              for t in b.accuracy_targets]))
        raise choice_error("benchmark", text, valid)


class Scenario(_Choice):
    """LoadGen scenarios this harness runs (datacenter Offline/Server, edge SingleStream)."""

    Offline = "Offline"
    Server = "Server"
    SingleStream = "SingleStream"


class AccuracyTarget(Enum):
    """The fraction of the FP32 reference accuracy a result must reach."""

    k_99 = 0.99
    k_99_9 = 0.999

    @property
    def suffix(self) -> str:
        """``99`` or ``99.9``, as in the benchmark names bert-99 and bert-99.9."""
        return "99" if self is AccuracyTarget.k_99 else "99.9"

    @classmethod
    def parse(cls, text: str) -> AccuracyTarget:
        try:
            value = float(text)
        except ValueError:
            value = None
        for target in cls:
            if value is not None and abs(value - target.value) < 1e-9:
                return target
            if text.strip() in (target.name, target.suffix):
                return target
        raise choice_error("accuracy target", text, ["0.99", "0.999"])


class HarnessType(_Choice):
    """Which harness runs a benchmark. Only our C++ core (Custom) exists; the enum keeps NVIDIA's spelling."""

    Custom = "custom"


class PowerSetting(_Choice):
    """MaxP: run for speed. MaxQ: run for energy efficiency (power-measured submissions)."""

    MaxP = "MaxP"
    MaxQ = "MaxQ"


class TestMode(_Choice):
    """What a run measures. SubmissionRun is an accuracy run followed by a performance run."""

    __test__ = False  # not a pytest test class despite its name

    PerformanceOnly = "PerformanceOnly"
    AccuracyOnly = "AccuracyOnly"
    SubmissionRun = "SubmissionRun"

    @property
    def loadgen_modes(self) -> list[TestMode]:
        """The LoadGen test modes this run performs, in order."""
        if self is TestMode.SubmissionRun:
            return [TestMode.AccuracyOnly, TestMode.PerformanceOnly]
        return [self]


class ExitCode(IntEnum):
    """What ``python -m code.main`` exits with, so a script can gate on a run (documentation/commands.md)."""

    OK = 0  # every test ran and is VALID or PASS (possibly not submittable: the summary says why)
    TEST_FAILED = 1  # a test process did not finish (a crash, a missing engine)
    BAD_INPUT = 2  # bad RUN_ARGS, config, round or missing data: refused before anything ran
    INVALID = 3  # a test ended INVALID (LoadGen) or its accuracy FAILed the target


# Legacy NVIDIA spelling of the workload: --config_ver=default|high_accuracy.
CONFIG_VER_TO_ACCURACY = {"default": AccuracyTarget.k_99, "high_accuracy": AccuracyTarget.k_99_9}

# Samples in each benchmark's data set: the QSL size, LoadGen's performance sample count and Offline's minimum. An
# edge set (EDGE_SETS) has its own.
DATASET_SIZE = {Benchmark.BERT: 10833, Benchmark.GPTJ: 13368, Benchmark.LLAMA31: 13368}


class EdgeSet(NamedTuple):
    """A smaller data set a round's checker takes from an edge system under a name of its own, which mlperf.conf
    sets apart under a key of its own: a run of it reads that key's settings, not the benchmark's."""

    loadgen_model: str  # its mlperf.conf key
    size: int  # its samples: the key's performance sample count and Offline minimum


# llama3.1-8b's edge set (the checker's llama3.1-8b-edge in v5.1 and v6.1: Round.edge_names): mlperf.conf's
# llama3_1-8b-edge sets its performance_sample_count and Offline min_query_count to 5,000 where llama3_1-8b's are
# 13,368; the rest (equal issue, token latencies, the SingleStream defaults) is the same.
EDGE_SETS = {Benchmark.LLAMA31: EdgeSet(loadgen_model="llama3_1-8b-edge", size=5000)}
# The benchmarks mlperf.conf issues in equal-issue mode (``sample_concatenate_permutation``: GPT-J from v4.0,
# llama3.1-8b from v5.1): LoadGen pads Offline's query, and the query count of the other scenarios, to a multiple of
# the samples it loaded.
EQUAL_ISSUE = frozenset({Benchmark.GPTJ, Benchmark.LLAMA31})

# MLPerf's latency bounds for the Server scenario, as mlperf.conf sets them (tests/common/test_rounds.py checks them
# against each fetched round's mlperf.conf and against scripts/bench/settings.py's copy).
# llama3.1-8b has none: from v5.1 its Server limits time to first token (2 s) and per output token (100 ms).
SERVER_LATENCY_BOUND_NS = {Benchmark.BERT: 130_000_000, Benchmark.GPTJ: 20_000_000_000}
