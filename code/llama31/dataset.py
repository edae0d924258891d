"""Llama 3.1 8B's data: the reference's ``cnn_eval.json`` (prompts already tokenized), its preprocessed arrays, and
synthetic prompts with the data set's lengths.

The reference (mlcommons/inference v5.1 ``language/llama3.1-8b/download_cnndm.py``) writes CNN/DailyMail 3.0.0
validation as a JSON list of records ``{"instruction": {"llama": PROMPT_TEMPLATE}, "input": <article>, "tok_input":
<token ids of the prompt>, "output": <highlights>}``, where ``tok_input`` is ``tokenizer.encode(PROMPT_TEMPLATE
.format_map(record))`` with Llama-3.1-8B-Instruct's tokenizer: ``<|begin_of_text|>`` then the prompt, no chat
template, no truncation. Its QSL (``dataset.py``) feeds ``tok_input`` to the model as it is and scores against
``output``, so we do the same: the ids are the data set, the tokenizer only decodes. Datacenter runs all 13,368
records (``cnn_eval.json``), edge the 5,000 of ``sample_cnn_eval_5000.json`` (``random.seed(42)`` sample, written
by the same script with ``--n-samples 5000``).

Preprocessing (``preprocess_data.py``) stores the ids as one flat int32 array and int64 offsets (prompts range
from tens to thousands of tokens, so a padded array would be mostly padding).

Synthetic prompts reproduce lengths, not text: ``<|begin_of_text|>``, the template's ~30 tokens around an article
of LogNormal(median 700, sigma 0.45) uniformly drawn ordinary tokens (ids below 128,000), in all clipped to [64,
8,000]. The median is GPT-J's synthetic 800 GPT-2 tokens (``code/gptj/dataset.py``) x 0.87, Llama 3's 128k
vocabulary needing ~13% fewer tokens for English text (Meta's "up to 15% fewer"): an estimate, to be checked with
``describe_lengths`` of the real set.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from code.common.faults import DataFileError, reading
from code.common.paths import DATA_DIR
from code.llm.cnn_dailymail import DATASET_SUBDIR, CnnDailyMailError, describe_lengths

PROMPT_TEMPLATE = ("Summarize the following news article in 128 tokens. Please output the summary only, without any "
                   "other text.\n\nArticle:\n{input}\n\nSummary:")
"""``instruction_template["llama"]`` of the reference's ``download_cnndm.py`` (v5.1)."""
RECORD_KEYS = ("input", "tok_input", "output")
BOS_TOKEN_ID = 128000  # <|begin_of_text|>, which tokenizer.encode puts first
FIRST_SPECIAL_ID = 128000  # ids from here on are special tokens: never drawn for synthetic text

SOURCE_SUBDIR = "mlcommons-r2-llama3.1-8b"
"""Folder under ``<data_dir>/cnn-daily-mail/`` holding MLCommons' files (GPT-J's download reads the same one)."""
EVAL_FILES = {"datacenter": "cnn_eval.json", "edge": "sample_cnn_eval_5000.json"}
SAMPLE_COUNTS = {"datacenter": 13368, "edge": 5000}
TOKENIZED_SUBDIR = "cnn_dailymail_tokenized_llama3.1-8b"
"""Folder under ``PREPROCESSED_DATA_DIR``; one folder per data set below it (``datacenter/``, ``edge/``)."""
TOKENS_FILE = "input_ids.npy"  # int32 [total tokens]: every prompt, one after another
OFFSETS_FILE = "offsets.npy"  # int64 [N + 1]: prompt i is tokens[offsets[i]:offsets[i+1]]
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1
FETCH_HINT = "run `make download_data preprocess_data BENCHMARKS=llama31`"

SYNTH_TEMPLATE_TOKENS = 31
SYNTH_ARTICLE_MEDIAN = 700.0
SYNTH_ARTICLE_SIGMA = 0.45
SYNTH_LENGTH_RANGE = (64, 8000)


def eval_file(data_set: str, data_dir: Path = DATA_DIR) -> Path:
    """Where ``make download_data BENCHMARKS=llama31`` puts the reference's file of ``data_set``."""
    if data_set not in EVAL_FILES:
        raise ValueError(f"unknown data set {data_set!r}; known: {', '.join(EVAL_FILES)}")
    return Path(data_dir) / DATASET_SUBDIR / SOURCE_SUBDIR / EVAL_FILES[data_set]


def check_records(records: object, source: Path | str, vocab_size: int = 128256) -> list[dict]:
    """``records`` if it is the reference's list of ``{input, tok_input, output}`` records with ids in the
    vocabulary, else a ``CnnDailyMailError`` naming the first bad record."""
    if not isinstance(records, list) or not records:
        raise CnnDailyMailError(f"{source}: expected a non-empty JSON list of records; {FETCH_HINT}")
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not all(key in record for key in RECORD_KEYS):
            keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
            raise CnnDailyMailError(f"{source}: record {index} lacks one of {', '.join(RECORD_KEYS)} (has {keys}): "
                                    f"not the llama3.1-8b reference's format; {FETCH_HINT}")
        ids = record["tok_input"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids):
            raise CnnDailyMailError(f"{source}: record {index}'s tok_input is not a list of token ids below "
                                    f"{vocab_size}; {FETCH_HINT}")
    return records


