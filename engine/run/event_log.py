"""Events: the one channel through which a node tells the world what it is doing.

Every event is a typed struct from ``wire.events`` (the contract the GUI imports too),
written as one JSON object per line with a ``type`` and a wall-clock ``time``. The GUI
reads them from the engine's stdout, ``--events FILE`` writes them to a file, and the
terminal shows a human line for each. People read docs/EVENTS.md.

On stdout the channel carries events and nothing else (``claim_stdout``): libraries print
there too (reasoning-gym's bf task prints "." for every question it makes), and one stray
byte glued to a JSON line costs the GUI that event.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from wire import events as ev
from wire.models import describe_placement

Listener = Callable[[ev.Event], None]


def claim_stdout() -> TextIO:
    """The process's stdout, for events alone: returns a writer on it, and points file descriptor 1 (and so
    ``sys.stdout``, ``print`` and any C library's writes) at stderr. Hand-written: two ``os.dup`` calls."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing to guard
        return sys.stdout
    sys.stdout.flush()
    channel = os.fdopen(os.dup(fd), "w", encoding="utf-8", buffering=1)
    os.dup2(sys.stderr.fileno(), fd)
    return channel


class EventLog:
    """Fans each event out to listeners: JSON-lines writers and the terminal printer."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._files: list[TextIO] = []

    def add(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_jsonl(self, target: Path | TextIO) -> None:
        fh = open(target, "a", encoding="utf-8", buffering=1) if isinstance(target, Path) else target
        if isinstance(target, Path):
            self._files.append(fh)

        def write(event: ev.Event) -> None:
            fh.write(ev.encode(event).decode())
            fh.flush()

        self.add(write)

    def emit(self, event: ev.Event) -> ev.Event:
        # The loop and the command reader both emit: one event at a time, whole lines, in order.
        with self._lock:
            for listener in self._listeners:
                listener(event)
        return event

    def status(self, message: str) -> None:
        self.emit(ev.Status(message=message))

    def warning(self, message: str) -> None:
        self.emit(ev.Warning(message=message))

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        self._files.clear()


def terminal_printer(stream: TextIO = sys.stderr) -> Listener:
    """One readable line per event that matters to a person watching a terminal."""

    def show(e: ev.Event) -> None:
        match e:
            case ev.Start():
                st = e.settings
                mix = (f"swarm {st.get('swarm')}'s manifest {e.manifest[:12]}: {'; '.join(e.mix)}" if e.manifest
                       else f"preset {st.get('preset')}")
                line = (f"node {e.node_name} | model {e.model} | {mix} | "
                        f"I={st.get('local_groups')} J={st.get('external_groups')} L={st.get('completions')} | "
                        f"rounds {e.round_start + 1}..{e.round_end}")
                if e.trains_on:
                    line += f"\n{describe_placement(e.trains_on, e.samples_on, e.accel_fix)}"
            case ev.Round():
                parts = [f"round {e.round:>4}", f"reward {e.reward_mean:.3f}", f"acc {e.accuracy:.3f}",
                         f"format {e.format_rate:.2f}", f"gen {e.gen_tokens_per_s:.0f} tok/s",
                         f"loss {e.loss:+.4f}", f"trained {e.groups_trained}/{e.groups_trained + e.groups_dropped}"]
                if e.relay_connected is not None:  # None: no relay configured
                    parts.append(f"ext {e.external_groups}" + ("" if e.relay_connected else " (offline)"))
                parts.append(f"{e.round_s:.1f}s")
                line = " | ".join(parts)
            case ev.Eval():
                line = (f"eval  round {e.round:>4} | pass@1 {e.eval_accuracy:.3f} | "
                        f"sampled reward {e.eval_sampled_reward:.3f}")
            case ev.Status() | ev.Warning():
                line = f"{e.__struct_config__.tag}: {e.message}"
            case ev.StateChanged():
                line = f"state: {e.state}"
            case ev.Relay(state="connected"):
                line = f"relay: connected to {e.url}, {e.peers} peer{'' if e.peers == 1 else 's'} online"
            case ev.Relay():
                wait = max(0, round((e.retry_at or 0) - time.time()))
                line = f"relay: {e.url} unreachable ({e.reason}); training on local groups, next try in {wait}s"
            case ev.SwarmManifest(state="adopted"):
                signed = f" signed by {e.signer[:12]}" if e.signer else ""
                signed += f" (replaces {', '.join(k[:12] for k in e.replaced)})" if e.replaced else ""
                line = (f"swarm {e.swarm}: following its manifest {e.digest[:12]}{signed} | L={e.completions} "
                        f"max_tokens {e.max_tokens} | {'; '.join(e.mix)}")
            case ev.SwarmManifest(state="changed"):
                line = (f"swarm {e.swarm}: its manifest changed ({e.joined_digest[:12]} -> {e.digest[:12]}: "
                        f"{', '.join(e.changes) or 'content'}); this node keeps the one it joined with")
            case ev.SwarmManifest():
                line = f"swarm {e.swarm}: manifest refused ({e.reason}); training alone on this node's own mix"
            case ev.Stop():
                line = f"stopped after round {e.round}: {e.reason}"
            case _:
                return
        print(line, file=stream, flush=True)

    return show
