"""What the screenshot scripts share: the real app in a throw-away config dir, driven step by step.

``Driver`` makes the QApplication (after pointing SAPO_CONFIG_DIR at a fresh temporary folder, so nothing of
the user's settings is read or written), lets Qt settle between steps, waits for a state with a deadline, and
saves a widget's image. The scripts import it by path (``scripts/`` is not a package): run them from the
project's root as their docstrings say.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


class Driver:
    def __init__(self, out: Path, prefix: str) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.home = Path(tempfile.mkdtemp(prefix=prefix))
        os.environ["SAPO_CONFIG_DIR"] = str(self.home / "config")
        from PySide6.QtWidgets import QApplication

        self.app = QApplication([sys.argv[0]])

    def settle(self, ms: int = 300) -> None:
        """Run Qt's event loop for ``ms`` milliseconds: layouts, paints and the engine's events catch up."""
        from PySide6.QtCore import QDeadlineTimer, QEventLoop

        deadline = QDeadlineTimer(ms)
        while not deadline.hasExpired():
            self.app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)

    def wait(self, what: str, done: Callable[[], bool], timeout: float, failed: Callable[[], str | None],
             said: Callable[[], str] = lambda: "") -> None:
        """Settle until ``done()``; give up (exit with one line) after ``timeout`` s or once ``failed()`` names why."""
        t0 = time.monotonic()
        while not done():
            why = failed() or ("timed out" if time.monotonic() - t0 > timeout else None)
            if why:
                raise SystemExit(f"{Path(sys.argv[0]).name}: gave up waiting for {what} ({why})")
            self.settle(200)
        print(f"{what}: {time.monotonic() - t0:.0f} s{said()}", flush=True)

    def shot(self, widget, name: str, ms: int = 400) -> None:
        self.settle(ms)
        widget.grab().save(str(self.out / name))
