"""The GPT-J QSL's samples: tokenized CNN/DailyMail prompts, or synthetic ones with CNN/DailyMail-like lengths.

Everything is held in RAM as one int32 ``[N, W]`` array (13,368 × 1,919 × 4 B ≈ 103 MB; the reference's QSL
load/unload are no-ops too), each row left-aligned and right-padded with 50256, plus the real lengths. A sample is
always handed out unpadded (``prompt(i)``, ``gather``): generation cost depends on the prompt lengths, so padding is
left to whoever forms a batch (``padded`` builds one on either side).

Synthetic prompts (``GptjSamples.synthetic``) reproduce the length distribution, not the text: the real template's
47 leading and 5 trailing tokens around uniformly drawn ordinary tokens (ids 0..50255). The prompt length is
52 + an article length drawn from LogNormal(median 800, sigma 0.45) tokens, clipped to [64, 1919]: mean ≈ 920,
median ≈ 850, p90 ≈ 1,460, ~3 % at the 1,919 cap. This is an estimate (the dataset card gives 781 tokens per article
on average; GPT-2's BPE needs ~1.1-1.2 tokens for each), to be checked against ``describe_lengths()`` of the real
data.
``length_scale`` shrinks every length (and the cap) for tiny CPU runs; below the template's size prompts are all
random tokens.

Forced output lengths (``with_forced_lengths``) stand in for what real weights produce, since random weights
practically never choose EOS and so always generate the full 128 tokens: each sample's output is made to end with
EOS at a length drawn from LogNormal(median 66, sigma 0.35) tokens, rounded and clipped to [31, 128] (the final
EOS included: the reference generates at least 30 tokens before it and at most 128 in all): mean ≈ 70, as the real
set's ``gen_len`` target implies (~300 characters per summary, ~70 GPT-2 tokens). Only the in-flight engine
honours them, and only on synthetic inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from code.common.faults import DataFileError, reading
from code.gptj import prompt as layout  # the tokenized folder preprocess_data writes
from code.gptj.tokenizer import EOS_TOKEN_ID, PAD_TOKEN_ID, VOCAB_SIZE, GptjTokenizer, load_tokenizer
from code.llm.cnn_dailymail import INSTRUCTION, describe_lengths

SYNTH_TEMPLATE_TOKENS = 52
"""Tokens of the prompt template around the article (47 before, 5 after), checked by the tests."""
SYNTH_ARTICLE_MEDIAN = 800.0
SYNTH_ARTICLE_SIGMA = 0.45
SYNTH_MIN_LENGTH = 64
SYNTH_MEAN_LENGTH_BAND = (880.0, 980.0)
"""Where the mean length of synthetic prompts (full scale) must fall: the estimate above, ± ~5 %."""
_ORDINARY_IDS = (0, EOS_TOKEN_ID)
"""Token ids drawn for synthetic articles: GPT-2's vocabulary without ``<|endoftext|>`` and the extra tokens."""
_RELOAD_HINT = "preprocess it again: make preprocess_data BENCHMARKS=gptj"
SYNTH_OUTPUT_MEDIAN = 66.0
SYNTH_OUTPUT_SIGMA = 0.35
SYNTH_OUTPUT_RANGE = (31, 128)  # min_new_tokens + 1 (EOS comes after at least 30 tokens) and max_new_tokens


