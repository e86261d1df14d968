"""The one channel between the app and its engine: a ``sapo-engine run`` child process.

Events come from the child's stdout as JSON lines (``--events -``), decoded into
``wire.events`` structs; commands go to its stdin (``--control stdin``). A stdout line
that is not an event goes to the log, never stops anything; the engine's ``error`` event
becomes the sentence shown when it exits. The app imports nothing that imports torch or
llama.cpp: all it knows of the engine is this process.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
from PySide6.QtCore import QObject, QTimer, Signal

from app.guiprocess import GuiProcess
from app.outcome import Outcome
from wire import events as ev

log = logging.getLogger("app.engine")

STOP_GRACE_MS = 120_000  # a round in flight may take minutes to finish; then we kill
KILL_GRACE_MS = 5_000

# What the app shows in its big status line. "starting" until the engine's first state event.
AppState = str  # "stopped" | "starting" | "running" | "paused" | "finishing" | "stopping" | "crashed"


def engine_program() -> tuple[str, list[str]]:
    """How to run the engine: this interpreter with ``-m engine`` (works in a checkout and a bundle)."""
    return sys.executable, ["-m", "engine"]


def run_args(config: Path | None, data_dir: Path | None, rounds: int = 0, extra: Sequence[str] = ()) -> list[str]:
    args = ["run", "--events", "-", "--control", "stdin", "--quiet"]
    if config is not None:
        args += ["--config", str(config)]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    if rounds:
        args += ["--rounds", str(rounds)]
    return args + list(extra)


class EngineProcess(QObject):
    """Signals: ``event`` (a decoded wire event), ``log_line`` (text for the log view),
    ``state_changed`` (AppState), ``finished`` (Outcome)."""

    event = Signal(object)
    log_line = Signal(str)
    state_changed = Signal(str)
    finished = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._proc = GuiProcess("The engine", self)
        self._proc.stdout_line.connect(self._on_stdout_line)
        self._proc.stderr_line.connect(self.log_line)
        self._proc.finished.connect(self._on_finished)
        self._state: AppState = "stopped"
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self._escalate)
        self.last_outcome: Outcome | None = None

    @property
    def state(self) -> AppState:
        return self._state

    @property
    def running(self) -> bool:
        return self._proc.running

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    # --- starting and stopping ---
    def start(self, args: Sequence[str], program: str | None = None, program_args: Sequence[str] | None = None,
              env: Mapping[str, str] | None = None) -> bool:
        """Start ``engine run``-style ``args`` (see ``run_args``); program defaults to ``engine_program()``."""
        default_program, default_args = engine_program()
        program = program or default_program
        prefix = list(program_args) if program_args is not None else (default_args if program == default_program else [])
        self._set_state("starting")
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        # The engine needs a fixed string-hash seed (engine/tasks/hashseed.py) and would otherwise restart itself;
        # on Windows that restart is a grandchild this QProcess could not stop.
        full_env["PYTHONHASHSEED"] = "0"
        # A session of its own: its low priority then covers its autogroup, without lowering this window's
        return self._proc.start(program, prefix + list(args), full_env, own_session=True)

    def stop(self, grace_ms: int = STOP_GRACE_MS) -> None:
        """Stop after the round in flight; kill if it takes longer than ``grace_ms``."""
        if not self.running:
            return
        self._proc.mark_stopping()
        if not self.send(ev.StopCommand()):
            self._proc.terminate()
        self._proc.close_stdin()  # end of input also means stop, for an engine that missed the line
        self._kill_timer.start(grace_ms)

    def shutdown(self, wait_ms: int = 15_000) -> None:
        """Quitting the app: stop now, blocking. Two SIGTERMs abort the round in flight (its last
        checkpoint stays whole: checkpoints are written to a new directory, then switched)."""
        if not self.running:
            return
        self._proc.close_stdin()
        self._proc.terminate()
        if not self._proc.wait(300):
            self._proc.terminate()
            if not self._proc.wait(wait_ms):
                self._proc.kill()
                self._proc.wait(5000)

    def _escalate(self) -> None:
        if self.running:
            log.warning("the engine did not stop in time: killing it")
            self._proc.kill()

    # --- commands ---
    def send(self, command: ev.Command) -> bool:
        """Write one command line to the engine; False when it is not running."""
        ok = self._proc.write(ev.encode(command))
        if ok:
            log.info("sent %s", ev.encode(command).decode().strip())
        return ok

    def pause(self) -> bool:
        return self.send(ev.Pause())

    def resume(self) -> bool:
        return self.send(ev.Resume())

    def finish(self) -> bool:
        return self.send(ev.Finish())

    def set_threads(self, threads: int) -> bool:
        return self.send(ev.SetThreads(threads=threads))

    def set_cpu_limit(self, percent: int) -> bool:
        return self.send(ev.SetCpuLimit(percent=percent))

    def ask(self, command: ev.Ask) -> bool:
        """Try the model: answered by an ``answer`` event at the engine's next pause point."""
        return self.send(command)

    # --- slots ---
    def _on_stdout_line(self, line: str) -> None:
        try:
            event = ev.decode_event(line)
        except msgspec.DecodeError:
            self.log_line.emit(line)  # a print() somewhere in a library: shown, never fatal
            return
        if event is None:
            return  # a newer engine's event: nothing to do with it
        match event:
            case ev.StateChanged(state=state):
                self._set_state(state)
            case ev.ErrorEvent(message=message):
                self._proc.set_message(message)
            case ev.Start():
                if self._state == "starting":
                    self._set_state("running")
        self.event.emit(event)

    def _on_finished(self, outcome: Outcome) -> None:
        self._kill_timer.stop()
        self.last_outcome = outcome
        self._set_state("stopped" if outcome.ok or outcome.stopped_by_user and outcome.message is None else "crashed")
        self.finished.emit(outcome)

    def _set_state(self, state: AppState) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(state)
