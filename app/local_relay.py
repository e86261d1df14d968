"""'A local swarm on this computer': a ``sapo-relay`` child the app starts, owns and stops.

It listens on 127.0.0.1 only, so nothing outside this computer can reach it; other nodes
on the same machine (another app, a terminal node) join it with the URL it shows.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from app.guiprocess import GuiProcess
from app.outcome import Outcome

READY_TIMEOUT_MS = 30_000


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class LocalRelay(QObject):
    """Signals: ``ready`` (its ws:// URL) once it accepts connections, ``failed`` (an Outcome)."""

    ready = Signal(str)
    failed = Signal(object)

    def __init__(self, port: int, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.port = port
        self.data_dir = data_dir
        self.url = f"ws://127.0.0.1:{port}"
        self.process = GuiProcess("The local swarm", self)
        self.process.finished.connect(self._on_finished)
        self._poll = QTimer(self)
        self._poll.setInterval(200)
        self._poll.timeout.connect(self._check)
        self._waited = 0
        self._is_ready = False

    @property
    def is_ready(self) -> bool:
        return self._is_ready and self.process.running

    def start(self) -> None:
        if self.process.running:
            if self._is_ready:
                self.ready.emit(self.url)
            return
        if port_open(self.port):  # someone else listens there: most likely our relay from another app
            self.failed.emit(Outcome("The local swarm", start_error=f"port {self.port} on this computer is "
                                     "already in use; choose another port in Preferences"))
            return
        self._waited, self._is_ready = 0, False
        self.process.start(sys.executable, ["-m", "relay", "--host", "127.0.0.1", "--port", str(self.port),
                                            "--data-dir", str(self.data_dir), "--log-level", "WARNING"])
        self._poll.start()

    def _check(self) -> None:
        self._waited += self._poll.interval()
        if not self.process.running:
            self._poll.stop()
            return
        if port_open(self.port):
            self._poll.stop()
            self._is_ready = True
            self.ready.emit(self.url)
        elif self._waited > READY_TIMEOUT_MS:
            self._poll.stop()
            self.process.kill()

    def _on_finished(self, outcome: Outcome) -> None:
        self._poll.stop()
        self._is_ready = False
        if not outcome.stopped_by_user:
            self.failed.emit(outcome)

    def stop(self, wait_ms: int = 5000) -> None:
        if self.process.running:
            self.process.terminate()
            if not self.process.wait(wait_ms):
                self.process.kill()
                self.process.wait(2000)
