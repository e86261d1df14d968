"""engine.models.download against a local imitation of the Hugging Face Hub (127.0.0.1 only).

The server answers HEAD/GET on /{owner}/{repo}/resolve/{revision}/{filename} with the
headers huggingface_hub relies on (ETag, X-Repo-Commit, Content-Length, 206 + Content-Range
for Range requests) and its 404 error codes. Nothing here can reach a real hub: every
call gets the local endpoint and a tmp_path cache.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.models import catalog
from engine.models.download import ensure_model
from engine.errors import SapoError
from engine.models.modelfile import bundled_model_path

REPO = "sapo-test/Tiny-GGUF"
FILENAME = "tiny-f32.gguf"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_gguf_bytes(tmp: Path) -> bytes:
    p = tmp / "src.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_vocab_size(512)
    # ~64 KB of weights, so that a transfer can be cut in the middle
    w.add_tensor("token_embd.weight", np.arange(512 * 8 * 4, dtype=np.float32).reshape(512, 32))
    w.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p.read_bytes()


@dataclass
class FakeHub:
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Range
    cut_next_get_at: int | None = None  # send only this many body bytes on the next full GET
    url: str = ""


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def do_HEAD(self):
            self._serve(body=False)

        def do_GET(self):
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return self._error(404, "RepoNotFound")
            repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
            if not any(r == repo for r, _ in hub.files):
                return self._error(404, "RepoNotFound")
            data = hub.files.get((repo, filename))
            if data is None:
                return self._error(404, "EntryNotFound")
            start, status = 0, 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start = int(rng[len("bytes="):].split("-")[0])
                status = 206
            chunk = data[start:]
            self.send_response(status)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(chunk)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            if hub.cut_next_get_at is not None and status == 200:
                cut, hub.cut_next_get_at = hub.cut_next_get_at, None
                self.wfile.write(chunk[:cut])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # drop the transfer mid-body
                self.close_connection = True
                return
            self.wfile.write(chunk)

        def _error(self, code: int, error_code: str) -> None:
            self.send_response(code)
            self.send_header("X-Error-Code", error_code)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@pytest.fixture
def online(monkeypatch):
    """Offline mode off for this test only (the suite sets HF_HUB_OFFLINE=1); the hub is local."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)

    class _NoSleep:  # huggingface_hub's retry backoff would add ~20 s to the "server down" case
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(_s):
            return None

    monkeypatch.setattr(_http, "time", _NoSleep())


@pytest.fixture
def hub(tmp_path, online):
    state = FakeHub()
    state.files[(REPO, FILENAME)] = tiny_gguf_bytes(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def entry(filename: str = FILENAME, repo: str = REPO) -> catalog.CatalogEntry:
    base = catalog.by_name("smollm2-360m")
    assert base is not None
    return replace(base, name="tiny", repo_id=repo, filename=filename)


def gets(hub: FakeHub) -> list:
    return [r for r in hub.requests if r[0] == "GET"]


def test_download_then_cache_hit_without_requests(hub, tmp_path):
    cache = tmp_path / "hf-cache"
    seen: list[tuple[int, int | None]] = []
    path = ensure_model(entry(), cache_dir=cache, progress=lambda done, total: seen.append((done, total)),
                        endpoint=hub.url)
    data = hub.files[(REPO, FILENAME)]
    assert path.read_bytes() == data
    assert cache in path.parents and "models--sapo-test--Tiny-GGUF" in str(path)
    assert [m for m, _, _ in hub.requests] == ["HEAD", "GET"]
    assert seen and seen[-1] == (len(data), len(data))

    n = len(hub.requests)
    again = ensure_model(entry(), cache_dir=cache, progress=False, endpoint=hub.url)
    assert again == path and len(hub.requests) == n  # served from the cache, no request at all


def test_hf_endpoint_environment_variable(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    path = ensure_model(entry(), cache_dir=tmp_path / "c", progress=False)
    assert path.is_file() and hub.requests


def test_resume_after_dropped_transfer(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants, file_download

    monkeypatch.setattr(file_download.time, "sleep", lambda _s: None)
    # Real files are far bigger than one 10 MB read chunk; shrink the chunk so that the
    # first half of this small file is written to disk before the transfer breaks.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    size = len(hub.files[(REPO, FILENAME)])
    hub.cut_next_get_at = size // 2
    path = ensure_model(entry(), cache_dir=tmp_path / "c", progress=False, endpoint=hub.url)
    assert path.read_bytes() == hub.files[(REPO, FILENAME)]
    ranges = [r for _, _, r in gets(hub)]
    assert len(ranges) == 2 and ranges[0] is None
    resumed_at = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= size // 2  # the second GET continued from what was already on disk


def test_missing_file_is_one_line_error(hub, tmp_path):
    with pytest.raises(SapoError, match=r"could not download nope\.gguf from http://127\.0\.0\.1:\d+/sapo-test/Tiny-GGUF: file not found") as err:
        ensure_model(entry("nope.gguf"), cache_dir=tmp_path / "c", progress=False, endpoint=hub.url)
    assert "\n" not in str(err.value)


def test_missing_repo(hub, tmp_path):
    with pytest.raises(SapoError, match="repository not found"):
        ensure_model(entry(repo="sapo-test/None-GGUF"), cache_dir=tmp_path / "c", progress=False, endpoint=hub.url)


def test_server_down(online, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SapoError, match=r"could not download .*127\.0\.0\.1.*(cannot connect|could not be reached)") as err:
        ensure_model(entry(), cache_dir=tmp_path / "c", progress=False, endpoint=f"http://127.0.0.1:{port}")
    assert "\n" not in str(err.value)


def test_not_a_gguf_download_is_removed(hub, tmp_path):
    hub.files[(REPO, "bad.gguf")] = b"<html>not a model</html>"
    cache = tmp_path / "c"
    with pytest.raises(SapoError, match="unusable.*not a GGUF"):
        ensure_model(entry("bad.gguf"), cache_dir=cache, progress=False, endpoint=hub.url)
    assert not [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size == 24]


def test_offline_without_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SapoError, match="offline"):
        ensure_model(entry(), cache_dir=tmp_path / "c", progress=False, endpoint="http://127.0.0.1:9")


def test_offline_with_cache(hub, tmp_path, monkeypatch):
    cache = tmp_path / "c"
    first = ensure_model(entry(), cache_dir=cache, progress=False, endpoint=hub.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert ensure_model(entry(), cache_dir=cache, progress=False, endpoint="http://127.0.0.1:9") == first


def test_damaged_cache_entry_is_fetched_again(hub, tmp_path):
    cache = tmp_path / "c"
    path = ensure_model(entry(), cache_dir=cache, progress=False, endpoint=hub.url)
    blob = path.resolve()
    blob.write_bytes(blob.read_bytes()[:1000])  # e.g. a disk problem
    again = ensure_model(entry(), cache_dir=cache, progress=False, endpoint=hub.url)
    assert again.read_bytes() == hub.files[(REPO, FILENAME)]
    assert len(gets(hub)) == 2


def test_bundled_needs_no_download(tmp_path):
    bundled = catalog.bundled_entry()
    assert ensure_model(bundled, cache_dir=tmp_path / "c") == bundled_model_path()
    assert not (tmp_path / "c").exists()


def test_local_entry(tmp_path):
    from engine.models.modelfile import inspect_gguf

    p = tmp_path / "local.gguf"
    p.write_bytes(tiny_gguf_bytes(tmp_path))
    local = catalog.entry_from_gguf(inspect_gguf(p))
    assert ensure_model(local) == p.resolve()