@lru_cache(maxsize=1)
def _template_ids(tokenizer: GptjTokenizer | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Token ids of the prompt before and after the article, or None when no tokenizer files are available."""
    try:
        tokenizer = tokenizer or load_tokenizer()
    except (FileNotFoundError, ValueError, ImportError):
        return None
    before, after = layout.PROMPT_TEMPLATE.split("{input}")
    return (
        np.array(tokenizer.encode(before.format(instruction=INSTRUCTION)), dtype=np.int32),
        np.array(tokenizer.encode(after), dtype=np.int32),
    )


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass
class GptjSamples:
    """Prompt tokens of every QSL sample, with their real lengths (rows right-padded with ``pad_token_id``)."""

    input_ids: np.ndarray  # int32 [N, W], read-only
    lengths: np.ndarray  # int32 [N], read-only
    is_synthetic: bool
    eval_json: Path | None = None  # the cnn_eval.json the prompts came from (its `output`s are the ROUGE targets)
    manifest: dict = field(default_factory=dict)
    pad_token_id: int = PAD_TOKEN_ID
    forced_lengths: np.ndarray | None = None  # int32 [N]: forced output lengths of a synthetic set, or None

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_length(self) -> int:
        """Width of the padded array (1,919 for preprocessed data)."""
        return int(self.input_ids.shape[1])

    @classmethod
    def load(cls, preprocessed_dir: Path) -> GptjSamples:
        """Load ``cnn_dailymail_tokenized_gptj/`` from ``preprocessed_dir`` (or that folder itself, or any folder
        of that layout such as the calibration set's), checked."""
        root = Path(preprocessed_dir)
        own_layout = root.name == layout.TOKENIZED_SUBDIR or (root / layout.MANIFEST_FILE).is_file()
        directory = root if own_layout else root / layout.TOKENIZED_SUBDIR
        names = (layout.INPUT_IDS_FILE, layout.INPUT_LENGTHS_FILE, layout.MANIFEST_FILE)
        missing = [name for name in names if not (directory / name).is_file()]
        if missing:
            raise DataFileError(
                f"GPT-J preprocessed data in {directory} is missing or incomplete ({', '.join(missing)}); "
                "run `make preprocess_data BENCHMARKS=gptj`"
            )
        with reading(directory / layout.MANIFEST_FILE, _RELOAD_HINT):
            manifest = json.loads((directory / layout.MANIFEST_FILE).read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT_VERSION:
            raise DataFileError(f"{directory / layout.MANIFEST_FILE} is not format {layout.FORMAT_VERSION}; "
                                f"{_RELOAD_HINT}")
        with reading(directory / layout.INPUT_IDS_FILE, _RELOAD_HINT, also=(ValueError,)):
            input_ids = np.load(directory / layout.INPUT_IDS_FILE)
        with reading(directory / layout.INPUT_LENGTHS_FILE, _RELOAD_HINT, also=(ValueError,)):
            lengths = np.load(directory / layout.INPUT_LENGTHS_FILE)
        expected = (int(manifest["count"]), int(manifest["max_length"]))
        if input_ids.dtype != np.int32 or input_ids.shape != expected:
            raise DataFileError(
                f"{directory / layout.INPUT_IDS_FILE} is {input_ids.dtype} {input_ids.shape}, manifest says int32 "
                f"{expected}; {_RELOAD_HINT}"
            )
        if lengths.dtype != np.int32 or lengths.shape != expected[:1]:
            raise DataFileError(f"{directory / layout.INPUT_LENGTHS_FILE} is {lengths.dtype} {lengths.shape}; "
                                f"{_RELOAD_HINT}")
        pad = int(manifest.get("pad_token_id", PAD_TOKEN_ID))
        _check_layout(input_ids, lengths, pad, directory)
        eval_json = Path(manifest["eval_json"]) if manifest.get("eval_json") else None
        return cls(_read_only(input_ids), _read_only(lengths), False, eval_json, manifest, pad)

    @classmethod
    def synthetic(
        cls,
        count: int,
        seed: int = 0,
        length_scale: float = 1.0,
        max_length: int = layout.MAX_INPUT_TOKENS,
        tokenizer: GptjTokenizer | None = None,
    ) -> GptjSamples:
        """``count`` prompts with CNN/DailyMail-like lengths (module docstring), deterministic in ``seed``.

        ``length_scale`` (0 < s <= 1) multiplies every length and the ``max_length`` cap, e.g. 0.05 for prompts of
        ~3..96 tokens on a CPU. ``tokenizer`` supplies the real template tokens (default: ``load_tokenizer()``,
        skipped when its files are missing).
        """
        if count < 0 or not 0 < length_scale <= 1:
            raise ValueError(f"need count >= 0 and 0 < length_scale <= 1, got {count}, {length_scale}")
        rng = np.random.default_rng(seed)
        template = _template_ids(tokenizer)
        fixed = 0 if template is None else len(template[0]) + len(template[1])
        articles = rng.lognormal(np.log(SYNTH_ARTICLE_MEDIAN), SYNTH_ARTICLE_SIGMA, size=count)
        cap = max(1, round(max_length * length_scale))
        floor = min(cap, max(1, round(SYNTH_MIN_LENGTH * length_scale)))
        lengths = np.clip(np.rint((SYNTH_TEMPLATE_TOKENS + articles) * length_scale), floor, cap).astype(np.int32)
        width = int(lengths.max()) if count else 1
        input_ids = rng.integers(*_ORDINARY_IDS, size=(count, width), dtype=np.int32)
        input_ids[np.arange(width)[None, :] >= lengths[:, None]] = PAD_TOKEN_ID
        rows = np.flatnonzero(lengths > fixed) if template is not None else np.zeros(0, dtype=np.int64)
        if template is not None and rows.size:
            before, after = template
            input_ids[rows, : len(before)] = before
            ends = lengths[rows, None] - len(after) + np.arange(len(after))[None, :]
            input_ids[rows[:, None], ends] = after
        manifest = {"synthetic": True, "seed": seed, "length_scale": length_scale, "max_length": max_length}
        return cls(_read_only(input_ids), _read_only(lengths), True, None, manifest)

    @classmethod
    def full_length(cls, count: int, seed: int = 0, length: int = layout.MAX_INPUT_TOKENS) -> GptjSamples:
        """``count`` random-token prompts all at ``length`` (the 1,919-token cap): the worst case for throughput."""
        rng = np.random.default_rng(seed)
        input_ids = rng.integers(*_ORDINARY_IDS, size=(count, length), dtype=np.int32)
        lengths = np.full(count, length, dtype=np.int32)
        manifest = {"synthetic": True, "seed": seed, "full_length": True, "max_length": length}
        return cls(_read_only(input_ids), _read_only(lengths), True, None, manifest)

    def with_forced_lengths(self, seed: int = 0) -> GptjSamples:
        """The same samples with output lengths drawn as the module docstring says (synthetic sets only)."""
        if not self.is_synthetic:
            raise ValueError("forced output lengths are for synthetic inputs (real outputs end where the model "
                             "chooses EOS): set --synthetic_output_lengths=model")
        rng = np.random.default_rng([seed, 1])
        drawn = np.rint(rng.lognormal(np.log(SYNTH_OUTPUT_MEDIAN), SYNTH_OUTPUT_SIGMA, size=len(self)))
        lengths = np.clip(drawn, *SYNTH_OUTPUT_RANGE).astype(np.int32)
        manifest = {**self.manifest, "forced_output_lengths": {"median": SYNTH_OUTPUT_MEDIAN,
                                                               "sigma": SYNTH_OUTPUT_SIGMA,
                                                               "range": list(SYNTH_OUTPUT_RANGE)}}
        return GptjSamples(self.input_ids, self.lengths, True, None, manifest, self.pad_token_id,
                           forced_lengths=_read_only(lengths))

    def forced_length(self, index: int) -> int:
        """Sample ``index``'s forced output length, EOS included; 0 when outputs end where the model decides."""
        return int(self.forced_lengths[index]) if self.forced_lengths is not None else 0

    def first(self, count: int) -> GptjSamples:
        """The first ``count`` prompts (all of them when there are fewer): ``--num_samples``."""
        if count >= len(self):
            return self
        forced = self.forced_lengths
        return replace(self, input_ids=self.input_ids[:count], lengths=self.lengths[:count],
                       forced_lengths=None if forced is None else forced[:count])

    def prompt(self, index: int) -> np.ndarray:
        """Prompt tokens of sample ``index``, unpadded: a read-only int32 view."""
        return self.input_ids[index, : int(self.lengths[index])]

    def gather(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """``prompt(i)`` of each index, in order."""
        return [self.prompt(int(i)) for i in np.asarray(indices, dtype=np.int64).reshape(-1)]

    def padded(self, indices: Sequence[int] | np.ndarray, side: str = "left") -> tuple[np.ndarray, np.ndarray]:
        """``(ids [B, S], lengths [B])``: the prompts of ``indices`` padded to the longest of them, on ``side``.

        ``side="left"`` is the reference's layout for batched generation (prompts end in the last column).
        """
        if side not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', got {side!r}")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        lengths = np.ascontiguousarray(self.lengths[idx])
        width = int(lengths.max()) if idx.size else 0
        out = np.full((idx.size, width), self.pad_token_id, dtype=np.int32)
        for row, (i, n) in enumerate(zip(idx.tolist(), lengths.tolist(), strict=True)):
            if side == "right":
                out[row, :n] = self.input_ids[i, :n]
            else:
                out[row, width - n :] = self.input_ids[i, :n]
        return out, lengths

    def describe_lengths(self) -> dict[str, float]:
        """Count, mean/min/p50/p90/p99/max prompt length and total prompt tokens, for logs."""
        return describe_lengths(self.lengths)


def _check_layout(input_ids: np.ndarray, lengths: np.ndarray, pad: int, directory: Path) -> None:
    """Lengths in [1, W], ids in the vocabulary, and every position past a row's length holding ``pad``."""
    width = input_ids.shape[1]
    if lengths.size and (int(lengths.min()) < 1 or int(lengths.max()) > width):
        raise DataFileError(f"{directory / layout.INPUT_LENGTHS_FILE} has lengths outside [1, {width}]; {_RELOAD_HINT}")
    if input_ids.size and (int(input_ids.min()) < 0 or int(input_ids.max()) >= VOCAB_SIZE):
        raise DataFileError(f"{directory / layout.INPUT_IDS_FILE} has ids outside [0, {VOCAB_SIZE}); {_RELOAD_HINT}")
    padding = np.arange(width, dtype=np.int32)[None, :] >= lengths[:, None]
    if not np.all(input_ids[padding] == pad):
        raise DataFileError(f"{directory / layout.INPUT_IDS_FILE} is not right-padded with {pad}; {_RELOAD_HINT}")
