"""llama3.1-8b accuracy: LoadGen accuracy log -> token ids -> text -> ROUGE and gen_len -> accuracy.txt.

    python -m code.llama31.accuracy --log_file LOG_DIR/mlperf_log_accuracy.json [--data_set datacenter|edge] \
        [--dataset_file cnn_eval.json] [--checkpoint DIR] [--dtype int32|int64] [--out_file LOG_DIR/accuracy.txt]

Scoring follows the reference's ``language/llama3.1-8b/evaluation.py`` (v5.1): the first log entry of each qsl_idx,
ids decoded with the checkpoint's tokenizer (special tokens skipped), text and reference highlights stripped and
split one sentence per line, HF evaluate's ROUGE per sample averaged x100 and rounded to 4 places, gen_len the
characters of all predictions (``code/llm/summary_accuracy.py``, shared with GPT-J). Unlike GPT-J, ROUGE-Lsum is
checked too. One target, 99% (the benchmark has no 99.9% variant).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from code.common.cli import exits_on
from code.llama31.dataset import SAMPLE_COUNTS, eval_file, load_targets
from code.llm.rouge import DTYPES
from code.llm.sentence_split import PunktDataMissingError
from code.llm.summary_accuracy import RougeReference, SummaryAccuracyResult, evaluate_accuracy_log

ACCURACY_TARGET = 0.99
REFERENCES = {
    # language/llama3.1-8b/README.md at v5.1 ("Accuracy Target", the FP16 GPU reference on all 13,368 samples), the
    # same numbers as the v5.1 submission checker's llama3.1-8b entry
    "datacenter": RougeReference(
        rouge={"ROUGE1": 38.7792, "ROUGE2": 15.9075, "ROUGEL": 24.4957, "ROUGELSUM": 35.793}, gen_len=8167644,
        benchmarks={ACCURACY_TARGET: "llama3.1-8b"}),
    # the submission checker on mlcommons/inference main (tools/submission/submission_checker/constants.py,
    # llama3.1-8b-edge): the reference on the 5,000 samples of sample_cnn_eval_5000.json
    "edge": RougeReference(
        rouge={"ROUGE1": 39.06, "ROUGE2": 16.1147, "ROUGEL": 24.6375, "ROUGELSUM": 36.124}, gen_len=3051113,
        benchmarks={ACCURACY_TARGET: "llama3.1-8b-edge"}),
}


def data_set_of(count: int) -> str:
    """Which data set a QSL of ``count`` samples is (the datacenter one for a subset of neither size)."""
    return "edge" if count == SAMPLE_COUNTS["edge"] else "datacenter"


def evaluate(log_path: Path, references: list[str], decode, accuracy_txt: Path, data_set: str,  # noqa: ANN001
             dtype: str = "int32", gen_len_target: float | None = None) -> SummaryAccuracyResult:
    """Score a llama3.1-8b accuracy log against ``data_set``'s reference scores; writes ``accuracy_txt``."""
    return evaluate_accuracy_log(log_path, references, decode, REFERENCES[data_set], ACCURACY_TARGET, accuracy_txt,
                                 dtype, gen_len_target)


@exits_on(PunktDataMissingError, FileNotFoundError, ValueError)
def main(argv: list[str] | None = None) -> int:
    from code.llama31.tokenizer import CHECKPOINT, decoder, load_tokenizer

    parser = argparse.ArgumentParser(description="Score a llama3.1-8b LoadGen accuracy log (CNN/DailyMail ROUGE).")
    parser.add_argument("--log_file", type=Path, required=True, help="mlperf_log_accuracy.json")
    parser.add_argument("--data_set", choices=sorted(REFERENCES), default="datacenter")
    parser.add_argument("--dataset_file", type=Path, default=None, help="default: the downloaded file of --data_set")
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT, help="the folder holding the tokenizer")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="int32", help="token id type in the log")
    parser.add_argument("--out_file", type=Path, default=None, help="default: accuracy.txt beside the log")
    args = parser.parse_args(argv)
    out_file = args.out_file or args.log_file.parent / "accuracy.txt"
    references = load_targets(args.dataset_file or eval_file(args.data_set))
    result = evaluate(args.log_file, references, decoder(load_tokenizer(args.checkpoint)), out_file,
                      args.data_set, args.dtype)
    print(out_file.read_text(), end="")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
