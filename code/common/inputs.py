"""Which data set and weights a run uses: the fallback rule every benchmark shares.

The embedded default: a performance run without the real data set or checkpoint runs on synthetic inputs and
random weights of the configured architecture, and says so loudly; an accuracy run refuses and names the make
step that fetches what is missing. Each benchmark passes where its make steps put things.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common.backends import runs_model
from code.common.benchmark_errors import InputsUnavailableError
from code.common.config import ResolvedConfig
from code.common.constants import DATASET_SIZE, TestMode
from code.common.fields import FieldError

# Fields that only shape synthetic inputs: given for a run on the real data set, they would be recorded but not used.
SYNTHETIC_FIELDS = ("synthetic_sample_count", "synthetic_lengths", "synthetic_length_scale")  # output lengths: gptj


@dataclass(frozen=True)
class InputLocations:
    """Where a benchmark's make steps put its inputs, and how to describe them in errors."""

    preprocessed_dir: Path  # what preprocess_data writes
    manifest_name: str  # the file that marks a complete preprocessed set
    checkpoint: Path  # what download_model writes (a file or a folder)
    fetch_step: str  # the make command that produces all of them
    data_name: str  # "SQuAD v1.1", "CNN/DailyMail"
    model_name: str  # "MLCommons BERT checkpoint", ...


@dataclass(frozen=True)
class InputChoice:
    """Which data set and weights a run uses, and whether its result may count as an MLPerf result."""

    data_dir: Path | None  # None: synthetic inputs
    checkpoint: str  # a path, "random", or "none (...)" for backends that run no model

    @property
    def synthetic(self) -> bool:
        return self.data_dir is None

    @property
    def random_weights(self) -> bool:
        return self.checkpoint == "random"


def choose_inputs(config: ResolvedConfig, mode: TestMode, where: InputLocations) -> InputChoice:
    """Apply the fallback rule to the ``input_data`` and ``weights`` fields."""
    accuracy = mode is not TestMode.PerformanceOnly
    uses_weights = runs_model(config.benchmark, config["backend"])

    data_field = config["input_data"]
    if data_field == "synthetic":
        data_dir = None
    elif data_field == "auto":
        data_dir = where.preprocessed_dir if (where.preprocessed_dir / where.manifest_name).exists() else None
    else:
        data_dir = Path(data_field)
        if not (data_dir / where.manifest_name).exists():
            raise InputsUnavailableError(f"--input_data={data_field} holds no preprocessed {where.data_name} set "
                                         f"({where.manifest_name}); run {where.fetch_step}")
    if accuracy and data_dir is None:
        present = (where.preprocessed_dir / where.manifest_name).exists()
        if data_field == "synthetic":  # asked for: say so, and say where the real set is when it is there
            fix = (f"leave --input_data out to use the set in {where.preprocessed_dir}" if present else
                   f"run {where.fetch_step}, then leave --input_data out")
            raise InputsUnavailableError(f"an accuracy run needs the real {where.data_name} data set, and "
                                         f"--input_data=synthetic gives made-up inputs with no answers; {fix}")
        raise InputsUnavailableError(f"an accuracy run needs the real {where.data_name} data set, which is not in "
                                     f"{where.preprocessed_dir}; run {where.fetch_step}")
    if data_dir is not None:
        ignored = [name for name in SYNTHETIC_FIELDS if config.sources.get(name) == "RUN_ARGS"]
        if ignored:
            raise FieldError(f"--{ignored[0]} shapes synthetic inputs, and this run uses the {where.data_name} set in "
                             f"{data_dir}; add --input_data=synthetic, or leave --{ignored[0]} out")

    weights_field = config["weights"]
    if weights_field == "random":
        checkpoint = "random"
    elif weights_field == "auto":
        checkpoint = str(where.checkpoint) if where.checkpoint.exists() else "random"
        if accuracy and uses_weights and checkpoint == "random":
            raise InputsUnavailableError(f"an accuracy run needs the {where.model_name}, which is not at "
                                         f"{where.checkpoint}; run {where.fetch_step}")
    else:
        if not Path(weights_field).exists():
            raise InputsUnavailableError(f"--weights={weights_field} does not exist; run {where.fetch_step} or "
                                         "pass --weights=random")
        checkpoint = weights_field
    return InputChoice(data_dir, checkpoint if uses_weights else f"none ({config['backend']} backend)")


@dataclass(frozen=True)
class ModelNaming:
    """How a benchmark names its models in provenance, so every benchmark words the same facts alike."""

    prefix: str  # what precedes a model_name in a label: "BERT-", "GPT-J "
    mlperf_model: str  # the model_name of the MLPerf model: "large", "6b"
    mlperf_label: str  # its label: "BERT-large", "GPT-J 6B"
    oracle_gives: str  # what the oracle backend answers with: "gold answers", "reference summaries"


@dataclass(frozen=True)
class ModelProvenance:
    """The model, weights and reasons a result cannot count that every benchmark's ``describe_inputs`` reports."""

    model: str
    weights: str
    invalid_because: list[str]


def model_provenance(config: ResolvedConfig, choice: InputChoice, naming: ModelNaming) -> ModelProvenance:
    """Which model and weights a run uses, and why its figure is not an MLPerf result where it is not: synthetic
    inputs, the oracle backend, a small test model, random weights (in that order). A benchmark appends its own
    reasons after these."""
    label = f"{naming.prefix}{config['model_name']}"
    small = config["model_name"] != naming.mlperf_model
    model = f"{label} (a small test model, not {naming.mlperf_label})" if small else label
    invalid_because = []
    if choice.synthetic:
        invalid_because.append("synthetic inputs")
    if not runs_model(config.benchmark, config["backend"]):
        model = f"none ({config['backend']} backend)"
        invalid_because.append(f"{config['backend']} backend ({naming.oracle_gives}: checks the pipeline, not a model)")
    else:
        if small:
            invalid_because.append(f"small test model {label}, not {naming.mlperf_label}")
        if choice.random_weights:
            invalid_because.append(f"random weights ({label} architecture)")
    weights = f"random ({label} architecture)" if choice.random_weights else choice.checkpoint
    return ModelProvenance(model, weights, invalid_because)


def checkpoint_identity(path: Path) -> list[dict[str, Any]]:
    """Name, size and mtime of every file of a checkpoint (a folder of shards, or one file): what an engine built
    from it and an accuracy run's verdict on it hold for.

    Hashing GPT-J's 24 GB on every run is not affordable; a rewritten or replaced shard changes its size or mtime.
    """
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [{"file": str(p.relative_to(path)) if path.is_dir() else p.name, "size": p.stat().st_size,
             "mtime_ns": p.stat().st_mtime_ns} for p in files]


def synthetic_count(config: ResolvedConfig) -> int:
    """Samples in a synthetic set: the field, else the real set's size."""
    return config["synthetic_sample_count"] or DATASET_SIZE[config.benchmark]
