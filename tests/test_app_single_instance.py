"""One app per volunteer: a second launch (the real ``python -m app``) hands its request to the first and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app.single_instance import LOCK_NAME, claim, holder_pid  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _env(config: Path) -> dict[str, str]:
    return {**os.environ, "SAPO_CONFIG_DIR": str(config), "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}


def _second_launch(qtbot, primary, config: Path, *args: str) -> tuple[subprocess.CompletedProcess, list]:
    """``python -m app ARGS`` while this process is the running app: what it said, and what reached us."""
    proc = subprocess.Popen([sys.executable, "-m", "app", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(config), cwd=ROOT)
    with qtbot.waitSignal(primary.request, timeout=60_000) as got:
        pass
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), got.args


def test_a_second_launch_brings_the_running_app_forward(qtbot, tmp_path):
    from wire.invite import Invite, format_invite

    config = tmp_path / "config"
    primary = claim(config)
    assert primary is not None
    try:
        assert claim(config) is None  # not twice, even from this process
        done, request = _second_launch(qtbot, primary, config)
        assert done.returncode == 0, done.stderr
        assert "already running" in done.stdout and request == ["show", ""]
        link = format_invite(Invite(relays=["ws://127.0.0.1:8765"], swarm="sums", manifest_digest="e" * 64))
        done, request = _second_launch(qtbot, primary, config, link)  # an invite clicked while the app runs
        assert done.returncode == 0 and request == ["join", link]
        done, request = _second_launch(qtbot, primary, config, "--setup")
        assert done.returncode == 0 and request == ["setup", ""]
        # Nothing else was written: the second launch neither made settings nor started anything.
        assert sorted(p.name for p in config.iterdir()) == [LOCK_NAME]
    finally:
        primary.release()
    again = claim(config)  # released: the next launch is the app
    assert again is not None
    again.release()


def test_a_running_app_that_does_not_answer_is_named_in_one_line(tmp_path):
    from PySide6.QtCore import QLockFile

    config = tmp_path / "config"
    config.mkdir()
    lock = QLockFile(str(config / LOCK_NAME))  # held, but nobody listens: a hung app
    assert lock.tryLock(0)
    try:
        done = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True, env=_env(config),
                              cwd=ROOT, timeout=120)
    finally:
        lock.unlock()
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("sapo: error: SAPO Swarm is already running") and f"process {os.getpid()}" in lines[-1]
    assert "Traceback" not in done.stderr


def test_a_crashed_apps_lock_and_socket_are_taken_over(qtbot, tmp_path):
    config = tmp_path / "config"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from PySide6.QtCore import QCoreApplication\nfrom app.single_instance import claim\n"
         "app = QCoreApplication([])\np = claim(Path(sys.argv[1]))\nprint('held', flush=True)\ntime.sleep(600)",
         str(config)], stdout=subprocess.PIPE, text=True, env=_env(config), cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert claim(config) is None and holder_pid(config) == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    time.sleep(0.1)
    primary = claim(config)  # the dead one's lock is stale by its pid, its socket file is removed
    assert primary is not None
    try:
        done, request = _second_launch(qtbot, primary, config)
        assert done.returncode == 0 and request == ["show", ""]
    finally:
        primary.release()


def test_the_window_takes_a_request(window, monkeypatch):
    calls = []
    monkeypatch.setattr(window, "run_setup", lambda invite=None: calls.append(invite))
    window.hide()
    window.handle_request("show", "")
    assert window.isVisible() and calls == []
    window.handle_request("join", "sapo-swarm://join?x")
    window.handle_request("setup", "")
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        QApplication.processEvents()
    assert calls == ["sapo-swarm://join?x", None]


def test_a_local_client_that_never_ends_its_line_is_cut_off(qtbot, tmp_path):
    """Another program of this user's, speaking raw bytes: 1 MB without a newline is dropped past MAX_LINE, says
    nothing to the app, and the next launch is heard as usual."""
    from app.single_instance import MAX_LINE, server_name

    config = tmp_path / "config"
    primary = claim(config)
    assert primary is not None
    got = []
    primary.request.connect(lambda c, a: got.append((c, a)))
    flood = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom PySide6.QtCore import QCoreApplication\n"
         "from PySide6.QtNetwork import QLocalSocket\napp = QCoreApplication([])\ns = QLocalSocket()\n"
         "s.connectToServer(sys.argv[1])\nassert s.waitForConnected(5000)\nsent = 0\n"
         "while s.state() == QLocalSocket.LocalSocketState.ConnectedState and sent < 2**20:\n"
         "    sent += s.write(b'x' * 4096)\n    s.waitForBytesWritten(1000)\n"
         "s.waitForDisconnected(5000)\nprint(sent, s.state() == QLocalSocket.LocalSocketState.UnconnectedState)",
         server_name(config)], stdout=subprocess.PIPE, text=True, env=_env(config), cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while flood.poll() is None and time.monotonic() < deadline:
            qtbot.wait(20)
        sent, cut = flood.stdout.read().split()
        assert cut == "True" and int(sent) < 2**20  # hung up on, before the megabyte was through
        assert int(sent) > MAX_LINE and got == [] and primary._clients == []
        done, request = _second_launch(qtbot, primary, config)
        assert done.returncode == 0 and request == ["show", ""]
    finally:
        flood.kill()
        primary.release()
