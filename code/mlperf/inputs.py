"""Which data set and weights a run uses: the fallback rule every benchmark shares.

A performance run without the real data set or checkpoint runs on synthetic inputs and random weights of the
configured architecture, and says so loudly; an accuracy run refuses and names the make step that fetches what is
missing. A set or checkpoint that is there but unusable (no manifest, another benchmark's set, a scratch link that
leads nowhere) is named with its fix, never passed over in silence.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code.common.benchmark_errors import InputsUnavailableError
from code.common.constants import TestMode
from code.common.log import get_logger
from code.config.backends import runs_model
from code.config.fields import FieldError
from code.config.resolve import dataset_size
from code.config.resolved import ResolvedConfig
from code.mlperf.benchmarks import InputsDescription

log = get_logger("inputs")
_said: set[str] = set()  # the fallbacks this process has warned of

# Fields that only shape synthetic inputs: given for a run on the real data set, they would be recorded but not used.
SYNTHETIC_FIELDS = ("synthetic_sample_count", "synthetic_lengths", "synthetic_length_scale")  # output lengths: gptj


@dataclass(frozen=True)
class InputLocations:
    """Where a benchmark's make steps put its inputs, and how errors name them."""

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
    fallbacks: tuple[str, ...] = ()  # why a real set or checkpoint that is there is not used, with the fix

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

    fallbacks = []
    data_field = config["input_data"]
    if data_field == "synthetic":
        data_dir = None
    elif data_field == "auto":
        problem = set_problem(where.preprocessed_dir, where)
        data_dir = where.preprocessed_dir if problem is None else None
        if problem and (where.preprocessed_dir.exists() or unreachable_because(where.preprocessed_dir)):
            # A folder that is there but unusable, or a link that leads nowhere: never synthetic without a word.
            if accuracy:
                raise InputsUnavailableError(f"an accuracy run needs the real {where.data_name} data set: {problem}")
            fallbacks.append(f"synthetic inputs, not the {where.data_name} set: {problem}")
    else:
        data_dir = Path(data_field)
        problem = set_problem(data_dir, where)
        if problem:
            raise InputsUnavailableError(f"--input_data={data_field}: {problem}")
    if accuracy and data_dir is None:
        present = set_problem(where.preprocessed_dir, where) is None
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
        unreachable = unreachable_because(where.checkpoint)
        if accuracy and uses_weights and checkpoint == "random":
            raise InputsUnavailableError(f"an accuracy run needs the {where.model_name}, which is not at "
                                         f"{where.checkpoint}; {unreachable or f'run {where.fetch_step}'}")
        if uses_weights and unreachable:
            fallbacks.append(f"random weights, not the {where.model_name}: {unreachable}")
    else:
        if not Path(weights_field).exists():
            raise InputsUnavailableError(f"--weights={weights_field} does not exist; run {where.fetch_step} or "
                                         "pass --weights=random")
        checkpoint = weights_field
    return InputChoice(data_dir, checkpoint if uses_weights else f"none ({config['backend']} backend)",
                       tuple(fallbacks))


def unreachable_because(path: Path) -> str | None:
    """Why ``path`` cannot be reached, with the fix: the first link on it, from the root down, that leads nowhere (a
    scratch folder of ``make link_dirs`` moved, renamed or not mounted); None when none does."""
    for link in [*reversed(path.parents), path]:
        if link.is_symlink() and not link.exists():
            return (f"{link} links to {os.readlink(link)}, which does not exist (the scratch folder was moved, "
                    "renamed or is not mounted): mount or restore it, or point the links at another with "
                    "MLPERF_SCRATCH_PATH=<folder> make link_dirs")
    return None


def set_problem(directory: Path, where: InputLocations) -> str | None:
    """Why ``directory`` is not a preprocessed set of this benchmark, with the fix; None when it is one. Its manifest
    marks a finished set (written last) and names the data set, so another benchmark's set is told apart here."""
    unreachable = unreachable_because(directory)
    if unreachable:
        return unreachable
    if not directory.is_dir():
        return f"{directory} is not a folder; run {where.fetch_step}"
    manifest = directory / where.manifest_name
    try:
        stored = json.loads(manifest.read_text())
        dataset = str(stored.get("dataset", "")) if isinstance(stored, dict) else ""
    except FileNotFoundError:
        return (f"{directory} holds no {where.manifest_name}, which a finished preprocessing writes last (it was "
                f"stopped, or the file was moved); run {where.fetch_step}")
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return f"{manifest} cannot be read ({why}); run {where.fetch_step} again"
    if dataset and not dataset.startswith(where.data_name):
        return (f"{directory} holds a preprocessed {dataset} set (its {where.manifest_name}), not "
                f"{where.data_name}; give a {where.data_name} set (the one {where.fetch_step} writes to "
                f"{where.preprocessed_dir}), or leave --input_data out")
    return None


@dataclass(frozen=True)
class ModelNaming:
    """How a benchmark names its models in provenance, so every benchmark words the same facts alike."""

    prefix: str  # what precedes a model_name in a label: "BERT-", "GPT-J "
    mlperf_model: str  # the model_name of the MLPerf model: "large", "6b"
    mlperf_label: str  # its label: "BERT-large", "GPT-J 6B"
    oracle_gives: str  # what the oracle backend answers with: "gold answers", "reference summaries"


@dataclass(frozen=True)
class ModelProvenance:
    """The model, weights and reasons a result cannot count, as every ``describe_inputs`` reports them."""

    model: str
    weights: str
    invalid_because: list[str]

    def described(self, choice: InputChoice, synthetic: str, device: str, engine: Path | None,
                  **extra: Any) -> InputsDescription:
        """``describe_inputs``' description, in the order ``make info`` prints it: ``synthetic`` says what a synthetic
        set is made of, ``extra`` the benchmark's own entries, ``engine`` the engine folder the run loads."""
        described: InputsDescription = {
            "model": self.model,
            "inputs": str(choice.data_dir) if choice.data_dir else f"synthetic ({synthetic})",
            "weights": self.weights,
            **extra,  # type: ignore[typeddict-item]
            "device": device,
            "invalid_because": self.invalid_because,
            "checkpoint": choice.checkpoint,
            "synthetic_inputs": choice.synthetic,
        }
        if engine is not None:
            described["engine"] = str(engine)
        return described


def model_provenance(config: ResolvedConfig, choice: InputChoice, naming: ModelNaming) -> ModelProvenance:
    """Which model and weights a run uses, and why its figure is not an MLPerf result where it is not (a benchmark
    appends its own reasons). A fallback is warned of once per process, which describes its inputs several times."""
    for line in choice.fallbacks:
        if line not in _said:
            _said.add(line)
            log.warning("%s", line)
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
    from it and an accuracy verdict on it hold for. Hashing GPT-J's 24 GB on every run is not affordable; a
    rewritten or replaced shard changes its size or mtime."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [{"file": str(p.relative_to(path)) if path.is_dir() else p.name, "size": p.stat().st_size,
             "mtime_ns": p.stat().st_mtime_ns} for p in files]


def synthetic_count(config: ResolvedConfig) -> int:
    """The synthetic prompts that stand in for the set the run uses (an edge set's 5,000 on an edge run), unless the
    config names a count."""
    return config["synthetic_sample_count"] or dataset_size(config)
