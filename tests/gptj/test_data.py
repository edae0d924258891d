"""Tests of GPT-J's data path: tokenizer, prompt, preprocessing, the sample loader, and the R2/cnn_eval downloads.

Downloads run against a local HTTP server (127.0.0.1, port 0, daemon thread, shut down by the fixture and a
watchdog), so nothing here reaches the network. The tokenizer is checked against transformers' GPT2Tokenizer and
against a plain-Python GPT-2 BPE written here from the algorithm, both reading the same two files.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from code.common.constants import DATASET_SIZE, Benchmark
from code.common.download import DownloadError
from code.common.faults import DataFileError
from code.common.r2_download import R2Entry, R2Listing, metadata_urls, parse_md5_text, parse_uri_text
from code.gptj import calibration_data, download_data, download_model, preprocess_data
from code.gptj.dataset import SYNTH_MEAN_LENGTH_BAND, SYNTH_TEMPLATE_TOKENS, GptjSamples
from code.gptj.download_model import check_checkpoint, checkpoint_path
from code.gptj.prompt import (
    CALIBRATION_FILE,
    CALIBRATION_TOKENIZED_SUBDIR,
    INPUT_IDS_FILE,
    INPUT_LENGTHS_FILE,
    MANIFEST_FILE,
    MAX_INPUT_TOKENS,
    TOKENIZED_SUBDIR,
    build_prompt,
)
from code.gptj.tokenizer import (
    EOS_TOKEN_ID,
    EXTRA_TOKENS,
    VOCAB_SIZE,
    GptjTokenizer,
    clean_up_tokenization,
    find_tokenizer_files,
    load_tokenizer,
)
from code.llm.cnn_dailymail import (
    CNN_DAILYMAIL_VALIDATION_SAMPLES,
    INSTRUCTION,
    CnnDailyMailError,
    load_eval_records,
    load_targets,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cnn_tiny.json"

# The reference's template, typed out again from mlcommons/inference language/gpt-j/dataset.py (PROMPT_DICT).
REFERENCE_PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)

SAMPLE_TEXTS = [
    "Hello world!",
    "  leading spaces, trailing spaces   ",
    "Line one.\nLine two.\n\n\nLine five\r\nwith CRLF\tand a tab.",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 2024-03-09 $5.99 £10 ¥1,500 100%",
    "Unicode: café naïve Zürich Ελληνικά русский 東京 日本語 한국어 عربى emoji 🚀👍🏽 e\u0301 \u2028 \u00a0nbsp",
    "Contractions: don't, I'm, we've, they're, it's, she'll, he'd; quotes \u201clike this\u201d and 'this'.",
    'Code-ish: def f(x): return {x: [1, 2]}  # comment\n    indented <tag attr="v"/> a->b && c||d',
    "Special: <|endoftext|> in the middle, <|extratoken_1|>x<|extratoken_143|> and <|extratoken_144|>.",
    "",
    " ",
    "\n",
    "a" * 300 + " " + "ab" * 100,
]


# ----------------------------------------------------------------------------------------------------------------------
# A plain-Python GPT-2 BPE (the algorithm of OpenAI's encoder.py), independent of the tokenizers library


def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class PlainGpt2Bpe:
    """GPT-2 byte-level BPE: regex pre-split, bytes mapped to printable characters, lowest-rank merges first."""

    PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

    def __init__(self, vocab_file: Path, merges_file: Path) -> None:
        import regex

        self.split = regex.compile(self.PATTERN)
        self.encoder = json.loads(vocab_file.read_text(encoding="utf-8"))
        for i, token in enumerate(EXTRA_TOKENS):
            self.encoder[token] = len(self.encoder)
            assert self.encoder[token] == 50257 + i
        self.decoder = {v: k for k, v in self.encoder.items()}
        lines = [line for line in merges_file.read_text(encoding="utf-8").splitlines()[1:] if line]
        self.ranks = {tuple(line.split(" ")): rank for rank, line in enumerate(lines)}
        self.byte_encoder = _bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.added = re.compile("(" + "|".join(re.escape(t) for t in ["<|endoftext|>", *EXTRA_TOKENS]) + ")")

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [
                (self.ranks.get(pair, len(self.ranks)), i) for i, pair in enumerate(zip(parts, parts[1:], strict=False))
            ]
            rank, at = min(pairs)
            if rank == len(self.ranks):
                break
            first, second = parts[at], parts[at + 1]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == first and parts[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self.added.split(text):
            if piece in self.encoder and self.added.fullmatch(piece):
                ids.append(self.encoder[piece])
                continue
            for word in self.split.findall(piece):
                mapped = "".join(self.byte_encoder[b] for b in word.encode("utf-8"))
                ids.extend(self.encoder[token] for token in self._bpe(mapped))
        return ids

    def decode(self, ids: list[int]) -> str:
        text = "".join(self.decoder[i] for i in ids if i != EOS_TOKEN_ID)  # extra tokens are ASCII: kept as text
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def tokenizer() -> GptjTokenizer:
    return load_tokenizer()


@pytest.fixture(scope="module")
def plain_bpe(tokenizer: GptjTokenizer) -> PlainGpt2Bpe:
    return PlainGpt2Bpe(tokenizer.vocab_file, tokenizer.merges_file)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return load_eval_records(FIXTURE)


# ----------------------------------------------------------------------------------------------------------------------
# Tokenizer


def test_tokenizer_vocabulary(tokenizer: GptjTokenizer) -> None:
    assert tokenizer.vocab_size == VOCAB_SIZE == len(tokenizer) == 50400
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == EOS_TOKEN_ID == 50256
    assert tokenizer.token_to_id("<|endoftext|>") == 50256
    assert [tokenizer.token_to_id(t) for t in EXTRA_TOKENS] == list(range(50257, 50400))
    assert EXTRA_TOKENS[0] == "<|extratoken_1|>" and EXTRA_TOKENS[-1] == "<|extratoken_143|>"
    assert tokenizer.encode("<|extratoken_7|>") == [50263]
    assert tokenizer.encode("<|endoftext|>") == [50256]
    assert tokenizer.encode("Hello world") == [15496, 995]  # GPT-2's well-known ids; no BOS, no prefix space


def test_tokenizer_matches_transformers_gpt2(tokenizer: GptjTokenizer, records: list[dict]) -> None:
    from transformers import GPT2Tokenizer

    reference = GPT2Tokenizer(vocab=str(tokenizer.vocab_file), merges=str(tokenizer.merges_file))
    assert reference.add_tokens(list(EXTRA_TOKENS)) == 143
    texts = SAMPLE_TEXTS + [build_prompt(r) for r in records]
    for text in texts:
        ids = tokenizer.encode(text)
        assert ids == reference.encode(text, add_special_tokens=False), text[:60]
        assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True), text[:60]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]


def test_tokenizer_matches_plain_python_bpe(
    tokenizer: GptjTokenizer, plain_bpe: PlainGpt2Bpe, records: list[dict]
) -> None:
    for text in SAMPLE_TEXTS + [build_prompt(r) for r in records]:
        ids = tokenizer.encode(text)
        assert ids == plain_bpe.encode(text), text[:60]
        assert tokenizer.decode(ids) == plain_bpe.decode(ids), text[:60]


def test_decode_round_trips_and_partial_utf8(tokenizer: GptjTokenizer, plain_bpe: PlainGpt2Bpe) -> None:
    for text in SAMPLE_TEXTS:
        if "<|endoftext|>" not in text:
            assert tokenizer.decode(tokenizer.encode(text)) == text
    ids = tokenizer.encode("🚀 東京 e\u0301")
    for start in range(len(ids)):  # slices cut multi-byte characters: U+FFFD as GPT-2's errors="replace"
        for stop in range(start + 1, len(ids) + 1):
            assert tokenizer.decode(ids[start:stop]) == plain_bpe.decode(ids[start:stop])
    with_eos = tokenizer.encode("Summary here.") + [EOS_TOKEN_ID, EOS_TOKEN_ID]
    assert tokenizer.decode(with_eos) == "Summary here."
    assert tokenizer.decode(with_eos, skip_special_tokens=False) == "Summary here.<|endoftext|><|endoftext|>"
    assert tokenizer.decode([50260]) == "<|extratoken_4|>"  # not special: the reference keeps it too
    as_array = np.array(with_eos, dtype=np.int64)
    assert tokenizer.batch_decode([as_array, as_array.astype(np.int32)]) == ["Summary here."] * 2
    with pytest.raises(ValueError, match="50400"):
        tokenizer.decode([1, 50400])


def test_clean_up_tokenization_spaces(tokenizer: GptjTokenizer) -> None:
    ids = tokenizer.encode("He said it 's fine , really . Is n't it ?")
    assert tokenizer.decode(ids, clean_up_tokenization_spaces=True) == "He said it's fine, really. Isn't it?"
    assert tokenizer.decode(ids) == "He said it 's fine , really . Is n't it ?"
    assert clean_up_tokenization("a ' b") == "a'b"


def test_tokenizer_files_prefer_checkpoint_copy(tmp_path: Path, tokenizer: GptjTokenizer) -> None:
    folder = tmp_path / "GPTJ-6B" / "checkpoint-final"
    folder.mkdir(parents=True)
    (folder / "vocab.json").write_bytes(tokenizer.vocab_file.read_bytes())
    (folder / "merges.txt").write_bytes(tokenizer.merges_file.read_bytes())
    assert find_tokenizer_files(tmp_path) == (folder / "vocab.json", folder / "merges.txt")
    assert find_tokenizer_files(folder) == (folder / "vocab.json", folder / "merges.txt")
    assert load_tokenizer(model_dir=tmp_path).encode("Hello world") == [15496, 995]


def test_missing_tokenizer_package_names_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from code.gptj import tokenizer as module

    monkeypatch.setattr(module, "_package_files", lambda: None)
    with pytest.raises(FileNotFoundError, match="make setup"):
        module.find_tokenizer_files(tmp_path)
    bad = tmp_path / "vocab.json"
    bad.write_text(json.dumps({"a": 0}))
    with pytest.raises(ValueError, match="make setup"):
        module.read_vocab(bad)


# ----------------------------------------------------------------------------------------------------------------------
# Prompt, eval file, preprocessing


def test_prompt_is_the_reference_template(records: list[dict]) -> None:
    record = records[3]
    assert build_prompt(record) == REFERENCE_PROMPT.format_map(record)
    assert build_prompt(record) == (
        "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
        "response that appropriately completes the request.\n\n### Instruction:\nSummarize the following news "
        f"article:\n\n### Input:\n{record['input']}\n\n### Response:"
    )
    assert "{like these}" in build_prompt(record)  # braces in the article are not format fields
    assert all(r["instruction"] == INSTRUCTION for r in records)


def test_eval_file_checks(tmp_path: Path, records: list[dict]) -> None:
    assert CNN_DAILYMAIL_VALIDATION_SAMPLES == DATASET_SIZE[Benchmark.GPTJ]  # the QSL's size, defined once
    assert load_targets(FIXTURE) == [r["output"] for r in records]
    with pytest.raises(CnnDailyMailError, match=f"expected {CNN_DAILYMAIL_VALIDATION_SAMPLES}"):
        load_eval_records(FIXTURE, expected_count=CNN_DAILYMAIL_VALIDATION_SAMPLES)
    bad = tmp_path / "cnn_eval.json"
    bad.write_text(json.dumps([{"instruction": INSTRUCTION, "input": "x"}]))
    with pytest.raises(CnnDailyMailError, match="record 0 has no string 'output'.*make download_data BENCHMARKS=gptj"):
        load_eval_records(bad)
    with pytest.raises(FileNotFoundError, match="make download_data BENCHMARKS=gptj"):
        load_eval_records(tmp_path / "absent.json")


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory: pytest.TempPathFactory, tokenizer: GptjTokenizer) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("pre") / TOKENIZED_SUBDIR
    return out, preprocess_data.preprocess(FIXTURE, out, tokenizer)


def test_preprocess_truncates_and_pads_like_the_reference(
    preprocessed: tuple[Path, dict], records: list[dict], tokenizer: GptjTokenizer
) -> None:
    out, manifest = preprocessed
    input_ids = np.load(out / INPUT_IDS_FILE)
    lengths = np.load(out / INPUT_LENGTHS_FILE)
    assert input_ids.dtype == lengths.dtype == np.int32
    assert input_ids.shape == (len(records), MAX_INPUT_TOKENS) == (6, 1919)
    full = [tokenizer.encode(build_prompt(r)) for r in records]
    assert lengths.tolist() == [min(len(ids), 1919) for ids in full]
    long_row = max(range(len(full)), key=lambda i: len(full[i]))
    assert len(full[long_row]) > 1919 and lengths[long_row] == 1919
    for row, ids in enumerate(full):
        n = int(lengths[row])
        assert input_ids[row, :n].tolist() == ids[:1919]  # right truncation: the beginning is kept
        assert np.all(input_ids[row, n:] == 50256)  # right padding with <|endoftext|>
    assert not tokenizer.decode(input_ids[long_row, :1919]).endswith("### Response:")
    assert manifest["count"] == 6 and manifest["num_truncated"] == 1 and manifest["max_length"] == 1919
    assert manifest["padding_side"] == "right" and manifest["truncation_side"] == "right"
    assert manifest["source_sha256"] == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert manifest["eval_json"] == str(FIXTURE.resolve())
    assert manifest["tokenizer"]["vocab_size"] == 50400
    assert manifest["tokenizer"]["vocab_sha256"] == hashlib.sha256(tokenizer.vocab_file.read_bytes()).hexdigest()
    assert json.loads((out / MANIFEST_FILE).read_text()) == manifest


def test_loader_round_trip(preprocessed: tuple[Path, dict], records: list[dict], tokenizer: GptjTokenizer) -> None:
    out, _ = preprocessed
    samples = GptjSamples.load(out.parent)  # the parent folder works too
    assert len(samples) == 6 and not samples.is_synthetic
    assert samples.eval_json == FIXTURE.resolve() and samples.max_length == 1919
    for i, record in enumerate(records):
        prompt = samples.prompt(i)
        assert prompt.dtype == np.int32 and not prompt.flags.writeable
        assert prompt.tolist() == tokenizer.encode(build_prompt(record))[:1919]
    gathered = samples.gather(np.array([5, 0, 5]))
    assert [g.tolist() for g in gathered] == [samples.prompt(i).tolist() for i in (5, 0, 5)]
    left, lengths = samples.padded([0, 5], side="left")
    assert left.shape == (2, int(lengths.max())) and lengths.tolist() == [178, 55]
    assert left[1, -55:].tolist() == samples.prompt(5).tolist() and np.all(left[1, :-55] == 50256)
    right, _ = samples.padded([0, 5], side="right")
    assert right[1, :55].tolist() == samples.prompt(5).tolist()
    stats = samples.describe_lengths()
    assert stats["count"] == 6 and stats["max"] == 1919 and stats["min"] == 55


def test_loader_rejects_missing_or_damaged_data(preprocessed: tuple[Path, dict], tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="make preprocess_data BENCHMARKS=gptj"):
        GptjSamples.load(tmp_path)
    out, manifest = preprocessed
    broken = tmp_path / TOKENIZED_SUBDIR
    broken.mkdir()
    ids = np.load(out / INPUT_IDS_FILE)
    ids[0, -1] = 7  # a token after the real length: not right-padded
    np.save(broken / INPUT_IDS_FILE, ids)
    np.save(broken / INPUT_LENGTHS_FILE, np.load(out / INPUT_LENGTHS_FILE))
    (broken / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="right-padded"):
        GptjSamples.load(tmp_path)
    (broken / MANIFEST_FILE).write_text(json.dumps({**manifest, "count": 7}))
    with pytest.raises(ValueError, match="manifest says"):
        GptjSamples.load(tmp_path)
    (broken / MANIFEST_FILE).write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(ValueError, match="make preprocess_data BENCHMARKS=gptj"):
        GptjSamples.load(tmp_path)


def test_preprocess_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--eval_json", str(FIXTURE), "--preprocessed_data_dir", str(tmp_path)]
    assert preprocess_data.main(args) == 0
    assert "6 prompts" in capsys.readouterr().out
    assert len(GptjSamples.load(tmp_path)) == 6
    # a cnn_eval.json with the wrong number of records is flagged (QSL size 13368)
    short = tmp_path / "data" / "cnn-daily-mail" / "cnn_eval.json"
    short.parent.mkdir(parents=True)
    short.write_bytes(FIXTURE.read_bytes())
    assert preprocess_data.main(["--data_dir", str(tmp_path / "data"), "--preprocessed_data_dir", str(tmp_path)]) == 1
    assert "13368" in capsys.readouterr().err
    assert preprocess_data.main(["--data_dir", str(tmp_path / "nothing")]) == 2
    assert "make download_data BENCHMARKS=gptj" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------------
# Synthetic samples


def test_synthetic_samples(tokenizer: GptjTokenizer) -> None:
    samples = GptjSamples.synthetic(3000, seed=7)
    assert samples.is_synthetic and samples.lengths.dtype == np.int32 and samples.input_ids.dtype == np.int32
    stats = samples.describe_lengths()
    assert SYNTH_MEAN_LENGTH_BAND[0] <= stats["mean"] <= SYNTH_MEAN_LENGTH_BAND[1], stats
    assert stats["max"] <= 1919 and stats["min"] >= 64 and 0.005 < np.mean(samples.lengths == 1919) < 0.08
    again = GptjSamples.synthetic(3000, seed=7)
    assert np.array_equal(samples.input_ids, again.input_ids)
    assert not np.array_equal(samples.lengths, GptjSamples.synthetic(3000, seed=8).lengths)
    prompt = samples.prompt(0)
    assert int(prompt.max()) < 50256 and not np.any(samples.input_ids[0, len(prompt) :] != 50256)
    text = tokenizer.decode(prompt)
    assert text.startswith("Below is an instruction") and text.endswith("\n\n### Response:")
    before, after = build_prompt({"instruction": INSTRUCTION, "input": "|"}).split("|")
    assert len(tokenizer.encode(before)) + len(tokenizer.encode(after)) == SYNTH_TEMPLATE_TOKENS


def test_synthetic_length_scale() -> None:
    tiny = GptjSamples.synthetic(500, seed=1, length_scale=0.05)
    assert tiny.max_length <= 96 and int(tiny.lengths.min()) >= 1
    assert 35 <= tiny.describe_lengths()["mean"] <= 55
    assert [len(p) for p in tiny.gather(range(10))] == tiny.lengths[:10].tolist()
    assert GptjSamples.synthetic(0).describe_lengths()["count"] == 0
    with pytest.raises(ValueError):
        GptjSamples.synthetic(10, length_scale=0)


# ----------------------------------------------------------------------------------------------------------------------
# A local HTTP server standing in for MLCommons' R2 storage


@dataclass
class ServerState:
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    drop_once: set[str] = field(default_factory=set)  # paths whose next response is cut in half
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            range_header = self.headers.get("Range")
            with state.lock:
                state.requests.append((self.path, range_header))
                data = state.files.get(self.path)
                drop = self.path in state.drop_once
                state.drop_once.discard(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
            if match and int(match.group(1)) < len(data):
                start = int(match.group(1))
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if drop else body)

    return Handler


class FakeR2:
    """Serves ``/metadata/<name>.uri`` + ``.md5`` and the files under ``/bucket/<name>/``, like inference.mlcommons-
    storage.org."""

    def __init__(self, state: ServerState, port: int) -> None:
        self.state = state
        self.base = f"http://127.0.0.1:{port}"

    def publish(self, name: str, files: dict[str, bytes], md5_override: dict[str, str] | None = None) -> str:
        self.state.files[f"/metadata/{name}.uri"] = f"{self.base}/bucket/{name}\n".encode()
        lines = []
        for path, data in files.items():
            md5 = (md5_override or {}).get(path, hashlib.md5(data).hexdigest())
            lines.append(f"{md5}  ./{path}")
            self.state.files[f"/bucket/{name}/{path}"] = data
        self.state.files[f"/metadata/{name}.md5"] = ("\n".join(lines) + "\n").encode()
        return f"{self.base}/metadata/{name}.uri"

    def paths_requested(self) -> list[str]:
        return [path for path, _ in self.state.requests]


@pytest.fixture
def r2() -> Iterator[FakeR2]:
    state = ServerState()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    watchdog = threading.Timer(60.0, httpd.shutdown)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield FakeR2(state, httpd.server_address[1])
    finally:
        watchdog.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


FAST = {"backoff_s": 0.01, "timeout_s": 5.0, "progress": False}


# ----------------------------------------------------------------------------------------------------------------------
# R2 metadata and the model download


def test_r2_metadata_parsing() -> None:
    assert metadata_urls("https://inference.mlcommons-storage.org/metadata/gpt-j-model-checkpoint.uri") == (
        "gpt-j-model-checkpoint",
        "https://inference.mlcommons-storage.org/metadata/gpt-j-model-checkpoint.uri",
        "https://inference.mlcommons-storage.org/metadata/gpt-j-model-checkpoint.md5",
    )
    with pytest.raises(ValueError, match=".uri"):
        metadata_urls("https://example.org/metadata/model.md5")
    assert parse_uri_text("https://host/gpt-j\n", "x") == "https://host/gpt-j"
    with pytest.raises(DownloadError, match="Cloudflare Access"):
        parse_uri_text("<html><body>Sign in</body></html>", "x")
    a, b = "0123456789abcdef0123456789abcdef", "F" * 32
    text = f"{a}  ./checkpoint-final/config.json\r\n\n{b} *checkpoint-final/pytorch_model-00001-of-00003.bin\n"
    assert parse_md5_text(text, "x") == (
        R2Entry("checkpoint-final/config.json", a),
        R2Entry("checkpoint-final/pytorch_model-00001-of-00003.bin", b.lower()),
    )
    for bad in (f"{a}  ../etc/passwd", f"{a}  /abs/path", "not a line", f"{a}  x\n{a}  x", ""):
        with pytest.raises(DownloadError):
            parse_md5_text(bad, "x")
    listing = R2Listing("n", "https://host/base/", (R2Entry("dir/a b.json", a),))
    assert listing.url_of(listing.entries[0]) == "https://host/base/dir/a%20b.json"
    assert str(checkpoint_path("checkpoint-final/config.json")) == "checkpoint-final/config.json"
    assert str(checkpoint_path("gpt-j/checkpoint-final/config.json")) == "checkpoint-final/config.json"
    assert str(checkpoint_path("config.json")) == "checkpoint-final/config.json"


def _fake_checkpoint() -> dict[str, bytes]:
    shards = [f"pytorch_model-0000{k}-of-00003.bin" for k in (1, 2, 3)]
    index = {"metadata": {"total_size": 3}, "weight_map": {f"w{k}": shard for k, shard in enumerate(shards)}}
    files = {"checkpoint-final/config.json": json.dumps({"model_type": "gptj", "vocab_size": 50401}).encode()}
    files["checkpoint-final/pytorch_model.bin.index.json"] = json.dumps(index).encode()
    for k, shard in enumerate(shards):
        files[f"checkpoint-final/{shard}"] = bytes([k + 1]) * (200_000 + k)
    return files


def test_model_download_verifies_resumes_and_is_idempotent(r2: FakeR2, tmp_path: Path) -> None:
    files = _fake_checkpoint()
    uri = r2.publish("gpt-j-model-checkpoint", files)
    target = tmp_path / "GPTJ-6B" / "checkpoint-final"
    shard = "pytorch_model-00002-of-00003.bin"
    target.mkdir(parents=True)
    (target / (shard + ".part")).write_bytes(files[f"checkpoint-final/{shard}"][:50_000])  # an interrupted run
    r2.state.drop_once.add("/bucket/gpt-j-model-checkpoint/checkpoint-final/pytorch_model-00001-of-00003.bin")
    paths = download_model.download_gptj_model(tmp_path, uri, **FAST)
    assert sorted(paths) == sorted(tmp_path / "GPTJ-6B" / name for name in files)
    for name, data in files.items():
        assert (tmp_path / "GPTJ-6B" / name).read_bytes() == data
    assert ("/bucket/gpt-j-model-checkpoint/checkpoint-final/" + shard, "bytes=50000-") in r2.state.requests
    assert len(check_checkpoint(target)) == 3
    assert (tmp_path / "GPTJ-6B" / "gpt-j-model-checkpoint.md5").is_file()  # kept, as mlc-r2-downloader does
    r2.state.requests.clear()
    download_model.download_gptj_model(tmp_path, uri, **FAST)
    assert r2.state.requests == []  # everything present and verified: no network


def test_model_checksum_mismatch_then_clean_restart(r2: FakeR2, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = _fake_checkpoint()
    bad = "checkpoint-final/pytorch_model-00003-of-00003.bin"
    uri = r2.publish("gpt-j-model-checkpoint", files, md5_override={bad: "0" * 32})
    assert download_model.main(["--model_dir", str(tmp_path), "--uri", uri]) == 1
    err = capsys.readouterr().err
    assert "pytorch_model-00003-of-00003.bin" in err and "0" * 32 in err
    assert "make download_model BENCHMARKS=gptj" in err
    root = tmp_path / "GPTJ-6B" / "checkpoint-final"
    assert not (root / "pytorch_model-00003-of-00003.bin").exists()
    assert (root / "pytorch_model-00003-of-00003.bin.corrupt").read_bytes() == files[bad]
    # upstream fixes its listing: with fresh metadata the same command completes, keeping the verified files
    uri = r2.publish("gpt-j-model-checkpoint", files)
    r2.state.requests.clear()
    assert download_model.main(["--model_dir", str(tmp_path), "--uri", uri, "--refresh_metadata"]) == 0
    fetched = [p for p in r2.paths_requested() if p.startswith("/bucket/")]
    assert fetched == ["/bucket/gpt-j-model-checkpoint/" + bad]
    assert (root / "pytorch_model-00003-of-00003.bin").read_bytes() == files[bad]


def test_model_download_errors_name_the_fix(r2: FakeR2, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = _fake_checkpoint()
    del files["checkpoint-final/pytorch_model-00001-of-00003.bin"]  # the index names a shard nobody lists
    uri = r2.publish("gpt-j-model-checkpoint", files)
    assert download_model.main(["--model_dir", str(tmp_path), "--uri", uri]) == 1
    assert "lacks pytorch_model-00001-of-00003.bin" in capsys.readouterr().err
    r2.state.files["/metadata/login.uri"] = b"<!DOCTYPE html><title>Cloudflare Access</title>"
    assert download_model.main(["--model_dir", str(tmp_path / "b"), "--uri", f"{r2.base}/metadata/login.uri"]) == 1
    assert "mlc-r2-downloader.sh" in capsys.readouterr().err
    assert not (tmp_path / "b" / "GPTJ-6B" / "login.uri").exists()  # a bad metadata copy is not kept
    assert download_model.main(["--model_dir", str(tmp_path / "c"), "--uri", f"{r2.base}/metadata/none.uri"]) == 1
    assert "HTTP 404" in capsys.readouterr().err
    assert download_model.main(["--model_dir", str(tmp_path), "--uri", uri, "--list"]) == 0
    assert "checkpoint-final/config.json" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------------
# The CNN/DailyMail download


def _llama_format(records: list[dict]) -> bytes:
    """The records as MLCommons' llama3.1-8b cnn_eval.json holds them (Llama prompt and token ids included)."""
    template = "Summarize the following news article in 128 tokens. ...\n\nArticle:\n{input}\n\nSummary:"
    rows = [
        {"instruction": {"llama": template}, "input": r["input"], "tok_input": [128000, 9, 9], "output": r["output"]}
        for r in records
    ]
    return json.dumps(rows, indent=4, ensure_ascii=False).encode("utf-8")


