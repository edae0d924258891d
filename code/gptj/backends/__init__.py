"""GPT-J backends: what turns a batch of prompts into generated token ids, looked up by name.

The benchmark depends on this module only: the protocols, the declarations and ``backend_class``. A backend builds
its own frozen options from the resolved config (``options_from``) and says which engine a config loads
(``engine_dir``, ``generate_engine``: the inflight backend's FP8 calibration); its declaration here tells the
configuration which precisions it runs, which switches it reads (the configuration's field table takes them from
here) and the rules they follow. Each backend module is imported when asked for, so the oracle runs without loading
a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from code.config.backends import BackendDeclaration, backend_registry
from code.config.field_spec import Field, Range
from code.llm.backend_rules import inflight_declaration, no_engine, pytorch_declaration
from code.mlperf.backend_class import BackendClass

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport


@dataclass(frozen=True)
class BackendContext:
    """What the benchmark prepared that a backend's options and engine draw on."""

    device: str  # "cpu" | "cuda" | "cuda:N": ``auto`` made concrete
    cpu_threads: int  # on a CPU device: torch's intra-op threads
    checkpoint: str  # a checkpoint folder/file, "random", or "none (...)"
    engines_dir: Path  # this config's engines (ENGINES_DIR/<system>/gptj/<scenario>); a backend's go under it
    max_prompt_length: int = 0  # the longest prompt of the run's samples; 0 where nothing runs (make info, engines)
    references_text: list[str] | None = None  # the reference summary of each sample, where the run has them
    tokenizer: Any = None  # GPT-J's tokenizer, where the run has references


class GptjBackend(Protocol):
    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        """One int32 prompt per sample in; the int32 generated token ids of each sample out (prompt excluded)."""
        ...


GptjBackendClass = BackendClass[BackendContext, GptjBackend]
"""What the benchmark asks of a backend class (``code.mlperf.backend_class.BackendClass``), with this benchmark's
context and batches."""


# The in-flight engine's switch beyond every LLM's (code/llm/backend_rules.py: inflight_declaration); the other
# backends' configs hold the engine's switches at their defaults (code/config/fields.py refuses another value for a
# backend that runs a model, and RUN_ARGS that give them to a run without the engine).
SYNTHETIC_OUTPUT_LENGTHS = Field(
    "synthetic_output_lengths", str, "model", "GPT-J inflight on synthetic inputs: model (outputs end where the model "
    "chooses EOS; random weights never do, so every output is 128 tokens) or forced (EOS forced at lengths drawn with "
    "mean ~70, what real weights produce; code/gptj/dataset.py)", choices=("model", "forced"))
ORACLE_SWITCHES = (
    Field("oracle_drop", int, 0, "oracle backend, a deliberately failing oracle: drop this many tokens from the end "
          "of every reference summary", range=Range(0, 1024), engine=True),
    Field("oracle_batch_ms", float, 0.0, "oracle backend: each batch takes at least this long, a throughput set by "
          "the batch size rather than by the machine's load, for pipeline checks that compare two runs' performance "
          "(a TEST01 audit with its reference run, a full-length pipeline run)", range=Range(0.0, 10_000.0)),
)


class WithoutEngine:
    """The engine side of a backend that loads no engine: its model is loaded or drawn when a run starts."""

    @staticmethod
    def engine_dir(config: ResolvedConfig, context: BackendContext) -> None:
        return None

    @staticmethod
    def generate_engine(config: ResolvedConfig, context: BackendContext) -> EngineReport:
        return no_engine(config, "GPT-J")


# What the configuration checks a GPT-J config against (code/config/fields.py); the order is the error's.
DECLARATIONS = (
    pytorch_declaration("code.gptj.backends.pytorch:PytorchGptjBackend"),
    inflight_declaration("code.gptj.backends.inflight:InflightGptjBackend", "GPT-J",
                         "GPT-J inflight: what the KV cache stores: auto (the model's 16-bit type) or fp8 (e4m3, "
                         "per-layer scales from calibration; GPU only)", more_switches=(SYNTHETIC_OUTPUT_LENGTHS,)),
    BackendDeclaration("oracle", "code.gptj.backends.oracle:OracleGptjBackend", precisions=None,
                       switches=ORACLE_SWITCHES),
)
# name -> "module:class", imported only when backend_class asks for it
BACKENDS = backend_registry("GPT-J backend", DECLARATIONS)


def backend_class(name: str) -> GptjBackendClass:
    """The backend class registered as ``name``, imported now; ValueError listing the names if unknown."""
    loaded: GptjBackendClass = BACKENDS.load(name)
    return loaded

