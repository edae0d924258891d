"""llama3.1-8b's data and accuracy: the reference's file format preprocessed, its download from (a local stand-in
for) MLCommons' R2 storage, synthetic prompts, the tokenizer from a checkpoint folder, and the reference's ROUGE
with its targets in accuracy.txt as the submission checker reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from code.common.benchmark_errors import InputsUnavailableError
from code.common.faults import DataFileError
from code.llama31 import download_data
from code.llama31.accuracy import REFERENCES, data_set_of, evaluate
from code.llama31.dataset import BOS_TOKEN_ID, LlamaSamples, eval_file, load_targets
from code.llama31.preprocess_data import main as preprocess_main
from code.llama31.preprocess_data import preprocess
from code.llama31.tokenizer import decoder, load_tokenizer
from code.llm.cnn_dailymail import CnnDailyMailError
from tests.gptj.test_data import FAST, r2  # noqa: F401 - r2: the local R2 server fixture
from tests.llama31.made_data import reference_records, write_reference_file, write_tiny_tokenizer

# The v5.1 submission checker's patterns for the metrics it reads from accuracy.txt (submission_checker.py)
CHECKER_PATTERNS = {"ROUGE1": r".*'rouge1':\s+'?([\d.]+)'?.*", "ROUGE2": r".*'rouge2':\s+'?([\d.]+)'?.*",
                    "ROUGEL": r".*'rougeL':\s+'?([\d.]+)'?.*", "ROUGELSUM": r".*'rougeLsum':\s([\d.]+).*",
                    "GEN_LEN": r".*'gen_len':\s([\d.]+).*"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("llama") / "Llama-3.1-8B-Instruct")


@pytest.fixture(scope="module")
def records(checkpoint) -> list[dict]:
    return reference_records(checkpoint, 12)


def test_preprocess_keeps_the_reference_ids(tmp_path, records):
    source = write_reference_file(tmp_path / "cnn_eval.json", records)
    manifest = preprocess(source, tmp_path / "out", "datacenter", expected_count=None)
    samples = LlamaSamples.load(tmp_path / "out")
    assert manifest["count"] == len(samples) == 12 and not samples.is_synthetic
    assert [s.tolist() for s in samples.gather(range(12))] == [r["tok_input"] for r in records]
    assert samples.prompt(0)[0] == BOS_TOKEN_ID and samples.eval_json == source.resolve()
    assert load_targets(samples.eval_json) == [r["output"] for r in records]
    assert samples.first(5).lengths.tolist() == samples.lengths[:5].tolist()


def test_preprocess_refuses_a_file_of_the_wrong_size_or_format(tmp_path, records, capsys):
    data_dir = tmp_path / "data"
    write_reference_file(eval_file("edge", data_dir), records)
    assert preprocess_main(["--data_dir", str(data_dir), "--preprocessed_data_dir", str(tmp_path / "p")]) == 2
    assert "12 records, the edge set has 5000" in capsys.readouterr().err
    gptj_style = [{"instruction": "Summarize", "input": r["input"], "output": r["output"]} for r in records]
    bad = write_reference_file(tmp_path / "gptj.json", gptj_style)
    with pytest.raises(CnnDailyMailError, match=r"record 0 lacks one of input, tok_input, output .*BENCHMARKS=llama31"):
        preprocess(bad, tmp_path / "out", "datacenter", expected_count=None)


def test_damaged_preprocessed_folder_names_the_fix(tmp_path, records):
    preprocess(write_reference_file(tmp_path / "cnn_eval.json", records), tmp_path / "out", "datacenter", None)
    np.save(tmp_path / "out" / "offsets.npy", np.array([0, 5], dtype=np.int64))
    with pytest.raises(DataFileError, match="preprocess it again"):
        LlamaSamples.load(tmp_path / "out")


def test_synthetic_prompts_have_the_estimated_lengths():
    samples = LlamaSamples.synthetic(2000, seed=1)
    again = LlamaSamples.synthetic(2000, seed=1)
    assert np.array_equal(samples.tokens, again.tokens) and samples.is_synthetic
    assert all(samples.prompt(i)[0] == BOS_TOKEN_ID for i in range(len(samples)))
    assert int(np.count_nonzero(samples.tokens >= 128000)) == len(samples)  # BOS only: no other special id
    assert 730 < samples.describe_lengths()["mean"] < 850  # median 731 of LogNormal(700, 0.45) + 31, mean ~800
    small = LlamaSamples.synthetic(20, seed=1, length_scale=0.05)
    assert small.max_length <= 400 and small.lengths.min() >= 3


def test_download_fetches_and_checks_the_reference_files(tmp_path, r2, monkeypatch):  # noqa: F811
    """Both files from the R2 stand-in, md5-checked, where GPT-J's download reads them too; a second run fetches
    nothing; a file of the wrong size is refused with the fix."""
    record = {"instruction": {"llama": "x"}, "input": "a", "tok_input": [128000, 5], "output": "b"}
    monkeypatch.setattr(download_data, "SAMPLE_COUNTS", {"datacenter": 3, "edge": 2})
    uris = {"datacenter": r2.publish("llama3-1-8b-cnn-eval", {"cnn_eval.json": json.dumps([record] * 3).encode()}),
            "edge": r2.publish("llama3-1-8b-sample-cnn-eval-5000",
                               {"sample_cnn_eval_5000.json": json.dumps([record] * 2).encode()})}
    for data_set, uri in uris.items():
        path = download_data.download_eval_file(data_set, tmp_path, uri, **FAST)
        assert path == eval_file(data_set, tmp_path) and path.parent.name == "mlcommons-r2-llama3.1-8b"
    requested = len(r2.paths_requested())
    download_data.download_eval_file("edge", tmp_path, uris["edge"], **FAST)
    assert [p for p in r2.paths_requested()[requested:] if p.startswith("/bucket")] == []
    monkeypatch.setattr(download_data, "SAMPLE_COUNTS", {"datacenter": 3, "edge": 5000})
    with pytest.raises(CnnDailyMailError, match="2 records, the edge set has 5000.*BENCHMARKS=llama31"):
        download_data.download_eval_file("edge", tmp_path, uris["edge"], **FAST)


def test_tokenizer_comes_from_the_checkpoint_folder(tmp_path, checkpoint):
    with pytest.raises(InputsUnavailableError, match="make download_model BENCHMARKS=llama31"):
        load_tokenizer(tmp_path)
    decode = decoder(load_tokenizer(checkpoint))
    tokenizer = load_tokenizer(checkpoint)
    ids = tokenizer.encode("Police said the vote was close .", add_special_tokens=False)
    assert decode([*ids, 128009]) == "Police said the vote was close."  # <|eot_id|> skipped, 4.46's clean-up


def _write_log(path: Path, outputs: dict[int, list[int]]) -> Path:
    entries = [{"seq_id": i, "qsl_idx": q, "data": np.asarray(ids, dtype=np.int32).tobytes().hex().upper()}
               for i, (q, ids) in enumerate(outputs.items())]
    path.write_text(json.dumps(entries))
    return path


def test_accuracy_of_the_reference_summaries_passes(tmp_path, checkpoint, records):
    """Generated ids that decode to the reference highlights score 100; accuracy.txt's first line gives the checker
    every metric it checks, ROUGE-Lsum included."""
    tokenizer = load_tokenizer(checkpoint)
    references = [r["output"] for r in records]
    outputs = {q: [*tokenizer.encode(text, add_special_tokens=False), 128009] for q, text in enumerate(references)}
    log = _write_log(tmp_path / "mlperf_log_accuracy.json", outputs)
    result = evaluate(log, references, decoder(tokenizer), tmp_path / "accuracy.txt", "datacenter",
                      gen_len_target=100)
    assert result.passed and result.rouge1 == result.rougeLsum == 100.0 and result.gen_num == 12
    first = (tmp_path / "accuracy.txt").read_text().splitlines()[0]
    read = {name: float(re.match(pattern, first).group(1)) for name, pattern in CHECKER_PATTERNS.items()}
    assert read["ROUGELSUM"] == 100.0 and read["GEN_LEN"] == result.gen_len
    assert result.targets == pytest.approx({"ROUGE1": 38.391408, "ROUGE2": 15.748425, "ROUGEL": 24.250743,
                                            "ROUGELSUM": 35.43507, "GEN_LEN": 100})
    assert "GEN_LEN target overridden; the checker requires 7350879.6" in (tmp_path / "accuracy.txt").read_text()


def test_accuracy_fails_below_the_targets_and_names_each_metric(tmp_path, checkpoint, records):
    tokenizer = load_tokenizer(checkpoint)
    references = [r["output"] for r in records]
    other = {q: tokenizer.encode(references[(q + 1) % 12], add_special_tokens=False) for q in range(12)}
    log = _write_log(tmp_path / "mlperf_log_accuracy.json", other)
    result = evaluate(log, references, decoder(tokenizer), tmp_path / "accuracy.txt", "edge")
    assert not result.passed and result.benchmark == "llama3.1-8b-edge"
    assert {f.split()[0] for f in result.failures} >= {"ROUGE1", "ROUGELSUM", "GEN_LEN"}
    assert result.targets["GEN_LEN"] == pytest.approx(3051113 * 0.9)
    assert data_set_of(5000) == "edge" and data_set_of(13368) == data_set_of(100) == "datacenter"
    assert set(REFERENCES) == {"datacenter", "edge"}


def test_model_download_fetches_the_reference_revision_and_checks_it(tmp_path, checkpoint, monkeypatch, capsys):
    """Without a token the gated checkpoint is refused with the fix; with one, the reference's revision is fetched
    (huggingface_hub stands in: nothing can be downloaded here) and every shard its index names is checked."""
    import shutil

    import huggingface_hub

    from code.llama31 import download_model

    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert download_model.main(["--model_dir", str(tmp_path)]) == 1
    assert "is gated: accept Meta's license" in capsys.readouterr().err
    calls = []

    def fake_snapshot(repo_id, *, revision, local_dir, allow_patterns, token):
        calls.append((repo_id, revision, token))
        shutil.copytree(checkpoint, local_dir, dirs_exist_ok=True)
        for name in ("config.json", "generation_config.json"):
            (Path(local_dir) / name).write_text("{}")
        index = {"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors",
                                "model.norm.weight": "model-00002-of-00002.safetensors"}}
        (Path(local_dir) / "model.safetensors.index.json").write_text(json.dumps(index))
        (Path(local_dir) / "model-00001-of-00002.safetensors").write_bytes(b"")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setenv("HF_TOKEN", "hf_made_up")
    assert download_model.main(["--model_dir", str(tmp_path)]) == 1
    assert calls == [("meta-llama/Llama-3.1-8B-Instruct", "be673f326cab4cd22ccfef76109faf68e41aa5f1", "hf_made_up")]
    assert "model-00002-of-00002.safetensors" in capsys.readouterr().err  # the missing shard is named
    folder = download_model.checkpoint_dir(tmp_path)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert download_model.main(["--model_dir", str(tmp_path)]) == 0
    assert len(calls) == 1  # complete: not fetched again


def test_a_system_without_a_description_runs_the_datacenter_set(tmp_path, monkeypatch):
    """A machine whose systems/<system>.json is not written yet (two H200s, say) still runs: the larger set, with
    the run's verdict naming the missing description, as GPT-J and BERT do."""
    from code.common import systems
    from code.common.constants import Benchmark, Scenario
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting
    from code.llama31.benchmark import data_set

    monkeypatch.setattr(systems, "SYSTEMS_DIR", tmp_path)  # no descriptions at all
    for rnd in ("v5.1", "v6.1"):
        config = resolve_config(Benchmark.LLAMA31, Scenario.Offline, "H200_SXM_141GBx2", WorkloadSetting(),
                                {"round": rnd})
        assert data_set(config) == "datacenter"
