"""GPT-J accuracy scoring: accuracy log -> ROUGE/gen_len -> accuracy.txt, equal to the reference's evaluation.py.

A stand-in tokenizer (one token per Unicode code point) replaces GPT-J's, so no model files are needed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer

from code.gptj.accuracy import GEN_LEN_TARGET, GptjAccuracyResult, accuracy_targets, evaluate_accuracy_log
from code.llm.rouge import compute_rouge, read_accuracy_log
from code.llm.sentence_split import PUNKT_PACKAGE_PIN, PunktDataMissingError, newline_sentences, splitter_name

# The submission checker's GPT-J patterns (ACC_PATTERN), copied as test data.
# mlcommons/inference tools/submission/submission_checker.py at tags v4.0 (e39003a9), v4.1 (379ee534),
# v5.0 (dcd0c3ea) and v5.0.1 (e618c314): a bare number must follow "': ".
CHECKER_PATTERNS_V4_V5_0 = {
    "ROUGE1": r".*'rouge1':\s([\d.]+).*",
    "ROUGE2": r".*'rouge2':\s([\d.]+).*",
    "ROUGEL": r".*'rougeL':\s([\d.]+).*",
    "ROUGELSUM": r".*'rougeLsum':\s([\d.]+).*",
    "GEN_LEN": r".*'gen_len':\s([\d.]+).*",
}
# Since PR #2094 (commit 2a41918e, first in tag v5.1; ROUGELSUM since #2230) and at HEAD b66003e1 in
# tools/submission/submission_checker/constants.py: the number may be quoted.
CHECKER_PATTERNS_V5_1 = {
    "ROUGE1": r".*'rouge1':\s+'?([\d.]+)'?.*",
    "ROUGE2": r".*'rouge2':\s+'?([\d.]+)'?.*",
    "ROUGEL": r".*'rougeL':\s+'?([\d.]+)'?.*",
    "ROUGELSUM": r".*'rougeLsum':\s+'?([\d.]+)'?.*",
    "GEN_LEN": r".*'gen_len':\s([\d.]+).*",
}
CHECKER_HASH_PATTERN = r"^hash=([\w\d]+)$"
# The checker's gptj-99 / gptj-99.9 targets (same files): reference x 0.99 / 0.999, gen_len 4016878 x 0.9.
CHECKER_TARGETS = {
    0.99: {"ROUGE1": 42.55663, "ROUGE2": 19.92226, "ROUGEL": 29.68822, "GEN_LEN": 3615190.2},
    0.999: {"ROUGE1": 42.94351, "ROUGE2": 20.10338, "ROUGEL": 29.95811, "GEN_LEN": 3615190.2},
}

REFERENCES = [
    "Police arrested two men after the robbery in London.\nThe suspects were charged on Monday.",
    "Apple said its profits rose 5.2 percent.\nThe U.S. company sold more phones in China.",
    "Mr. Smith, 45, won the race for the third time.\nHe said he was delighted.",
    "The storm killed at least 12 people.\nOfficials warned of more flooding.",
]


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def write_log(path: Path, samples: list[tuple[int, str]], dtype: str = "int32") -> Path:
    """A LoadGen accuracy log: one entry per (qsl_idx, text), data = upper-case hex of the token ids."""
    entries = [
        {"seq_id": n, "qsl_idx": qsl_idx, "data": np.asarray(encode(text), dtype=dtype).tobytes().hex().upper()}
        for n, (qsl_idx, text) in enumerate(samples)
    ]
    path.write_text(json.dumps(entries))
    return path


def perfect_gen_len() -> int:
    return sum(len(newline_sentences(r)) for r in REFERENCES)


def checker_reads(accuracy_txt: Path, patterns: dict[str, str]) -> dict[str, list[tuple[int, str]]]:
    """name -> [(line number, value)] for every line each pattern matches, as the checker's re.match loop reads."""
    found: dict[str, list[tuple[int, str]]] = {name: [] for name in patterns}
    for number, line in enumerate(accuracy_txt.read_text().splitlines(keepends=True)):
        for name, pattern in patterns.items():
            match = re.match(pattern, line)
            if match:
                found[name].append((number, match.group(1)))
    return found


# --------------------------------------------------------------------------------------------------- end to end


