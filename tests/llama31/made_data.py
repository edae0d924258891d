"""Made llama3.1-8b inputs: a tiny tokenizer of Llama 3.1's kind and a data file in the reference's format.

The real tokenizer comes only with the gated checkpoint, so tests build one of the same kind: byte-level BPE
(trained here on made-up English words), ``<|begin_of_text|>`` put first by the post-processor, and Llama 3.1's
special tokens at their real ids (128000, 128001, 128008, 128009), saved as ``tokenizer.json`` +
``tokenizer_config.json`` like a checkpoint folder's. The data file holds what the reference's
``download_cnndm.py`` writes, ``tok_input`` made by ``tokenizer.encode`` of the reference's prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

from code.llama31.dataset import PROMPT_TEMPLATE
from tests.made_up_cnn_dailymail import made_up_records

SPECIAL_TOKENS = {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|eom_id|>": 128008, "<|eot_id|>": 128009}


def write_tiny_tokenizer(folder: Path, clean_up: bool = True) -> Path:
    """A checkpoint-like folder holding the tiny tokenizer; ``clean_up``: its config's
    ``clean_up_tokenization_spaces`` (Llama 3.1's is true)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    text = [record["input"] + " " + record["output"] for record in made_up_records(40, seed=7)]
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.train_from_iterator(text, trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(trained.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=dict(model["vocab"]) | SPECIAL_TOKENS, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in SPECIAL_TOKENS])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 128000)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) | {"clean_up_tokenization_spaces": clean_up}
    config_path.write_text(json.dumps(config, indent=2))
    return folder


def reference_records(tokenizer_dir: Path, count: int, seed: int = 0, article_words: int = 60) -> list[dict]:
    """``count`` records as the reference's ``download_cnndm.py`` writes them, articles cut to ``article_words``
    words so that prompts stay short for a CPU."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    records = []
    for made in made_up_records(count, seed):
        record = {"instruction": {"llama": PROMPT_TEMPLATE}, "input": " ".join(made["input"].split()[:article_words])}
        record["tok_input"] = tokenizer.encode(PROMPT_TEMPLATE.format_map(record))
        record["output"] = made["output"]
        records.append(record)
    return records


def write_reference_file(path: Path, records: list[dict]) -> Path:
    """The records as the reference writes them (``indent=4``, UTF-8 as is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=4, ensure_ascii=False), encoding="utf-8")
    return path


def write_tiny_llama(build: Path, samples: int) -> tuple[Path, Path]:
    """A tiny checkpoint (random weights of the ``tiny`` architecture in HF's layout, the tiny tokenizer) under
    ``build/models/`` and a preprocessed made set of ``samples`` prompts under ``build/preprocessed/``: what a CPU
    run of llama3.1-8b reads in seconds. Returns (checkpoint folder, preprocessed folder)."""
    from safetensors.torch import save_file

    from code.llama31.architecture import LLAMA_CONFIGS
    from code.llama31.model import hf_config, hf_state, random_weights
    from code.llama31.preprocess_data import preprocess

    checkpoint = write_tiny_tokenizer(build / "models" / "Llama3.1-8B" / "Llama-3.1-8B-Instruct")
    model = random_weights(LLAMA_CONFIGS["tiny"], seed=5)
    save_file({name: t.contiguous() for name, t in hf_state(model).items()}, checkpoint / "model.safetensors")
    (checkpoint / "config.json").write_text(json.dumps(hf_config(LLAMA_CONFIGS["tiny"]).to_dict()))
    source = write_reference_file(build / "data" / "cnn_eval.json", reference_records(checkpoint, samples))
    preprocessed = build / "preprocessed" / "datacenter"
    preprocess(source, preprocessed, "datacenter", expected_count=None)
    return checkpoint, preprocessed
