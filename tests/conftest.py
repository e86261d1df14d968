"""Shared fixtures: the real bundled model, its working copy (Q8_0, as weights = auto makes it), one llama.cpp
context; Gemma 3 270M."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.threads import THREADS

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# torch in this process (trainers, adapters) takes its threads from here when it is imported: under xdist, a
# worker's share of the cores, not all of them (tests/threads.py).
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a model hub
# Derived files (GGUF metadata, working copies) of tests that do not name a cache go here, not to the user's cache.
# Each process (an xdist worker) makes its own and removes it when it exits: hundreds of MB each.
if "SAPO_CACHE_DIR" not in os.environ:
    os.environ["SAPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="sapo-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SAPO_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def bundled_gguf() -> Path:
    from engine.models.modelfile import bundled_model_path

    return bundled_model_path()


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Requantized GGUFs and dequantized torch weights, shared by the session's tests."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def working_gguf(bundled_gguf: Path, model_cache: Path) -> Path:
    from engine.models.working_copy import working_gguf as make

    return make(bundled_gguf, "auto", model_cache)


@pytest.fixture(scope="session")
def llm(working_gguf: Path):
    from engine.sampling.llm import LlamaModel

    model = LlamaModel(working_gguf, n_ctx=4096, n_seq_max=16, threads=THREADS)
    yield model
    model.close()


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """Gemma 3 270M (base, Q4_K_M), a second model family: never bundled, fetched for tests only.

    scripts/test-fixtures.sh (run by `make test`) fetches, joins and hash-checks it into a cache
    folder once; here it is a no-op then, or does the fetch when the tests run on their own.
    """
    script = Path(__file__).resolve().parents[1] / "scripts" / "test-fixtures.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHON": sys.executable})
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"the Gemma test fixture could not be fetched ({script.name}): {reason}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def redis_server(tmp_path: Path):
    """A real redis-server on 127.0.0.1 (no persistence), stopped after the test."""
    from redis_server import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    """The real main window, offscreen, with its settings and data under tmp_path; its engine and local
    relay stopped afterwards (the app tests that script an engine child share it)."""
    from app.settings import AppSettings
    from app.window import MainWindow

    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # the login entry (app/autostart.py), never the real one
    w = MainWindow(AppSettings(data_dir=str(tmp_path / "data")))
    qtbot.addWidget(w)
    yield w
    if w.engine.running:
        w.engine._proc.kill()
        w.engine._proc.wait(5000)
    if w.relay is not None:
        w.relay.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with real-model tests (marked slow) first, each file's tests kept together and in order.

    `make test` runs on two workers, a file to a worker (pytest-xdist's loadfile): a long file handed out
    last would leave one core busy alone at the end. Keeping a file together keeps its module fixtures single.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: within a file, order is unchanged