def test_perfect_predictions_pass(tmp_path):
    log = write_log(tmp_path / "mlperf_log_accuracy.json", list(enumerate(REFERENCES)))
    result = evaluate_accuracy_log(log, REFERENCES, decode, 0.99, tmp_path / "accuracy.txt", gen_len_target=100)
    assert (result.rouge1, result.rouge2, result.rougeL, result.rougeLsum) == (100.0, 100.0, 100.0, 100.0)
    assert result.gen_len == perfect_gen_len() and result.gen_num == len(REFERENCES)
    assert result.passed and result.failures == []
    assert result.splitter == splitter_name()
    text = (tmp_path / "accuracy.txt").read_text()
    assert text.splitlines()[1].startswith("PASS: gptj-99 ")
    assert "GEN_LEN target overridden" in text and f"sentence splitter: {result.splitter}" in text


def test_absolute_gen_len_target_fails_a_small_set(tmp_path):
    log = write_log(tmp_path / "mlperf_log_accuracy.json", list(enumerate(REFERENCES)))
    result = evaluate_accuracy_log(log, REFERENCES, decode, 0.999, tmp_path / "accuracy.txt")
    assert result.rouge1 == 100.0 and result.targets["GEN_LEN"] == GEN_LEN_TARGET
    assert not result.passed and len(result.failures) == 1 and result.failures[0].startswith("GEN_LEN ")
    lines = (tmp_path / "accuracy.txt").read_text().splitlines()
    assert lines[1].startswith("FAIL: gptj-99.9 ")
    assert any(line.split()[:1] == ["GEN_LEN"] and line.endswith("FAIL") for line in lines)
    assert any(line.split()[:1] == ["ROUGE1"] and line.endswith("PASS") for line in lines)
    assert "overridden" not in "\n".join(lines)


