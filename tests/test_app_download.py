"""The wizard's download step against a local imitation of the Hub (127.0.0.1): progress, and cancel."""

from __future__ import annotations

import socket
import threading

import pytest

from test_download import hub, online, tiny_gguf_bytes  # noqa: F401 - fixtures

REPO, FILE = "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF", "smollm2-360m-instruct-q8_0.gguf"  # the catalog's


@pytest.fixture
def downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hub cache, for the child too
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    from app.engine_tasks import ModelDownload

    return ModelDownload()


def test_download_reports_progress_and_lands_in_the_cache(qtbot, hub, tmp_path, monkeypatch, downloads):  # noqa: F811
    data = tiny_gguf_bytes(tmp_path)
    hub.files[(REPO, FILE)] = data
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    seen: list[tuple[int, int]] = []
    downloads.progress.connect(lambda done, total: seen.append((done, total)))
    with qtbot.wait_signal(downloads.done, timeout=120_000) as blocker:
        downloads.start("smollm2-360m")
    assert blocker.args == [True, "Downloaded."]
    assert seen and seen[-1] == (len(data), len(data))
    cached = list((tmp_path / "hf").rglob(FILE))
    assert cached and cached[0].read_bytes() == data


def test_a_missing_file_is_a_sentence(qtbot, hub, monkeypatch, downloads):  # noqa: F811
    monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the hub has no such repo
    with qtbot.wait_signal(downloads.done, timeout=120_000) as blocker:
        downloads.start("smollm2-360m")
    ok, sentence = blocker.args
    assert not ok and sentence.startswith("The download stopped: could not download smollm2-360m-instruct-q8_0.gguf")


def test_cancel_ends_a_download_that_hangs(qtbot, online, monkeypatch, downloads):  # noqa: F811
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")  # accepts, never answers
    try:
        downloads.start("smollm2-360m")
        qtbot.wait_until(lambda: bool(accepted), timeout=120_000)
        with qtbot.wait_signal(downloads.done, timeout=20_000) as blocker:
            downloads.cancel()
        assert blocker.args == [False, "Download cancelled."]
        assert not downloads.process.running
    finally:
        silent.close()
        for conn in accepted:
            conn.close()
