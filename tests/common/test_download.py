"""Tests of the resumable, verified downloader and the BERT download modules against a local HTTP server.

The server runs on 127.0.0.1 (port 0) in a daemon thread, is shut down by the fixture, and by a watchdog timer should a
test hang, so the suite never reaches the network and never leaves a thread behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from code.bert import download_data, download_model
from code.common import download as dl
from code.common.download import DownloadError, RemoteFile, download, file_checksum

SIZE = 300 * 1024


@dataclass
class ServerState:
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    bytes_sent: int = 0
    ignore_range: bool = False
    drop_once: set[str] = field(default_factory=set)  # paths whose next response is cut in half
    always_drop: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Server:
    def __init__(self, state: ServerState, port: int) -> None:
        self.state = state
        self.base = f"http://127.0.0.1:{port}"

    def add(self, name: str, data: bytes) -> str:
        self.state.files["/" + name] = data
        return f"{self.base}/{name}"


def _handler(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: closing it is how a response ends

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

        def do_GET(self) -> None:
            range_header = self.headers.get("Range")
            with state.lock:
                state.requests.append((self.path, range_header))
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
            if match and not state.ignore_range:
                start = int(match.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            drop = state.always_drop or self.path in state.drop_once
            state.drop_once.discard(self.path)
            if drop:
                body = body[: len(body) // 2]  # promise everything, send half, then hang up
            self.wfile.write(body)
            with state.lock:
                state.bytes_sent += len(body)

    return Handler


@pytest.fixture
def server() -> Iterator[Server]:
    state = ServerState()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    watchdog = threading.Timer(60.0, httpd.shutdown)  # bound the server's life even if a test hangs
    watchdog.daemon = True
    watchdog.start()
    try:
        yield Server(state, httpd.server_address[1])
    finally:
        watchdog.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _get(url: str, dest: Path, data: bytes, **kwargs: object) -> Path:
    return download(
        url,
        dest,
        md5=hashlib.md5(data).hexdigest(),
        sha256=hashlib.sha256(data).hexdigest(),
        backoff_s=0.01,
        timeout_s=5.0,
        progress=False,
        **kwargs,  # type: ignore[arg-type]
    )


def test_fresh_download_is_verified_and_atomic(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("a.bin", data)
    dest = tmp_path / "sub" / "a.bin"
    assert _get(url, dest, data, size=len(data)) == dest
    assert dest.read_bytes() == data
    assert not (tmp_path / "sub" / "a.bin.part").exists()
    assert server.state.requests == [("/a.bin", None)]


def test_resume_from_part_uses_range(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("b.bin", data)
    dest = tmp_path / "b.bin"
    done = 100 * 1024
    (tmp_path / "b.bin.part").write_bytes(data[:done])
    _get(url, dest, data)
    assert dest.read_bytes() == data
    assert server.state.requests == [("/b.bin", f"bytes={done}-")]
    assert server.state.bytes_sent == SIZE - done  # the first 100 KB were not fetched again


def test_server_ignoring_range_restarts_cleanly(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("c.bin", data)
    server.state.ignore_range = True
    dest = tmp_path / "c.bin"
    (tmp_path / "c.bin.part").write_bytes(b"\0" * 1000)  # a wrong prefix: appending to it would fail the checksum
    _get(url, dest, data)
    assert dest.read_bytes() == data
    assert server.state.requests == [("/c.bin", "bytes=1000-")]
    assert server.state.bytes_sent == SIZE


def test_dropped_connection_is_retried_and_resumed(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("d.bin", data)
    server.state.drop_once.add("/d.bin")
    dest = tmp_path / "d.bin"
    _get(url, dest, data)
    assert dest.read_bytes() == data
    assert [r[1] for r in server.state.requests] == [None, f"bytes={SIZE // 2}-"]
    assert server.state.bytes_sent == SIZE


def test_persistent_failure_gives_up_and_keeps_part(server: Server, tmp_path: Path) -> None:
    # a one-byte file cut in half arrives as nothing: every attempt fails without progress
    data = b"x"
    url = server.add("e.bin", data)
    server.state.always_drop = True
    dest = tmp_path / "e.bin"
    with pytest.raises(DownloadError, match="giving up"):
        _get(url, dest, data, retries=2)
    assert not dest.exists()
    assert len(server.state.requests) == 3  # the first attempt and two retries


def test_checksum_mismatch_moves_bytes_aside(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("f.bin", data)
    dest = tmp_path / "f.bin"
    wrong = "0" * 32
    with pytest.raises(DownloadError) as info:
        download(url, dest, md5=wrong, hint="delete it and re-run `make download_data`", progress=False)
    message = str(info.value)
    assert str(dest) in message and wrong in message and hashlib.md5(data).hexdigest() in message
    assert "make download_data" in message
    assert not dest.exists()
    assert not (tmp_path / "f.bin.part").exists()
    assert (tmp_path / "f.bin.corrupt").read_bytes() == data


def test_existing_good_file_makes_no_request(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("g.bin", data)
    dest = tmp_path / "g.bin"
    dest.write_bytes(data)
    _get(url, dest, data)
    assert server.state.requests == []


def test_existing_corrupt_file_is_downloaded_again(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("h.bin", data)
    dest = tmp_path / "h.bin"
    dest.write_bytes(b"garbage")
    _get(url, dest, data)
    assert dest.read_bytes() == data
    assert (tmp_path / "h.bin.corrupt").read_bytes() == b"garbage"
    assert len(server.state.requests) == 1


def test_complete_part_is_verified_without_refetching(server: Server, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    url = server.add("i.bin", data)
    dest = tmp_path / "i.bin"
    (tmp_path / "i.bin.part").write_bytes(data)
    _get(url, dest, data)  # size unknown: asks for bytes=SIZE-, the server answers 416, the part verifies
    assert dest.read_bytes() == data
    assert server.state.bytes_sent == 0


def test_not_found_fails_without_retrying(server: Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="404"):
        download(f"{server.base}/missing.bin", tmp_path / "m.bin", md5="0" * 32, progress=False)
    assert len(server.state.requests) == 1


def test_checksum_helpers(tmp_path: Path) -> None:
    data = os.urandom(3 * dl.CHUNK_BYTES + 7)  # more than one chunk
    path = tmp_path / "x"
    path.write_bytes(data)
    assert file_checksum(path) == hashlib.md5(data).hexdigest()
    assert file_checksum(path, "sha256") == hashlib.sha256(data).hexdigest()
    # A file already there that matches (checksums compared in any case) is kept without a request.
    assert download("http://127.0.0.1:9/never", path, md5=hashlib.md5(data).hexdigest().upper(), size=len(data),
                    progress=False) == path


# ----------------------------------------------------------------------------------------------------------------------
# BERT modules


def _remote(server: Server, name: str, data: bytes) -> RemoteFile:
    return RemoteFile(name=name, url=server.add(name, data), md5=hashlib.md5(data).hexdigest(), size=len(data))


def test_bert_tables_are_pinned() -> None:
    entries = [*download_data.SQUAD_FILES, *download_model.MODEL_FILES.values(), download_model.VOCAB_FILE]
    for entry in entries:
        assert entry.url.startswith("https://"), entry
        assert entry.md5 and re.fullmatch(r"[0-9a-f]{32}", entry.md5), entry
    assert "/mlcommons/inference/f576d52a5b576fef7034033da4e141a2cc745cfe/" in download_data.SQUAD_FILES[1].url


def test_bert_download_data(server: Server, tmp_path: Path, monkeypatch, capsys) -> None:
    dev, cal = b'{"version": "1.1", "data": []}', b"4547\n9556\n"
    monkeypatch.setattr(
        download_data,
        "SQUAD_FILES",
        (_remote(server, "dev-v1.1.json", dev), _remote(server, "bert_calibration_features.txt", cal)),
    )
    assert download_data.main(["--data_dir", str(tmp_path)]) == 0
    assert (tmp_path / "squad" / "dev-v1.1.json").read_bytes() == dev
    assert (tmp_path / "squad" / "bert_calibration_features.txt").read_bytes() == cal
    assert str(tmp_path / "squad" / "dev-v1.1.json") in capsys.readouterr().out
    assert download_data.main(["--data_dir", str(tmp_path)]) == 0  # second run: nothing fetched
    assert len(server.state.requests) == 2


def test_bert_download_data_failure_exits_nonzero(server: Server, tmp_path: Path, monkeypatch, capsys) -> None:
    bad = RemoteFile(name="dev-v1.1.json", url=server.add("dev-v1.1.json", b"x"), md5="0" * 32)
    monkeypatch.setattr(download_data, "SQUAD_FILES", (bad,))
    assert download_data.main(["--data_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "make download_data BENCHMARKS=bert" in err
    assert not (tmp_path / "squad" / "dev-v1.1.json").exists()


def test_bert_download_model(server: Server, tmp_path: Path, monkeypatch) -> None:
    pt, onnx, vocab = os.urandom(1000), os.urandom(2000), b"[PAD]\n[unused0]\n"
    monkeypatch.setattr(
        download_model,
        "MODEL_FILES",
        {"pytorch": _remote(server, "model.pytorch", pt), "onnx": _remote(server, "model.onnx", onnx)},
    )
    monkeypatch.setattr(download_model, "VOCAB_FILE", _remote(server, "vocab.txt", vocab))

    assert download_model.main(["--model_dir", str(tmp_path)]) == 0  # default: pytorch only
    bert = tmp_path / "bert"
    assert (bert / "model.pytorch").read_bytes() == pt
    assert (bert / "vocab.txt").read_bytes() == vocab
    assert not (bert / "model.onnx").exists()

    assert download_model.main(["--model_dir", str(tmp_path), "--formats", "pytorch, ONNX"]) == 0
    assert (bert / "model.onnx").read_bytes() == onnx
    assert [r[0] for r in server.state.requests] == ["/model.pytorch", "/vocab.txt", "/model.onnx"]

    config = json.loads((bert / "bert_config.json").read_text())
    assert config == download_model.BERT_LARGE_CONFIG
    expected = {
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
    }
    assert {k: config[k] for k in expected} == expected


def test_bert_download_model_rejects_unknown_format(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        download_model.main(["--model_dir", str(tmp_path), "--formats", "pytorch,tensorrt"])
    assert info.value.code != 0
    err = capsys.readouterr().err
    assert "tensorrt" in err and "pytorch" in err and "onnx" in err
    assert not (tmp_path / "bert").exists()


def test_download_command_prints_paths_or_one_error_line(tmp_path, capsys):
    from code.common.download import DownloadError, download_command

    assert download_command(lambda: [tmp_path / "a", tmp_path / "b"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert download_command(lambda: tmp_path / "one") == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "one")]

    def broken() -> list:
        raise DownloadError("zenodo said no; re-run make download_data")

    assert download_command(broken) == 1
    assert capsys.readouterr().err == "error: zenodo said no; re-run make download_data\n"

    def bad_value() -> list:
        raise ValueError("not caught unless asked")

    with pytest.raises(ValueError):
        download_command(bad_value)
    assert download_command(bad_value, (ValueError,)) == 1


@pytest.mark.parametrize(("module", "root", "r2"), [
    ("code.bert.download_data", "data_dir", False),
    ("code.bert.download_model", "model_dir", False),
    ("code.gptj.download_data", "data_dir", True),
    ("code.gptj.download_model", "model_dir", True),
])
def test_every_download_command_starts_from_one_parser(module, root, r2, capsys, monkeypatch):
    """The four download commands share their name, root folder and R2 metadata switch from ``download_parser``."""
    import importlib

    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps help at the terminal's width, even inside a path
    with pytest.raises(SystemExit) as done:
        importlib.import_module(module).main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0 and shown.startswith(f"usage: python -m {module} [-h] [--{root} ")
    holds, default = dl.DOWNLOAD_ROOTS[root]
    assert f"root of {holds} (default: {default}); may be a link into $MLPERF_SCRATCH_PATH" in shown
    assert ("--refresh_metadata fetch the R2 .uri/.md5 metadata again" in shown) is r2


def test_an_unknown_download_root_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="unknown download root 'weights_dir'; valid roots: data_dir, model_dir"):
        dl.download_parser("code.x.download_weights", "", "weights_dir")


@pytest.mark.parametrize("target", ["download_data", "download_model", "preprocess_data"])
def test_make_data_steps_refuse_an_unknown_benchmark_with_the_list(tmp_path, target):
    """``make download_data BENCHMARKS=resnet``: one line naming the variable and the benchmarks there are, exit 2,
    before link_dirs or any download (no build folder made)."""
    import subprocess

    from code.common.paths import REPO_ROOT

    build = tmp_path / "build"
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), target, "BENCHMARKS=bert resnet",
                           f"BUILD_DIR={build}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith('ERROR: BENCHMARKS="bert resnet": no benchmark resnet here; the benchmarks are '
                                  "bert gptj llama31: ")
    assert "No module named" not in done.stderr and not build.exists() and done.stdout == ""