def test_truncated_predictions_fail_on_gen_len(tmp_path):
    halves = [(i, ref[: len(ref) // 2]) for i, ref in enumerate(REFERENCES)]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", halves)
    target = 0.9 * perfect_gen_len()  # the checker's rule (0.9 x the reference's gen_len) on this small set
    result = evaluate_accuracy_log(log, REFERENCES, decode, 0.99, tmp_path / "accuracy.txt", gen_len_target=target)
    assert result.rouge1 > 60 and result.rougeL > 60  # well above the ROUGE targets...
    assert [f.split()[0] for f in result.failures] == ["GEN_LEN"] and not result.passed  # ...but too short


def test_dedup_keeps_the_first_response(tmp_path):
    samples = [(0, REFERENCES[0]), (1, REFERENCES[1]), (0, "something else entirely"), (1, ""), (2, REFERENCES[2])]
    log = write_log(tmp_path / "dup.json", samples)
    ids, entries = read_accuracy_log(log)
    assert entries == 5 and list(ids) == [0, 1, 2] and decode(ids[0].tolist()) == REFERENCES[0]
    result = evaluate_accuracy_log(log, REFERENCES, decode, 0.99, tmp_path / "accuracy.txt", gen_len_target=1)
    assert result.rouge1 == 100.0 and result.gen_num == 3 and result.num_log_entries == 5
    text = (tmp_path / "accuracy.txt").read_text()
    assert "(2 duplicates dropped)" in text and "1 references have no response" in text


def test_int64_logs(tmp_path):
    samples = list(enumerate(REFERENCES))
    as32 = evaluate_accuracy_log(write_log(tmp_path / "a.json", samples), REFERENCES, decode, 0.99, tmp_path / "a.txt")
    log64 = write_log(tmp_path / "b.json", samples, dtype="int64")
    as64 = evaluate_accuracy_log(log64, REFERENCES, decode, 0.99, tmp_path / "b.txt", dtype="int64")
    assert as64.metrics() == as32.metrics() and as64.dtype == "int64"
    with pytest.raises(ValueError, match="dtype='int64'"):
        read_accuracy_log(log64, "int32")
    with pytest.raises(ValueError, match="not a whole number of int64 token ids; written as int32"):
        read_accuracy_log(tmp_path / "a.json", "int64")


def test_int32_log_read_as_int64_is_refused(tmp_path):
    log = write_log(tmp_path / "even.json", [(0, "abcd")])  # 4 ids = 2 int64 values, each far above any token id
    with pytest.raises(ValueError, match="not a valid id; was the log written as int32"):
        read_accuracy_log(log, "int64")


# ---------------------------------------------------------------------------------------------------- metrics


def test_known_example_by_hand():
    # rouge1: 5 of 6 unigrams shared both ways -> F = 5/6; rouge2: 3 of 5 bigrams -> 3/5; rougeL: LCS 5 -> 5/6.
    result = compute_rouge(["the cat sat on the mat"], ["the cat is on the mat"])
    assert result == {
        "rouge1": 83.3333,
        "rouge2": 60.0,
        "rougeL": 83.3333,
        "rougeLsum": 83.3333,
        "gen_len": 22,
        "gen_num": 1,
    }


def test_matches_rouge_score_mean_of_per_sample_f():
    predictions = [
        "Two men were arrested by police. They were charged on Monday.",
        "Apple's profits rose. The company sold phones.",
        "Smith won the race.",
    ]
    references = REFERENCES[:3]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    pairs = zip(predictions, references, strict=True)
    per_sample = [scorer.score(newline_sentences(r), newline_sentences(p)) for p, r in pairs]
    result = compute_rouge(predictions, references)
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        expected = round(np.mean([s[key].fmeasure for s in per_sample]) * 100, 4)  # evaluation.py's expression
        assert result[key] == expected
    assert 0 < result["rougeLsum"] < 100
    assert result["gen_len"] == sum(len(newline_sentences(p)) for p in predictions)


def test_memoized_stemming_tokenizer_is_rouge_scores_own():
    from rouge_score.tokenizers import DefaultTokenizer

    from code.llm.rouge import _StemmingTokenizer

    text = "Running policies: the companies' generously arrested U.S. officials' 3.5% cuts, easily (again) ..."
    ours, theirs = _StemmingTokenizer(), DefaultTokenizer(use_stemmer=True)
    assert ours.tokenize(text) == theirs.tokenize(text) and ours.tokenize(text) == ours.tokenize(text)
    assert "polici" in ours.tokenize(text)


def test_gen_len_counts_post_processed_characters():
    # Stripped, and the whitespace between two sentences becomes one newline: "First.\nSecond." is 14 characters.
    result = compute_rouge(["  First.   \n Second.  "], ["First. Second."])
    assert result["gen_len"] == 14 and result["rouge1"] == 100.0


def test_compute_rouge_rejects_bad_input():
    with pytest.raises(ValueError, match="no predictions"):
        compute_rouge([], [])
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        compute_rouge(["a", "b"], ["a"])


def test_targets_match_the_checker():
    for fraction, expected in CHECKER_TARGETS.items():
        targets = accuracy_targets(fraction)
        assert targets.keys() == expected.keys()
        for name, value in expected.items():
            assert targets[name] == pytest.approx(value, abs=1e-5)


# ----------------------------------------------------------------------------------------- accuracy.txt format


@pytest.mark.parametrize("patterns", [CHECKER_PATTERNS_V4_V5_0, CHECKER_PATTERNS_V5_1], ids=["v4.0-v5.0.1", "v5.1+"])
def test_checker_patterns_read_only_the_first_line(tmp_path, patterns):
    predictions = [(0, REFERENCES[0]), (1, "Apple sold phones. Profits rose."), (2, "Smith won."), (3, REFERENCES[3])]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", predictions)
    accuracy_txt = tmp_path / "accuracy.txt"
    result = evaluate_accuracy_log(log, REFERENCES, decode, 0.99, accuracy_txt)
    with accuracy_txt.open("a") as f:
        f.write("hash=0123456789abcdef\n")  # what truncate_accuracy_log.py appends
    found = checker_reads(accuracy_txt, patterns)
    expected = {"ROUGE1": result.rouge1, "ROUGE2": result.rouge2, "ROUGEL": result.rougeL}
    expected |= {"ROUGELSUM": result.rougeLsum, "GEN_LEN": result.gen_len}
    for name, value in expected.items():
        assert len(found[name]) == 1, f"{name} matched {found[name]}"
        line, text = found[name][0]
        assert line == 0 and float(text) == value
    assert "np." not in accuracy_txt.read_text().splitlines()[0]
    last = accuracy_txt.read_text().splitlines(keepends=True)[-1]
    assert re.match(CHECKER_HASH_PATTERN, last).group(1) == "0123456789abcdef"


def test_checker_verdict_agrees_with_ours(tmp_path):
    log = write_log(tmp_path / "mlperf_log_accuracy.json", [(0, REFERENCES[0]), (1, "Nothing to do with it.")])
    for gen_len_target in (1, GEN_LEN_TARGET):
        accuracy_txt = tmp_path / "accuracy.txt"
        result = evaluate_accuracy_log(log, REFERENCES, decode, 0.99, accuracy_txt, gen_len_target=gen_len_target)
        found = checker_reads(accuracy_txt, CHECKER_PATTERNS_V4_V5_0)
        checker_failures = sorted(
            name for name, target in result.targets.items() if not float(found[name][0][1]) >= target
        )
        assert checker_failures == sorted(f.split()[0] for f in result.failures)
        assert result.passed == (not checker_failures)


def test_quoted_values_since_pr_1886_fail_the_older_patterns():
    # Why our line has bare numbers: the reference prints {'rouge1': '42.9865', ...}, which v4.0-v5.0.1 cannot read.
    reference_line = "{'rouge1': '42.9865', 'rouge2': '20.1235', 'rougeL': '29.9881', 'gen_len': 4016878}"
    assert not re.match(CHECKER_PATTERNS_V4_V5_0["ROUGE1"], reference_line)
    assert re.match(CHECKER_PATTERNS_V5_1["ROUGE1"], reference_line).group(1) == "42.9865"
    ours = GptjAccuracyResult(42.9865, 20.1235, 29.9881, 40.0, 4016878, 13368, "nltk", {}, True)
    line = ours.checker_line()
    assert line == (
        "{'rouge1': 42.9865, 'rouge2': 20.1235, 'rougeL': 29.9881, 'rougeLsum': 40.0, 'gen_len': 4016878, "
        "'gen_num': 13368}"
    )
    for patterns in (CHECKER_PATTERNS_V4_V5_0, CHECKER_PATTERNS_V5_1):
        assert re.match(patterns["ROUGE1"], line).group(1) == "42.9865"


# ----------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "has no entries"),
        ("", "not valid JSON"),
        ('[{"seq_id": 0, "qsl_idx": 0, "data": "0A000000"}, ...', "not valid JSON"),
        ('{"qsl_idx": 0}', "not a list"),
        ('[{"seq_id": 0, "qsl_idx": 0}]', "entry 0 is not an object with 'qsl_idx' and 'data'"),
        ('[{"qsl_idx": -1, "data": ""}]', "qsl_idx -1, not a non-negative integer"),
        ('[{"qsl_idx": 0, "data": "0A00000"}]', r"entry 0 \(qsl_idx 0\): 'data' has an odd number of hex digits"),
        ('[{"qsl_idx": 3, "data": "0A0000ZZ"}]', r"qsl_idx 3\): 'data' is not hexadecimal: 'Z' at character 6"),
        ('[{"qsl_idx": 0, "data": "0A0000"}]', "3 bytes is not a whole number of int32 token ids"),
        ('[{"qsl_idx": 0, "data": 12}]', "'data' is int, not a hex string"),
    ],
)
def test_garbled_logs_are_named(tmp_path, content, message):
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(content)
    with pytest.raises(ValueError, match=message):
        evaluate_accuracy_log(log, REFERENCES, decode, 0.99, tmp_path / "accuracy.txt")
    assert not (tmp_path / "accuracy.txt").exists()


def test_qsl_idx_out_of_range(tmp_path):
    log = write_log(tmp_path / "mlperf_log_accuracy.json", [(0, "a"), (7, "b"), (4, "c")])
    with pytest.raises(ValueError, match=r"qsl_idx \[4, 7\] outside the 4 references"):
        evaluate_accuracy_log(log, REFERENCES, decode, 0.99, tmp_path / "accuracy.txt")


def test_unknown_dtype(tmp_path):
    log = write_log(tmp_path / "mlperf_log_accuracy.json", [(0, "a")])
    with pytest.raises(ValueError, match="dtype must be one of"):
        read_accuracy_log(log, "float32")


# ------------------------------------------------------------------------------------ the reference's own way


def official_metrics(log: Path, references: list[str], dtype: str = "int32") -> dict[str, float | int]:
    """evaluation.py's computation written out from scratch: first response of each qsl_idx in log order, decode,
    strip, "\\n".join(nltk.sent_tokenize(...)), rouge_score with the stemmer per sample, round(mean x 100, 4);
    gen_len = characters of the post-processed predictions."""
    import nltk

    seen: dict[int, str] = {}
    for entry in json.loads(log.read_text()):
        if entry["qsl_idx"] not in seen:
            seen[entry["qsl_idx"]] = decode(np.frombuffer(bytes.fromhex(entry["data"]), dtype).tolist())
    preds = ["\n".join(nltk.sent_tokenize(p.strip())) for p in seen.values()]
    refs = ["\n".join(nltk.sent_tokenize(references[i].strip())) for i in seen]
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
    scores = [scorer.score(r, p) for r, p in zip(refs, preds, strict=True)]
    result: dict[str, float | int] = {t: round(np.mean([s[t].fmeasure for s in scores]) * 100, 4) for t in types}
    result["gen_len"] = int(np.sum([len(p) for p in preds]))
    result["gen_num"] = len(preds)
    return result


def test_equals_the_reference_computation(tmp_path):
    """Abbreviations, initials, quotes, decimals, ragged whitespace and a duplicate: every metric and gen_len equal."""
    references = [
        *REFERENCES,
        "Sen. Warren, D-Mass., spoke on Jan. 12.\nGov. Brown agreed, the U.S. official said.",
        'He said: "It is over." Then he left the St. Louis office at 5 p.m. on Friday.',
    ]
    samples = [
        (0, "Two men were arrested by police in London.   They were charged on Monday."),
        (1, "Apple's profits rose 5.2 percent. The U.S. firm sold phones in China!"),
        (2, "  Mr. Smith, 45, won the race.\n\nJ. K. Rowling was there. He was delighted...  "),
        (1, "A second response to qsl_idx 1, which the reference ignores."),
        (4, "Sen. Warren spoke. Gov. Brown agreed, officials said (it was late.) Next day came."),
        (5, '"It is over," he said. Then he left the office at 5 p.m. on Friday. Why? Nobody knows.'),
        (3, "The storm killed 12 people."),
    ]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", samples)
    result = evaluate_accuracy_log(log, references, decode, 0.99, tmp_path / "accuracy.txt", gen_len_target=1)
    expected = official_metrics(log, references)
    assert result.metrics() == expected
    assert result.gen_num == 6 and result.num_log_entries == 7
    first_line = (tmp_path / "accuracy.txt").read_text().splitlines()[0]
    # evaluation.py printed this dict under numpy 1.x, whose scalars print as bare numbers.
    assert first_line == repr({key: getattr(value, "item", lambda v=value: v)() for key, value in expected.items()})


def test_sentences_are_nltk_punkts():
    import nltk

    text = '  He moved to the U.S. The move was sudden.\n"I am done," he said. Mr. Smith left at 5 p.m. today.  '
    assert newline_sentences(text) == "\n".join(nltk.sent_tokenize(text.strip()))
    assert newline_sentences(text).count("\n") >= 2
    # Named by its package, never by a folder of this machine: accuracy.txt ships in a submission.
    assert splitter_name() == f"nltk {nltk.__version__} sent_tokenize, punkt_tab of {PUNKT_PACKAGE_PIN}"


def test_missing_punkt_data_names_the_fix(monkeypatch, tmp_path):
    import nltk

    from code.llm import sentence_split

    monkeypatch.setattr(sentence_split, "package_nltk_data", lambda: None)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    sentence_split._ensure_punkt.cache_clear()
    try:
        with pytest.raises(PunktDataMissingError, match=r"punkt_tab.*make setup.*llama-index-core==0\.14\.25"):
            compute_rouge(["A b. C d."], ["A b."])
    finally:
        sentence_split._ensure_punkt.cache_clear()


# ------------------------------------------------------------------------------------------------ command line


def test_command_line_with_the_gptj_tokenizer(tmp_path, capsys):
    try:
        from code.gptj.tokenizer import EOS_TOKEN_ID, load_tokenizer

        tokenizer = load_tokenizer()
    except (ImportError, FileNotFoundError) as error:
        pytest.skip(f"GPT-J tokenizer unavailable: {error}")
    from code.gptj.accuracy import main

    dataset = tmp_path / "cnn_eval.json"
    records = [
        {"instruction": "Summarize the following news article:", "input": "...", "output": r} for r in REFERENCES
    ]
    dataset.write_text(json.dumps(records))
    entries = [
        {"seq_id": i, "qsl_idx": i, "data": np.asarray(tokenizer.encode(r) + [EOS_TOKEN_ID], np.int32).tobytes().hex()}
        for i, r in enumerate(REFERENCES)
    ]
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(entries))
    assert main(["--log_file", str(log), "--dataset_file", str(dataset)]) == 1  # 4 samples: far below GEN_LEN
    first = (tmp_path / "accuracy.txt").read_text().splitlines()[0]
    assert first == (
        f"{{'rouge1': 100.0, 'rouge2': 100.0, 'rougeL': 100.0, 'rougeLsum': 100.0, 'gen_len': {perfect_gen_len()}, "
        "'gen_num': 4}"
    )
    assert "GEN_LEN" in capsys.readouterr().out
