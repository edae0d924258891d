"""Llama-3.1-8B-Instruct's tokenizer, loaded from the checkpoint folder as the reference loads it.

The reference's accuracy script (``evaluation.py``) calls ``AutoTokenizer.from_pretrained(model_name,
model_max_length=2048, padding_side="left", use_fast=False)`` and ``batch_decode(ids, skip_special_tokens=True)``;
Llama 3 ships no slow tokenizer, so that is the fast one of the checkpoint's ``tokenizer.json``. transformers 4.46.2
(the reference's pin) then applied ``clean_up_tokenization`` to the text when ``tokenizer_config.json`` says
``clean_up_tokenization_spaces: true`` (Llama 3.1's does); transformers 5.x skips it for BPE, so ``decoder``
applies it itself (``code/llm/detokenize.py``): gen_len counts those characters. The tokenizer
cannot be fetched on its own (the checkpoint is gated): it comes with the checkpoint (``download_model.py``). Prompts
need no tokenizer: the data set holds their ids (``dataset.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from code.common.benchmark_errors import InputsUnavailableError
from code.common.paths import MODELS_DIR
from code.llm.detokenize import clean_up_tokenization

MODEL_SUBDIR = "Llama3.1-8B"
CHECKPOINT_SUBDIR = "Llama-3.1-8B-Instruct"
CHECKPOINT = MODELS_DIR / MODEL_SUBDIR / CHECKPOINT_SUBDIR
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@lru_cache(maxsize=4)
def load_tokenizer(checkpoint: Path = CHECKPOINT) -> Any:  # transformers.PreTrainedTokenizerFast
    """The tokenizer of the checkpoint folder (cached per folder); refused with the fix when its files are absent."""
    checkpoint = Path(checkpoint)
    if missing := [name for name in TOKENIZER_FILES if not (checkpoint / name).is_file()]:
        raise InputsUnavailableError(f"the Llama 3.1 tokenizer is not in {checkpoint} (no {', '.join(missing)}); run "
                                     "`make download_model BENCHMARKS=llama31`")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint), model_max_length=2048, padding_side="left")


def decoder(tokenizer: Any) -> Callable[[list[int]], str]:
    """The reference's decode of generated ids: special tokens (the final ``<|eot_id|>``) skipped, then
    transformers 4.46's clean-up when the checkpoint's tokenizer config asks for it."""
    config = Path(tokenizer.name_or_path) / "tokenizer_config.json"
    clean_up = bool(json.loads(config.read_text()).get("clean_up_tokenization_spaces", False))

    def decode(ids: list[int]) -> str:
        text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return clean_up_tokenization(text) if clean_up else text

    return decode
