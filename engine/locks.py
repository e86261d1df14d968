"""Exclusive locks that the OS drops when their holder exits, however it exits (a kill included).

flock on POSIX, msvcrt's byte lock on Windows. Hand-written (a few lines): the ``filelock`` package does the
same but is not among the locked dependencies, and nothing here needs its timeouts or reentrancy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO


def try_lock(path: Path) -> BinaryIO | None:
    """Lock ``path`` (made if missing) without waiting: the open file, held while it stays open, with this
    process's id written in it; None when another process holds it."""
    fh = open(path, "a+b")
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError (POSIX), PermissionError (Windows): held elsewhere
        fh.close()
        return None
    fh.truncate(0)
    fh.write(str(os.getpid()).encode())
    fh.flush()
    return fh


def holder(path: Path) -> int | None:
    """The process id written by the lock's holder, when it can be read."""
    try:
        text = path.read_text().strip()
    except OSError:  # Windows: the locked byte cannot be read by others
        return None
    return int(text) if text.isdigit() else None
