"""Commands into a running node: the other half of the GUI's channel (events are the first).

With ``sapo-engine run --control stdin`` the node reads one JSON object per line on stdin:

    {"cmd": "pause"}                  finish the step in flight, then wait
    {"cmd": "resume"}
    {"cmd": "stop"}                   stop after the round in flight (like SIGTERM)
    {"cmd": "set_threads", "threads": 4}

Each accepted command is answered with a ``status`` event; a bad line with a ``warning``
event, never a crash. End of input (the GUI went away) means stop.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, TextIO

import msgspec


class Command(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cmd: str
    threads: int | None = None


class Control:
    """Thread-safe switches the round loop consults between steps."""

    def __init__(self, say: Callable[..., object]) -> None:
        self._say = say  # EventLog.emit
        self._running = threading.Event()
        self._running.set()
        self.stop_requested = False
        self.threads: int | None = None  # a pending thread-count change, taken by the loop

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_if_paused(self) -> None:
        self._running.wait()

    def apply(self, line: str) -> None:
        try:
            command = msgspec.json.decode(line, type=Command)
        except msgspec.MsgspecError as exc:
            self._say("warning", message=f"ignored control line: {str(exc)[:120]}")
            return
        if command.cmd == "pause":
            self._running.clear()
            self._say("status", message="paused", paused=True)
        elif command.cmd == "resume":
            self._running.set()
            self._say("status", message="resumed", paused=False)
        elif command.cmd == "stop":
            self.stop_requested = True
            self._running.set()  # a paused node must wake up to stop
            self._say("status", message="stopping after the round in flight")
        elif command.cmd == "set_threads" and command.threads is not None and 1 <= command.threads <= 1024:
            self.threads = command.threads
            self._say("status", message=f"threads will be {command.threads} from the next step")
        else:
            self._say("warning", message=f"ignored control command {json.dumps(command.cmd)[:60]}")

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
