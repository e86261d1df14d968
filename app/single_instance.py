"""One app per volunteer: a second launch hands its request to the running one and exits.

A volunteer clicks the launcher while the app sits in the tray, or clicks an invite link while it runs. A second
app would start a second engine on the same data dir (refused by the engine's lock, engine/locks.py, so the
second window only shows an error) and put a second icon in the tray. Instead the first app holds a ``QLockFile``
in its config dir (a crashed app's lock file stays behind, and Qt takes it over once its pid is gone) and listens
on a ``QLocalServer`` named after that dir, open to this user alone; a later launch sends one line, ``show``,
``setup`` or ``join <link>``, and exits. Qt does the locking and the socket; what is written here is the exchange.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

LOCK_NAME = "app.lock"
MAX_LINE = 8192  # an invite link is a few hundred bytes; anything longer is not from us
WAIT_MS = 3000


def server_name(config_dir: Path) -> str:
    """A name per config dir (so per user, and per test), short enough for a Unix socket path."""
    return "sapo-swarm-" + hashlib.sha256(str(config_dir.resolve()).encode()).hexdigest()[:16]


class Primary(QObject):
    """The running app's side: holds the lock, and turns each later launch's line into ``request``."""

    request = Signal(str, str)  # command ("show", "setup" or "join"), its argument ("" or the link)

    def __init__(self, lock: QLockFile, name: str) -> None:
        super().__init__()
        self._lock = lock
        self._clients: list[QLocalSocket] = []  # connected launches, until each has sent its line
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        QLocalServer.removeServer(name)  # a crashed app's socket file: the lock says no app is using it
        if not self._server.listen(name):
            raise OSError(f"cannot listen on {name}: {self._server.errorString()}")
        self._server.newConnection.connect(self._accept)

    def _accept(self) -> None:
        while (sock := self._server.nextPendingConnection()) is not None:
            self._clients.append(sock)
            sock.readyRead.connect(self._ready)
            self._read(sock)

    def _ready(self) -> None:
        sock = self.sender()
        if isinstance(sock, QLocalSocket):
            self._read(sock)

    def _read(self, sock: QLocalSocket) -> None:
        if not sock.canReadLine():
            if sock.bytesAvailable() > MAX_LINE:
                self._drop(sock)
            return
        line = bytes(sock.readLine(MAX_LINE).data()).decode("utf-8", errors="replace").strip()
        self._drop(sock)
        command, _, argument = line.partition(" ")
        if command in ("show", "setup", "join"):
            self.request.emit(command, argument)

    def _drop(self, sock: QLocalSocket) -> None:
        """Hang up (the sender's answer) and forget the socket; Qt deletes it once its signals are done."""
        sock.readyRead.disconnect(self._ready)
        sock.abort()
        self._clients.remove(sock)
        sock.deleteLater()

    def release(self) -> None:
        self._server.close()
        self._lock.unlock()


def claim(config_dir: Path) -> Primary | None:
    """This process becomes the app for ``config_dir``; None when another one already is."""
    config_dir.mkdir(parents=True, exist_ok=True)
    lock = QLockFile(str(config_dir / LOCK_NAME))
    lock.setStaleLockTime(0)  # never stale by age: only a dead owner's lock is taken over
    if not lock.tryLock(100):
        return None
    try:
        return Primary(lock, server_name(config_dir))
    except OSError:
        lock.unlock()
        raise


def holder_pid(config_dir: Path) -> int | None:
    """The running app's process id, where its lock file says."""
    info = QLockFile(str(config_dir / LOCK_NAME)).getLockInfo()  # PySide: (pid, host, app), or falsy
    return int(info[0]) if info and info[0] else None


def hand_over(config_dir: Path, command: str, argument: str = "") -> bool:
    """Send the running app one request; False when it does not take it within a few seconds."""
    sock = QLocalSocket()
    sock.connectToServer(server_name(config_dir))
    if not sock.waitForConnected(WAIT_MS):
        return False
    sock.write(f"{command} {argument}".strip().encode() + b"\n")
    sock.flush()
    # The app hangs up once it has read the line: that is the answer.
    return (sock.state() == QLocalSocket.LocalSocketState.UnconnectedState
            or sock.waitForDisconnected(WAIT_MS))
