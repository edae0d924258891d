"""The measurements model-info JSON (``<system>_<impl>_<Scenario>.json``), from what a run's metadata.json knows.

The checker requires five fields, each non-empty (``SYSTEM_IMP_REQUIRED_FILES``): input_data_types, retraining,
starting_weights_filename, weight_data_types, weight_transformations. Everything here is read from the run, never
assumed: random weights or the oracle backend are named as such, so a staged pipeline test cannot pass for a
real result.
"""

from __future__ import annotations

from pathlib import Path

from code.common.constants import Benchmark
from code.config.backends import runs_model
from code.mlperf.run_record import RunRecord

# Every input this harness feeds a model is token ids (BERT: input_ids, segment_ids, input_mask; GPT-J: prompts).
INPUT_DATA_TYPES = "int32"
# The checkpoints are the MLCommons reference ones, stored in fp32.
CHECKPOINT_DTYPE = "fp32"
# How the checkpoint's weights became a run's, by precision (any other: a cast).
TRANSFORMATIONS = {
    CHECKPOINT_DTYPE: "none",
    "fp8": "FP8 (e4m3) quantization of the matrix-product weights with calibrated per-tensor scales; other weights "
           "cast to fp16",
    "int8": "INT8 quantization of the matrix-product weights, symmetric with per-output-channel scales "
            "(max |row| / 127); other weights cast to fp16",
}


def implementation(record: RunRecord) -> str:
    """The implementation name in file names and ``code/<bench>/<impl>``: the backend that ran the model."""
    return str(record.fields["backend"])


def ran_no_model(record: RunRecord) -> bool:
    """Whether the test's backend runs no model (the oracle: gold answers), as its declaration says."""
    benchmark, _ = Benchmark.parse(str(record.benchmark))
    return not runs_model(benchmark, str(record.fields["backend"]))


def weight_data_types(record: RunRecord) -> str:
    """The precision of the weights; fp8 and int8 runs keep 16-bit weights outside the 8-bit products."""
    if ran_no_model(record):
        return "none (oracle backend: no model)"
    precision = str(record.fields["precision"])
    return f"{precision}, fp16" if precision in ("fp8", "int8") else precision


def starting_weights(record: RunRecord) -> str:
    """The checkpoint's file name; random weights and the oracle say so instead."""
    if ran_no_model(record):
        return "none (oracle backend: gold answers, a pipeline test)"
    weights = record.provenance.get("weights")
    if not weights or str(weights).startswith("random"):
        return str(weights or "unknown")
    return Path(str(weights)).name


def weight_transformations(record: RunRecord) -> str:
    if ran_no_model(record):
        return "none (no model)"
    precision = str(record.fields["precision"])
    return TRANSFORMATIONS.get(precision, f"cast from {CHECKPOINT_DTYPE} to {precision}")


def model_info(record: RunRecord) -> dict[str, str]:
    return {"input_data_types": INPUT_DATA_TYPES, "retraining": "no",
            "starting_weights_filename": starting_weights(record), "weight_data_types": weight_data_types(record),
            "weight_transformations": weight_transformations(record)}
