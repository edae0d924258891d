"""Download Llama-3.1-8B-Instruct, the reference's checkpoint (`make download_model BENCHMARKS=llama31`).

    HF_TOKEN=hf_... python -m code.llama31.download_model [--model_dir build/models]

The checkpoint is gated: Meta's license must be accepted on Hugging Face (or, for MLCommons members, access requested
at llama3-1.mlcommons.org, whose download is by its own tool). The reference's "External Download"
(mlcommons/inference v5.1 ``language/llama3.1-8b/README.md``) clones ``meta-llama/Llama-3.1-8B-Instruct`` at commit
``be673f326cab4cd22ccfef76109faf68e41aa5f1``; we fetch the same revision's HF-format files (config, generation
config, tokenizer, safetensors shards and their index, not Meta's ``original/`` consolidated copy) with
``huggingface_hub.snapshot_download`` into ``<model_dir>/Llama3.1-8B/Llama-3.1-8B-Instruct/``, and check that every
shard the index names is there. A complete folder is not fetched again; one copied from elsewhere is used as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from code.common.download import download_command, download_parser
from code.common.faults import CheckpointError
from code.common.paths import MODELS_DIR
from code.llama31.tokenizer import CHECKPOINT_SUBDIR, MODEL_SUBDIR, TOKENIZER_FILES
from code.llm.checkpoint import checkpoint_files

REPO_ID = "meta-llama/Llama-3.1-8B-Instruct"
REVISION = "be673f326cab4cd22ccfef76109faf68e41aa5f1"
FILES = ("*.json", "*.safetensors")  # config, generation config, tokenizer, shards and their index
REQUIRED = ("config.json", "generation_config.json", *TOKENIZER_FILES)


def checkpoint_dir(model_dir: Path = MODELS_DIR) -> Path:
    return Path(model_dir) / MODEL_SUBDIR / CHECKPOINT_SUBDIR


def check_checkpoint(folder: Path) -> list[Path]:
    """The checkpoint's files, or ``CheckpointError`` naming what is missing."""
    if missing := [name for name in REQUIRED if not (folder / name).is_file()]:
        raise CheckpointError(f"{folder}: no {', '.join(missing)}")
    return [folder / name for name in REQUIRED] + checkpoint_files(folder)


def download_llama_model(model_dir: Path = MODELS_DIR, token: str | None = None) -> list[Path]:
    """Fetch the checkpoint unless a complete one is in place; returns its files."""
    folder = checkpoint_dir(model_dir)
    try:
        return check_checkpoint(folder)
    except CheckpointError:
        pass
    token = token or os.environ.get("HF_TOKEN")
    if not token:
        raise CheckpointError(f"{REPO_ID} is gated: accept Meta's license on huggingface.co/{REPO_ID} and set "
                              f"HF_TOKEN to a token of that account, or copy the checkpoint into {folder}")
    from huggingface_hub import snapshot_download

    snapshot_download(REPO_ID, revision=REVISION, local_dir=folder, allow_patterns=list(FILES), token=token)
    return check_checkpoint(folder)


def main(argv: list[str] | None = None) -> int:
    parser = download_parser("code.llama31.download_model", __doc__.splitlines()[0], "model_dir")
    args = parser.parse_args(argv)
    return download_command(lambda: download_llama_model(args.model_dir), (CheckpointError,))


if __name__ == "__main__":
    sys.exit(main())
