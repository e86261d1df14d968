"""How a child process ended, as a plain dataclass (no Qt), and the sentence a user reads.

Kept apart from the Qt wrapper so that the wording of every ending is tested without a
process: a clean stop, an error the engine explained, a crash, a failure to start.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

TAIL_LINES = 12  # of stderr, shown under a crash; more is noise for a user


@dataclass(frozen=True)
class Outcome:
    what: str  # "The engine", "The local swarm", ...
    exit_code: int | None = None  # None: never started, or killed by a signal
    crashed: bool = False  # killed by a signal / Qt's CrashExit
    signal: int | None = None  # the signal, where known (POSIX)
    start_error: str | None = None  # why it could not be started at all
    message: str | None = None  # the child's own one-line explanation (the engine's error event)
    stderr_tail: tuple[str, ...] = ()
    stopped_by_user: bool = False  # we asked it to stop (a kill after a stop is not a crash for the user)

    @property
    def ok(self) -> bool:
        return self.start_error is None and not self.crashed and self.exit_code == 0

    def sentence(self) -> str:
        """One plain sentence for the user."""
        if self.start_error is not None:
            return f"{self.what} could not be started: {self.start_error}"
        if self.ok:
            return f"{self.what} stopped normally."
        if self.crashed and self.stopped_by_user:
            return f"{self.what} was stopped."
        if self.message:
            return f"{self.what} stopped: {self.message}"
        if self.crashed:
            name = _signal_name(self.signal)
            return f"{self.what} crashed{f' ({name})' if name else ''}."
        return f"{self.what} stopped with an error (exit code {self.exit_code})."


def _signal_name(signum: int | None) -> str:
    if signum is None:
        return ""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def split_lines(buffer: bytearray, data: bytes, *, carriage_returns: bool = False) -> list[str]:
    """Complete lines from a byte stream, decoded leniently; the unfinished rest stays in ``buffer``.

    ``carriage_returns``: also split on ``\\r`` (progress bars redraw a line with it).
    """
    buffer += data
    raw = bytes(buffer)
    if carriage_returns:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    *lines, rest = raw.split(b"\n")
    buffer[:] = rest
    return [line.decode("utf-8", errors="replace") for line in lines]