def load_records(path: Path) -> list[dict]:
    """Read and check a reference ``cnn_eval.json`` or ``sample_cnn_eval_5000.json``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; {FETCH_HINT}")
    with reading(path, f"delete it and {FETCH_HINT}"):
        records = json.loads(path.read_text(encoding="utf-8"))
    return check_records(records, path)


def load_targets(path: Path) -> list[str]:
    """The reference summaries (``output``) in QSL order, for ROUGE."""
    return [record["output"] for record in load_records(path)]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass
class LlamaSamples:
    """Prompt tokens of every QSL sample: ``tokens[offsets[i]:offsets[i+1]]`` is prompt i, handed out unpadded."""

    tokens: np.ndarray  # int32 [total], read-only
    offsets: np.ndarray  # int64 [N + 1], read-only
    is_synthetic: bool
    eval_json: Path | None = None  # the file whose `output`s are the ROUGE targets
    manifest: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets).astype(np.int32)

    @property
    def max_length(self) -> int:
        return int(self.lengths.max()) if len(self) else 0

    @classmethod
    def from_token_lists(cls, prompts: Sequence[Sequence[int]], **kwargs: object) -> LlamaSamples:
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        tokens = np.fromiter((t for p in prompts for t in p), dtype=np.int32, count=int(offsets[-1]))
        return cls(_read_only(tokens), _read_only(offsets), **kwargs)  # type: ignore[arg-type]

    @classmethod
    def load(cls, directory: Path) -> LlamaSamples:
        """A preprocessed folder (``preprocess_data.py``), checked."""
        directory = Path(directory)
        hint = f"preprocess it again: {FETCH_HINT}"
        missing = [n for n in (TOKENS_FILE, OFFSETS_FILE, MANIFEST_FILE) if not (directory / n).is_file()]
        if missing:
            raise DataFileError(f"llama3.1-8b preprocessed data in {directory} is missing or incomplete "
                                f"({', '.join(missing)}); {FETCH_HINT}")
        with reading(directory / MANIFEST_FILE, hint):
            manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
            raise DataFileError(f"{directory / MANIFEST_FILE} is not format {FORMAT_VERSION}; {hint}")
        with reading(directory / TOKENS_FILE, hint, also=(ValueError,)):
            tokens = np.load(directory / TOKENS_FILE)
        with reading(directory / OFFSETS_FILE, hint, also=(ValueError,)):
            offsets = np.load(directory / OFFSETS_FILE)
        count = int(manifest["count"])
        if (tokens.dtype != np.int32 or offsets.dtype != np.int64 or offsets.shape != (count + 1,)
                or offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 1)):
            raise DataFileError(f"{directory}: {TOKENS_FILE} and {OFFSETS_FILE} do not hold the manifest's {count} "
                                f"non-empty prompts; {hint}")
        eval_json = Path(manifest["eval_json"]) if manifest.get("eval_json") else None
        return cls(_read_only(tokens), _read_only(offsets), False, eval_json, manifest)

    @classmethod
    def synthetic(cls, count: int, seed: int = 0, length_scale: float = 1.0) -> LlamaSamples:
        """``count`` prompts with the data set's estimated lengths (module docstring), deterministic in ``seed``;
        ``length_scale`` (0 < s <= 1) shrinks every length for tiny CPU runs."""
        if count < 0 or not 0 < length_scale <= 1:
            raise ValueError(f"need count >= 0 and 0 < length_scale <= 1, got {count}, {length_scale}")
        rng = np.random.default_rng(seed)
        articles = rng.lognormal(np.log(SYNTH_ARTICLE_MEDIAN), SYNTH_ARTICLE_SIGMA, size=count)
        low, high = (max(2, round(n * length_scale)) for n in SYNTH_LENGTH_RANGE)
        lengths = np.clip(np.rint((SYNTH_TEMPLATE_TOKENS + articles) * length_scale), low, high).astype(np.int64)
        prompts = [[BOS_TOKEN_ID, *rng.integers(0, FIRST_SPECIAL_ID, size=n - 1).tolist()] for n in lengths]
        manifest = {"synthetic": True, "seed": seed, "length_scale": length_scale}
        return cls.from_token_lists(prompts, is_synthetic=True, manifest=manifest)

    def first(self, count: int) -> LlamaSamples:
        """The first ``count`` prompts (all of them when there are fewer): ``--num_samples``."""
        if count >= len(self):
            return self
        end = int(self.offsets[count])
        return LlamaSamples(self.tokens[:end], self.offsets[:count + 1], self.is_synthetic, self.eval_json,
                            self.manifest)

    def prompt(self, index: int) -> np.ndarray:
        """Prompt tokens of sample ``index``: a read-only int32 view."""
        return self.tokens[int(self.offsets[index]):int(self.offsets[index + 1])]

    def gather(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """``prompt(i)`` of each index, in order."""
        return [self.prompt(int(i)) for i in np.asarray(indices, dtype=np.int64).reshape(-1)]

    def describe_lengths(self) -> dict[str, float]:
        return describe_lengths(self.lengths)
