"""Download the MLCommons BERT-Large SQuAD v1.1 checkpoint and write its ``bert_config.json``.

Run ``python -m code.bert.download_model [--model_dir build/models] [--formats pytorch,onnx]``; files land in
``<model_dir>/bert/``. The PyTorch checkpoint is what our engine is built from, so it is the default; the ONNX file is
the same weights for tools that read ONNX. The config is written from constants here rather than downloaded because
no MLCommons zenodo record ships one next to ``model.pytorch``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from code.common.download import RemoteFile, download_command, download_parser, fetch
from code.common.paths import MODELS_DIR

# Where each file comes from, and how to recognise it. URLs are those of the MLCommons reference
# (mlcommons/inference language/bert/Makefile and README model table, fp32, F1 90.874); the md5 values are the
# MLC_DOWNLOAD_CHECKSUM entries of mlcommons/mlperf-automations script/get-ml-model-bert-large-squad/meta.yaml
# (variations pytorch,fp32 and onnx,fp32) and script/get-dataset-squad-vocab/meta.yaml (vocab.txt). Zenodo publishes
# md5 only, so there is no sha256. The checkpoint sizes are not published next to those checksums, so they are not
# pinned (the md5 decides); vocab.txt is the standard uncased BERT vocabulary, 231508 bytes (mlcommons/training
# language_model BERT README file table, same md5). Licences: see each zenodo record page.
MODEL_FILES: dict[str, RemoteFile] = {
    "pytorch": RemoteFile(
        name="model.pytorch",
        url="https://zenodo.org/record/3733896/files/model.pytorch?download=1",
        md5="00fbcbfaebfa20d87ac9885120a6e9b4",
    ),
    "onnx": RemoteFile(
        name="model.onnx",
        url="https://zenodo.org/record/3733910/files/model.onnx?download=1",
        md5="819b25b19cd8e59080c10892689750ca",
    ),
}
VOCAB_FILE = RemoteFile(
    name="vocab.txt",
    url="https://zenodo.org/record/3733868/files/vocab.txt?download=1",
    md5="64800d5d8528ce344256daf115d4965e",
    size=231508,
)
DEFAULT_FORMATS: tuple[str, ...] = ("pytorch",)

# BERT-Large, uncased, as trained for the MLCommons reference: the keys of mlcommons/inference
# language/bert/bert_config.json plus layer_norm_eps, which that file leaves at the library default.
BERT_LARGE_CONFIG: dict[str, object] = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}

BERT_SUBDIR = "bert"
CONFIG_NAME = "bert_config.json"
RETRY_HINT = "delete it and re-run `make download_model BENCHMARKS=bert`"


def parse_formats(text: str) -> tuple[str, ...]:
    """Split ``"pytorch,onnx"`` into known formats, or raise ``ValueError`` naming the valid ones."""
    formats = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in formats if f not in MODEL_FILES]
    if unknown or not formats:
        raise ValueError(
            f"unknown format(s) {', '.join(unknown) or repr(text)}; valid formats: {', '.join(MODEL_FILES)}"
        )
    return formats


def write_bert_config(directory: Path) -> Path:
    """Write ``bert_config.json`` atomically so a reader never sees half a file."""
    path = Path(directory) / CONFIG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(BERT_LARGE_CONFIG, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def download_bert_model(model_dir: Path = MODELS_DIR, formats: tuple[str, ...] = DEFAULT_FORMATS) -> list[Path]:
    """Fetch the checkpoint(s) of ``formats`` and ``vocab.txt`` into ``<model_dir>/bert/``, then write the config."""
    for f in formats:
        if f not in MODEL_FILES:
            raise ValueError(f"unknown format {f!r}; valid formats: {', '.join(MODEL_FILES)}")
    target = Path(model_dir) / BERT_SUBDIR
    paths = [fetch(MODEL_FILES[f], target, hint=RETRY_HINT) for f in formats]
    paths.append(fetch(VOCAB_FILE, target, hint=RETRY_HINT))
    paths.append(write_bert_config(target))
    return paths


# What the command's --help says it does.
HELP = (
    "Download the MLCommons BERT-Large SQuAD v1.1 checkpoint (fp32, F1 90.874) and vocab.txt from zenodo "
    "into <model_dir>/bert/, verify each file's md5, and write bert_config.json. Interrupted downloads "
    "resume; files already present and valid are kept without touching the network."
)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code (0 on success)."""
    parser = download_parser("code.bert.download_model", HELP, "model_dir")
    parser.add_argument(
        "--formats",
        default=",".join(DEFAULT_FORMATS),
        help=(
            f"comma-separated checkpoint formats to fetch, from: {', '.join(MODEL_FILES)} "
            f"(default: {','.join(DEFAULT_FORMATS)}; pytorch is model.pytorch, zenodo 3733896, onnx is model.onnx, "
            "zenodo 3733910)"
        ),
    )
    args = parser.parse_args(argv)
    try:
        formats = parse_formats(args.formats)
    except ValueError as e:
        parser.error(str(e))  # exits with status 2 and the usage line
    return download_command(lambda: download_bert_model(args.model_dir, formats))


if __name__ == "__main__":
    sys.exit(main())
