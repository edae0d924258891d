"""GPT-J accuracy: LoadGen accuracy log -> token ids -> text -> ROUGE and gen_len -> accuracy.txt, as MLCommons scores.

    python -m code.gptj.accuracy --log_file LOG_DIR/mlperf_log_accuracy.json [--dataset_file cnn_eval.json] \
        --accuracy_target 0.99 [--dtype int32|int64] [--no_cleanup] [--out_file LOG_DIR/accuracy.txt]

Scoring follows the reference's `language/gpt-j/evaluation.py`: the first log entry of each qsl_idx is kept (log
order), its `data` hex is read as int32 or int64 token ids and decoded with the GPT-J tokenizer (special tokens
skipped); predictions and reference highlights are stripped and put one sentence per line with nltk.sent_tokenize
(`sentence_split`, punkt data from a pinned package; missing data is an error, never another splitter); HF
evaluate's ROUGE with `use_aggregator=False` is rouge_score's `RougeScorer(rouge1, rouge2, rougeL, rougeLsum,
use_stemmer=True).score(reference, prediction)` per sample, of which the F-measures are averaged, x100 and rounded
to 4 places. gen_len is the number of characters of all post-processed predictions, gen_num their count.

accuracy.txt's format and the scoring are shared with Llama 3.1 8B: ``code/llm/summary_accuracy.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from code.common.cli import exits_on
from code.llm.rouge import DTYPES
from code.llm.sentence_split import PunktDataMissingError
from code.llm.summary_accuracy import RougeReference
from code.llm.summary_accuracy import SummaryAccuracyResult as GptjAccuracyResult  # noqa: F401 - for callers
from code.llm.summary_accuracy import evaluate_accuracy_log as evaluate_summaries

REFERENCE_ROUGE = {"ROUGE1": 42.9865, "ROUGE2": 20.1235, "ROUGEL": 29.9881}
"""ROUGE of the fp32 reference GPT-J (beam 4) on the 13,368 CNN/DailyMail validation samples; targets are fractions."""
REFERENCE_GEN_LEN = 4016878
"""Characters the reference generated over the whole data set."""
ACCURACY_TARGETS = {"gptj-99": 0.99, "gptj-99.9": 0.999}
REFERENCE = RougeReference(rouge=REFERENCE_ROUGE, gen_len=REFERENCE_GEN_LEN,
                           benchmarks={v: k for k, v in ACCURACY_TARGETS.items()})
GEN_LEN_FRACTION = REFERENCE.gen_len_fraction
GEN_LEN_TARGET = REFERENCE.gen_len_target
"""The checker's absolute gen_len threshold (3,615,190.2), for both gptj-99 and gptj-99.9."""


def accuracy_targets(accuracy_target: float, gen_len_target: float = GEN_LEN_TARGET) -> dict[str, float]:
    """Checker metric name -> minimum: `accuracy_target` x the reference ROUGE, and the gen_len threshold."""
    return REFERENCE.targets(accuracy_target, gen_len_target)


def evaluate_accuracy_log(
    log_path: Path,
    references: Sequence[str],
    decode: Callable[[list[int]], str],
    accuracy_target: float,
    accuracy_txt: Path,
    dtype: str = "int32",
    gen_len_target: float = GEN_LEN_TARGET,
) -> GptjAccuracyResult:
    """Score a GPT-J LoadGen accuracy log and write `accuracy_txt` (``code.llm.summary_accuracy``).

    `references[i]` is the reference summary (the data set's 'output' highlights) of qsl_idx i. `decode` turns token
    ids into text; the benchmark passes the GPT-J tokenizer's decode with special tokens skipped. `accuracy_target`
    is 0.99 (gptj-99) or 0.999 (gptj-99.9).
    """
    return evaluate_summaries(log_path, references, decode, REFERENCE, accuracy_target, accuracy_txt, dtype,
                              gen_len_target)


@exits_on(PunktDataMissingError)
def main(argv: list[str] | None = None) -> int:
    from code.gptj.tokenizer import load_tokenizer
    from code.llm.cnn_dailymail import default_eval_json, load_targets

    parser = argparse.ArgumentParser(description="Score a GPT-J LoadGen accuracy log (CNN/DailyMail ROUGE).")
    parser.add_argument("--log_file", type=Path, required=True, help="mlperf_log_accuracy.json")
    parser.add_argument("--dataset_file", type=Path, default=None, help="cnn_eval.json (default: the downloaded one)")
    parser.add_argument("--model_dir", type=Path, default=None, help="where to look for the tokenizer files")
    parser.add_argument(
        "--accuracy_target",
        type=float,
        default=ACCURACY_TARGETS["gptj-99"],
        help="fraction of the reference ROUGE (0.99 or 0.999)",
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="int32", help="token id type in the log")
    parser.add_argument(
        "--no_cleanup",
        action="store_true",
        help="decode without transformers 4.x's clean_up_tokenization_spaces (the reference's)",
    )
    parser.add_argument("--out_file", type=Path, default=None, help="default: accuracy.txt beside the log")
    args = parser.parse_args(argv)

    tokenizer = load_tokenizer(model_dir=args.model_dir)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=not args.no_cleanup)

    references = load_targets(args.dataset_file or default_eval_json())
    out_file = args.out_file or args.log_file.parent / "accuracy.txt"
    result = evaluate_accuracy_log(args.log_file, references, decode, args.accuracy_target, out_file, args.dtype)
    print(out_file.read_text(), end="")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