def test_data_download_converts_verifies_and_locks(r2: FakeR2, tmp_path: Path, records: list[dict]) -> None:
    uri = r2.publish("llama3-1-8b-cnn-eval", {"cnn_eval.json": _llama_format(records)})
    r2.state.drop_once.add("/bucket/llama3-1-8b-cnn-eval/cnn_eval.json")  # the connection drops once: resumed
    path = download_data.download_cnn_dailymail(tmp_path, uri, expected_count=len(records), **FAST)
    assert path == tmp_path / "cnn-daily-mail" / "cnn_eval.json"
    assert load_eval_records(path) == records  # the reference's GPT-J records, in order
    assert path.read_text(encoding="utf-8") == json.dumps(records, indent=4, ensure_ascii=False)
    lock = json.loads((path.parent / download_data.LOCK_FILE).read_text())
    assert lock["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and lock["count"] == len(records)
    assert lock["source_md5"] == hashlib.md5(_llama_format(records)).hexdigest()
    r2.state.requests.clear()
    assert download_data.download_cnn_dailymail(tmp_path, uri, expected_count=len(records), **FAST) == path
    assert r2.state.requests == []  # verified against the lock: no network
    # the output is damaged: rebuilt from the kept source, still without the network, and it matches the lock again
    path.write_text("[]")
    assert download_data.download_cnn_dailymail(tmp_path, uri, expected_count=len(records), **FAST) == path
    assert load_eval_records(path) == records and r2.state.requests == []


def test_data_download_checks_count_md5_and_lock(
    r2: FakeR2, tmp_path: Path, records: list[dict], capsys: pytest.CaptureFixture
) -> None:
    uri = r2.publish("llama3-1-8b-cnn-eval", {"cnn_eval.json": _llama_format(records)})
    assert download_data.main(["--data_dir", str(tmp_path), "--uri", uri]) == 1  # 6 records, not 13368
    err = capsys.readouterr().err
    assert f"6 records, expected {CNN_DAILYMAIL_VALIDATION_SAMPLES}" in err
    assert not (tmp_path / "cnn-daily-mail" / "cnn_eval.json").exists()
    # a file whose md5 does not match the published listing never becomes the source
    other = tmp_path / "other"
    uri = r2.publish("llama3-1-8b-cnn-eval", {"cnn_eval.json": b"[]"}, md5_override={"cnn_eval.json": "1" * 32})
    with pytest.raises(DownloadError, match="1" * 32):
        download_data.download_cnn_dailymail(other, uri, expected_count=len(records), **FAST)
    # different data later than the locked first download: refused, with the way out named
    locked = tmp_path / "locked"
    download_data.download_cnn_dailymail(locked, source_json=FIXTURE, expected_count=len(records))
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(records[:5] + [{**records[5], "output": "Another summary ."}]))
    with pytest.raises(CnnDailyMailError, match="delete .*cnn_eval.lock.json"):
        download_data.download_cnn_dailymail(locked, source_json=changed, expected_count=len(records))
    assert load_eval_records(locked / "cnn-daily-mail" / "cnn_eval.json") == records  # the good file is kept


