"""BERT as the orchestration sees it: which data and weights a run uses, its backend, and its batch runner.

The backend (``code/bert/backends``) is chosen by the ``backend`` field and owns its options and engine; this
module gives it a ``BackendContext`` and asks, never naming a backend.

Fallback rule (the embedded default): a performance run without the real data set or checkpoint runs on
synthetic inputs and random weights of the real architecture, and says so loudly; an accuracy run refuses and
names the make step that fetches what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from code.bert.download_model import BERT_SUBDIR, MODEL_FILES
from code.bert.preprocess_data import default_squad_json
from code.bert.squad import (
    MANIFEST_FILE,
    MAX_SEQ_LENGTH,
    PAD_LOGIT,
    TOKENIZED_SUBDIR,
    load_postprocess_data,
    tokenized_dir,
)
from code.common.constants import DATASET_SIZE, Benchmark, TestMode
from code.common.paths import DATA_DIR, ENGINES_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR
from code.config.resolved import ResolvedConfig
from code.mlperf.benchmarks import (
    AccuracyReport,
    EngineReport,
    InputsDescription,
    InputsUnavailableError,
    PreparedTest,
    prepared_test,
)
from code.mlperf.devices import backend_on, resolve_cpu_threads, resolve_devices, torch_device
from code.mlperf.inputs import InputChoice, InputLocations, ModelNaming, model_provenance, synthetic_count
from code.mlperf.inputs import choose_inputs as choose_inputs_at

if TYPE_CHECKING:
    from code.bert.backends import BackendContext

# Where the make steps put things (each module that writes a file owns its name).
PREPROCESSED_DIR = PREPROCESSED_DATA_DIR / TOKENIZED_SUBDIR
CHECKPOINT = MODELS_DIR / BERT_SUBDIR / MODEL_FILES["pytorch"].name
FETCH_STEP = 'make download_data download_model preprocess_data BENCHMARKS="bert"'
# The model_name of the MLPerf model; any other is a small model for tests.
MLPERF_MODEL = "large"
NAMING = ModelNaming(prefix="BERT-", mlperf_model=MLPERF_MODEL, mlperf_label="BERT-large", oracle_gives="gold answers")


INPUTS = InputLocations(preprocessed_dir=PREPROCESSED_DIR, manifest_name=MANIFEST_FILE, checkpoint=CHECKPOINT,
                        fetch_step=FETCH_STEP, data_name="SQuAD v1.1", model_name="MLCommons BERT checkpoint")


def choose_inputs(config: ResolvedConfig, mode: TestMode) -> InputChoice:
    """The shared fallback rule (code/mlperf/inputs.py) with BERT's locations."""
    return choose_inputs_at(config, mode, INPUTS)


def backend_context(config: ResolvedConfig, choice: InputChoice, features: Any = None) -> BackendContext:
    """What the chosen backend draws on: the (first) device, the weights, where this config's engines live, the
    features. Resolving the devices first refuses an engine the device cannot run before it is built."""
    from code.bert.backends import BackendContext

    return BackendContext(device=torch_device(resolve_devices(config)[0]), cpu_threads=resolve_cpu_threads(config),
                          checkpoint=choice.checkpoint,
                          engines_dir=ENGINES_DIR / config.system / "bert" / config.scenario.value, features=features)


def describe_inputs(config: ResolvedConfig, mode: TestMode) -> InputsDescription:
    """What a run would use, without loading anything heavy; what it cannot run stops here."""
    from code.bert.backends import backend_class

    choice = choose_inputs(config, mode)
    context = backend_context(config, choice)
    engine = backend_class(config["backend"]).engine_dir(config, context)
    named = model_provenance(config, choice, NAMING)
    lengths = "all 384 tokens" if config["synthetic_lengths"] == "max" else "SQuAD-like lengths"
    return named.described(choice, f"{synthetic_count(config)} samples, {lengths}", context.device, engine)


def generate_engine(config: ResolvedConfig) -> EngineReport:
    """Build the engine a performance run of this config loads (accuracy runs use the same engine)."""
    from code.bert.backends import backend_class

    context = backend_context(config, choose_inputs(config, TestMode.PerformanceOnly))
    return backend_class(config["backend"]).generate_engine(config, context)


