"""Commands into a running node: the other half of the GUI's channel (events are the first).

With ``sapo-engine run --control stdin`` the node reads one command per line on stdin,
typed in ``wire.events`` (``{"cmd": "pause"}``, ``finish``, ``resume``, ``stop``,
``{"cmd": "set_threads", "threads": 4}``, ``{"cmd": "set_cpu_limit", "percent": 50}``,
``{"cmd": "ask", "id": "1", "question": "..."}``).

``ask`` (try the model) is queued and served by the loop thread, which owns the model, at its next
pause point (``serve``, engine/run/ask.py): at once while paused, else at most a round away. At most
``MAX_PENDING_ASKS`` wait; another gets an ``answer`` event saying so.

State events say what the loop *is* doing, not what was asked: ``paused`` is emitted by
the loop thread when it actually blocks at a pause point, ``running`` when it goes on.
``finishing`` and ``stopping`` are true as soon as they are asked for (the round in flight
is then being finished). A bad line gets a ``warning`` event, never a crash. End of input
(the GUI went away) means stop.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, TextIO

import msgspec

from engine.run.throttle import Throttle
from wire import events as ev

MAX_PENDING_ASKS = 4


class Control:
    """Thread-safe switches the round loop consults between steps."""

    def __init__(self, emit: Callable[[ev.Event], object], throttle: Throttle | None = None) -> None:
        self._emit = emit  # EventLog.emit
        self.throttle = throttle  # the CPU-time limit: a new limit applies from the next step
        self._cond = threading.Condition()
        self._pause = False  # pause at the next pause point
        self._finish = False  # pause at the end of the round in flight
        self.stop_requested = False
        self.threads: int | None = None  # a pending thread-count change, taken by the loop
        self._asks: deque[ev.Ask] = deque()
        # Answers one ask (engine/run/ask.py ``Trial.answer``); set by the runner once the node exists
        self.serve: Callable[[ev.Ask], ev.Event] | None = None

    @property
    def paused(self) -> bool:
        return self._pause

    # --- called by the loop thread ---
    def wait_if_paused(self) -> None:
        """A pause point: answers waiting asks, then blocks while a pause is in force (answering asks that
        come meanwhile), saying so with state events."""
        self._answer_asks()
        with self._cond:
            if not self._pause or self.stop_requested:
                return
            self._emit(ev.StateChanged(state="paused"))
            while self._pause and not self.stop_requested:
                if self._asks and self.serve is not None:
                    self._cond.release()  # commands keep arriving while the model answers
                    try:
                        self._answer_asks()
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait()
            if not self.stop_requested:
                self._emit(ev.StateChanged(state="running"))

    def _answer_asks(self) -> None:
        """Serve the waiting asks, one by one (without the lock); a failure is that ask's answer, never the run's."""
        while self.serve is not None:
            with self._cond:
                if not self._asks or self.stop_requested:
                    return
                ask = self._asks.popleft()
            try:
                self._emit(self.serve(ask))
            except Exception as exc:  # noqa: BLE001 - trying the model must never take training down
                self._emit(ev.Answer(id=ask.id, task=ask.task, error=f"could not answer: {type(exc).__name__}: "
                                                                      f"{exc}"[:200]))

    def round_done(self) -> None:
        """End of a round: a pending *finish* becomes a pause here."""
        with self._cond:
            if self._finish:
                self._finish, self._pause = False, True
        self.wait_if_paused()

    # --- called by the reader thread ---
    def apply(self, line: str | bytes) -> None:
        try:
            command = ev.decode_command(line)
        except msgspec.DecodeError as exc:
            self._emit(ev.Warning(message=f"ignored control line: {str(exc)[:120]}"))
            return
        with self._cond:
            match command:
                case ev.Pause():
                    self._pause = True
                case ev.Finish():
                    if not self._pause:
                        self._finish = True
                        self._emit(ev.StateChanged(state="finishing"))
                case ev.Resume():
                    was_finishing, self._finish, self._pause = self._finish, False, False
                    if was_finishing:
                        self._emit(ev.StateChanged(state="running"))
                case ev.StopCommand():
                    if not self.stop_requested:  # a second stop (end of input after the command) changes nothing
                        self.stop_requested = True
                        if self.throttle is not None:
                            self.throttle.stop()  # the round's rest runs at full speed: the user wants out
                        self._emit(ev.StateChanged(state="stopping"))
                case ev.SetThreads(threads=n):
                    self.threads = n
                    self._emit(ev.Status(message=f"threads will be {n} from the next round"))
                case ev.SetCpuLimit(percent=p):
                    if self.throttle is not None:
                        self.throttle.set_limit(p)
                    self._emit(ev.Status(message=f"using at most {p} % of CPU time from the next step" if p < 100
                                         else "no CPU-time limit from the next step"))
                case ev.Ask():
                    if len(self._asks) >= MAX_PENDING_ASKS:
                        self._emit(ev.Answer(id=command.id, task=command.task,
                                             error=f"{MAX_PENDING_ASKS} questions are already waiting: ask again later"))
                    else:
                        self._asks.append(command)
            self._cond.notify_all()

    def listen(self, stream: TextIO) -> threading.Thread:
        """Read commands in a daemon thread until end of input, which stops the node."""

        def loop() -> None:
            for line in stream:
                if line.strip():
                    self.apply(line)
            self.apply('{"cmd": "stop"}')

        thread = threading.Thread(target=loop, name="sapo-control", daemon=True)
        thread.start()
        return thread