def test_data_download_accepts_a_file_in_place(tmp_path: Path, records: list[dict]) -> None:
    target = tmp_path / "cnn-daily-mail" / "cnn_eval.json"
    target.parent.mkdir(parents=True)
    target.write_bytes(FIXTURE.read_bytes())  # e.g. made by the reference's download_cnndm.py
    uri = "http://127.0.0.1:9/metadata/unreachable.uri"  # never contacted
    assert download_data.download_cnn_dailymail(tmp_path, uri, expected_count=len(records)) == target
    assert target.read_bytes() == FIXTURE.read_bytes()
    lock = json.loads((target.parent / download_data.LOCK_FILE).read_text())
    assert lock["sha256"] == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------------
# The MLPerf calibration set (made-up list and articles of the real formats; nothing leaves 127.0.0.1)


def _calibration_list(count: int) -> tuple[list[str], bytes]:
    ids = [hashlib.sha1(f"article {i}".encode()).hexdigest() for i in range(count)]
    return ids, ("\n".join(ids) + "\n").encode()


def test_calibration_download_checks_the_list_and_converts_the_articles(
    r2: FakeR2, tmp_path: Path, records: list[dict]
) -> None:
    ids, listing = _calibration_list(len(records))
    r2.state.files["/calibration-list.txt"] = listing
    list_url, list_sha = f"{r2.base}/calibration-list.txt", hashlib.sha256(listing).hexdigest()
    uri = r2.publish("llama3-1-8b-cnn-dailymail-calibration",
                     {"cnn_dailymail_calibration.json": _llama_format(records)})
    kwargs = {"list_url": list_url, "list_sha256": list_sha, "expected_count": len(records), **FAST}
    path = calibration_data.download_calibration(tmp_path, uri, **kwargs)
    assert path == tmp_path / "cnn-daily-mail" / CALIBRATION_FILE
    assert load_eval_records(path) == records  # GPT-J instruction, article, highlights, in the source's order
    provenance = json.loads((path.parent / calibration_data.PROVENANCE_FILE).read_text())
    assert provenance["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert provenance["calibration_list_sha256"] == list_sha and provenance["ids_checked"] is False
    r2.state.requests.clear()
    assert calibration_data.download_calibration(tmp_path, uri, **kwargs) == path
    assert r2.state.requests == []  # verified against its provenance: no network
    # A list other than the pinned one is refused by its checksum, before any article is read.
    with pytest.raises(DownloadError, match="sha256"):
        calibration_data.download_calibration(tmp_path / "other", uri, **{**kwargs, "list_sha256": "0" * 64})
    # A local file whose records carry ids: they must be the list's, in order.
    source = tmp_path / "with_ids.json"
    source.write_text(json.dumps([{**r, "id": i} for r, i in zip(records, ids, strict=True)]))
    local = tmp_path / "local"
    calibration_data.download_calibration(local, source_json=source, **kwargs)
    assert json.loads((local / "cnn-daily-mail" / calibration_data.PROVENANCE_FILE).read_text())["ids_checked"]
    source.write_text(json.dumps([{**r, "id": i} for r, i in zip(records, reversed(ids), strict=True)]))
    with pytest.raises(CnnDailyMailError, match="differ from the MLPerf calibration list"):
        calibration_data.download_calibration(local, source_json=source, **kwargs)
    with pytest.raises(CnnDailyMailError, match="expected 7 distinct"):
        calibration_data.download_calibration(tmp_path / "n", source_json=source, **{**kwargs, "expected_count": 7})


def test_calibration_list_is_pinned_to_the_mlcommons_file() -> None:
    assert calibration_data.CALIBRATION_LIST_URL.startswith(
        f"https://raw.githubusercontent.com/mlcommons/inference/{calibration_data.CALIBRATION_LIST_COMMIT}/")
    assert calibration_data.CALIBRATION_LIST_URL.endswith("/calibration/CNNDailyMail/calibration-list.txt")
    assert re.fullmatch(r"[0-9a-f]{64}", calibration_data.CALIBRATION_LIST_SHA256)


def test_preprocess_tokenizes_the_calibration_set_and_engines_calibrate_on_it(tmp_path: Path) -> None:
    from code.gptj.backends.inflight_engine import calibration_prompts, calibration_source

    data = tmp_path / "data" / "cnn-daily-mail"
    data.mkdir(parents=True)
    (data / CALIBRATION_FILE).write_bytes(FIXTURE.read_bytes())  # 6 made-up articles stand in for the 1,000
    pre = tmp_path / "pre"
    args = ["--eval_json", str(FIXTURE), "--data_dir", str(tmp_path / "data"), "--preprocessed_data_dir", str(pre)]
    assert preprocess_data.main(args) == 0
    calibration_dir = pre / CALIBRATION_TOKENIZED_SUBDIR
    samples = GptjSamples.load(calibration_dir)
    assert len(samples) == 6 and samples.manifest["dataset"].endswith("the MLPerf GPT-J calibration list")
    validation = GptjSamples.load(pre)
    assert [samples.prompt(i).tolist() for i in range(6)] == [validation.prompt(i).tolist() for i in range(6)]
    assert calibration_source(0, calibration_dir).startswith("mlperf:")
    assert calibration_source(0, tmp_path / "absent").startswith("synthetic:")
    assert len(calibration_prompts(0, calibration_dir).prompts) == 6