def load_features(config: ResolvedConfig, choice: InputChoice):  # noqa: ANN201 - BertFeatures
    from code.bert.dataset import BertFeatures

    if choice.data_dir is None:
        return BertFeatures.synthetic(synthetic_count(config), seed=config["seed"],
                                      full_length=config["synthetic_lengths"] == "max")
    return BertFeatures.load(choice.data_dir)


class BertRunner:
    """The C++ core's batch runner: gather a batch, run the backend, return one [384, 2] float32 row per sample."""

    def __init__(self, features: Any, backend: Any) -> None:
        self.features = features
        self.backend = backend

    def run_batch(self, sample_indices: np.ndarray) -> list[np.ndarray]:
        input_ids, segment_ids, input_mask = self.features.gather(sample_indices)
        logits = self.backend.run_batch(sample_indices, input_ids, segment_ids, input_mask)
        batch, length = logits.shape[0], logits.shape[1]
        if length == MAX_SEQ_LENGTH and logits.dtype == np.float32:
            return logits  # one [B, 384, 2] array: the core slices it per sample
        padded = np.full((batch, MAX_SEQ_LENGTH, 2), PAD_LOGIT, dtype=np.float32)
        padded[:, :length] = logits
        return padded


def prepare_test(config: ResolvedConfig, mode: TestMode) -> PreparedTest:
    """Load data, backend and scorer for one LoadGen test of BERT."""
    from code.bert.backends import backend_class

    choice = choose_inputs(config, mode)
    features = first_samples(load_features(config, choice), config["num_samples"])
    provenance = describe_inputs(config, mode)
    subset = config["num_samples"] is not None and len(features) < DATASET_SIZE[Benchmark.BERT]
    context = backend_context(config, choice, features)
    chosen = backend_class(config["backend"])
    # The eval file scores the run: read it now, so a damaged one stops the test before LoadGen, not after it.
    eval_data = (load_postprocess_data(tokenized_dir(choice.data_dir))
                 if mode is TestMode.AccuracyOnly and choice.data_dir is not None else None)

    def runner_on(device: str, name: str) -> BertRunner:
        return BertRunner(features, backend_on(device, config, chosen, context, name))

    def evaluate(log_dir: Path) -> AccuracyReport:
        from code.bert.accuracy import evaluate_accuracy_log

        if choice.data_dir is None:
            raise InputsUnavailableError(f"accuracy needs the real data set; run {FETCH_STEP}")
        squad_json = _squad_json_for(choice.data_dir)
        result = evaluate_accuracy_log(log_dir / "mlperf_log_accuracy.json", choice.data_dir, squad_json,
                                       config.workload.accuracy_target.value, log_dir / "accuracy.txt",
                                       scored_questions_only=subset, data=eval_data)
        failures = [] if result.passed else [f"F1 {result.f1:.3f} below target {result.target_f1:.3f}"]
        return AccuracyReport(metric="f1", value=result.f1, unit="%", passed=result.passed, failures=failures,
                              summary=f"exact_match = {result.exact_match:.3f}, f1 = {result.f1:.3f} "
                                      f"(target {result.target_f1:.3f})",
                              figures={"exact_match": result.exact_match, "f1": result.f1,
                                       "target_f1": result.target_f1})

    return prepared_test(features.lengths, runner_on, evaluate, provenance, input_lengths=features.describe_lengths(),
                         devices=resolve_devices(config), cpu_threads=context.cpu_threads,
                         num_samples=config["num_samples"])


def first_samples(features: Any, count: int | None) -> Any:
    """The first ``count`` features (all of them when None or more than there are): ``--num_samples``."""
    if count is None or count >= len(features):
        return features
    import dataclasses

    gold = features.gold_positions
    return dataclasses.replace(features, input_ids=features.input_ids[:count],
                               segment_ids=features.segment_ids[:count], input_mask=features.input_mask[:count],
                               lengths=features.lengths[:count], gold_positions=None if gold is None else gold[:count])


def _squad_json_for(data_dir: Path) -> Path:
    """The SQuAD file a preprocessed set was made from: recorded in its manifest, else the default location."""
    import json

    manifest = json.loads((data_dir / MANIFEST_FILE).read_text())
    recorded = manifest.get("source_file") or manifest.get("squad_json")
    if recorded and Path(recorded).exists():
        return Path(recorded)
    if default_squad_json(DATA_DIR).exists():
        return default_squad_json(DATA_DIR)
    raise InputsUnavailableError(f"the SQuAD file behind {data_dir} is missing; run {FETCH_STEP}")
