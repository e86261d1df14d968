"""A child process for the GUI: a QObject owning a private QProcess (after qutebrowser's guiprocess).

It never blocks the event loop: output arrives through slots, line by line, decoded with
errors='replace'. The executable is checked before starting, QProcess errors become
sentences, and the ending is an ``Outcome`` (a plain dataclass) carrying the last lines
of stderr, so a failed child is explained to the user instead of leaving a dead window.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import deque
from collections.abc import Mapping, Sequence

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from app.outcome import TAIL_LINES, Outcome, split_lines

log = logging.getLogger("app.process")

_ERRORS = {
    QProcess.ProcessError.FailedToStart: "the program could not be started (missing, or not allowed to run)",
    QProcess.ProcessError.Crashed: "it crashed",
    QProcess.ProcessError.Timedout: "it did not answer in time",
    QProcess.ProcessError.WriteError: "it did not accept input",
    QProcess.ProcessError.ReadError: "its output could not be read",
}


def check_executable(program: str) -> str | None:
    """None when ``program`` can be run; else why not, in words."""
    if os.path.sep in program or (os.altsep and os.altsep in program):
        if not os.path.isfile(program):
            return f"{program} does not exist"
        if not os.access(program, os.X_OK):
            return f"{program} is not executable"
        return None
    return None if shutil.which(program) else f"{program} was not found on PATH"


class GuiProcess(QObject):
    """Runs one child at a time. Signals: each stdout / stderr line, started, finished(Outcome)."""

    stdout_line = Signal(str)
    stderr_line = Signal(str)
    started = Signal()
    finished = Signal(object)  # Outcome

    def __init__(self, what: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.what = what
        self._proc: QProcess | None = None
        self._out = bytearray()
        self._err = bytearray()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._message: str | None = None
        self._stopping = False

    # --- control ---
    def start(self, program: str, args: Sequence[str], env: Mapping[str, str] | None = None,
              own_session: bool = False) -> bool:
        """Start the child; False (and ``finished`` with a start error) when it cannot be. ``own_session`` (Unix):
        the child leads a session of its own, so that what it sets for its session's scheduling group (the
        engine's low priority, engine/run/priority.py) is not the app's too."""
        if self.running:
            raise RuntimeError(f"{self.what} is already running")
        self._out.clear()
        self._err.clear()
        self._tail.clear()
        self._message, self._stopping = None, False
        problem = check_executable(program)
        if problem is not None:
            self._finish(Outcome(self.what, start_error=problem))
            return False
        proc = QProcess(self)
        if env is not None:
            qenv = QProcessEnvironment()
            for key, value in env.items():
                qenv.insert(key, value)
            proc.setProcessEnvironment(qenv)
        proc.readyReadStandardOutput.connect(self._on_stdout)
        proc.readyReadStandardError.connect(self._on_stderr)
        proc.started.connect(self.started)
        proc.finished.connect(self._on_finished)
        proc.errorOccurred.connect(self._on_error)
        if own_session and os.name == "posix":
            proc.setUnixProcessParameters(QProcess.UnixProcessFlag.CreateNewSession)
        self._proc = proc
        log.info("starting %s: %s %s", self.what, program, " ".join(args))
        proc.start(program, list(args))
        return True

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    @property
    def pid(self) -> int | None:
        return int(self._proc.processId()) if self.running and self._proc is not None else None

    def write(self, data: bytes) -> bool:
        if not self.running or self._proc is None:
            return False
        return self._proc.write(data) == len(data)

    def close_stdin(self) -> None:
        if self._proc is not None:
            self._proc.closeWriteChannel()

    def set_message(self, message: str) -> None:
        """The child's own explanation of its ending (e.g. the engine's error event)."""
        self._message = message

    def terminate(self) -> None:
        """Ask politely (SIGTERM); the caller decides when to kill."""
        if self.running and self._proc is not None:
            self._stopping = True
            self._proc.terminate()

    def kill(self) -> None:
        if self.running and self._proc is not None:
            self._stopping = True
            self._proc.kill()

    def mark_stopping(self) -> None:
        self._stopping = True

    def wait(self, msecs: int) -> bool:
        """Block until the child ends (tests and quitting only)."""
        return self._proc is None or self._proc.waitForFinished(msecs) or not self.running

    # --- slots ---
    def _on_stdout(self) -> None:
        if self._proc is None:
            return
        for line in split_lines(self._out, bytes(self._proc.readAllStandardOutput().data())):
            if line.strip():
                self.stdout_line.emit(line)

    def _on_stderr(self) -> None:
        if self._proc is None:
            return
        for line in split_lines(self._err, bytes(self._proc.readAllStandardError().data()), carriage_returns=True):
            if line.strip():
                self._tail.append(line.rstrip())
                log.debug("%s stderr: %s", self.what, line.rstrip())
                self.stderr_line.emit(line.rstrip())

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._proc is not None:
            why = _ERRORS[error]
            detail = self._proc.errorString()
            self._proc = None
            self._finish(Outcome(self.what, start_error=f"{why} ({detail})" if detail else why))
        elif error == QProcess.ProcessError.Crashed and self._stopping:
            # We killed it (a cancelled download, a stop past its grace): not a crash to warn about
            log.info("%s: stopped", self.what)
        else:
            log.warning("%s: %s", self.what, _ERRORS.get(error, "unknown process error"))

    def _on_finished(self, exit_code: int, status: QProcess.ExitStatus) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:  # what is still buffered, then any unterminated last line
            self._proc = proc
            self._on_stdout()
            self._on_stderr()
            self._proc = None
            for buf, sig in ((self._out, self.stdout_line), (self._err, self.stderr_line)):
                rest = bytes(buf).decode("utf-8", errors="replace").strip()
                buf.clear()
                if rest:
                    if sig is self.stderr_line:
                        self._tail.append(rest)
                    sig.emit(rest)
        crashed = status == QProcess.ExitStatus.CrashExit
        outcome = Outcome(
            self.what,
            exit_code=None if crashed else exit_code,
            crashed=crashed,
            signal=exit_code if crashed and exit_code > 0 else None,
            message=self._message,
            stderr_tail=tuple(self._tail),
            stopped_by_user=self._stopping,
        )
        if proc is not None:
            proc.deleteLater()
        self._finish(outcome)

    def _finish(self, outcome: Outcome) -> None:
        log.info("%s ended: %s", self.what, outcome.sentence())
        self.finished.emit(outcome)
