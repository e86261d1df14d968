"""Events: the one channel through which a node tells the world what it is doing.

Every event is a flat JSON object with a ``type`` and a wall-clock ``time``; one per line.
The GUI reads them from the engine's stdout, ``--events FILE`` writes them to a file, and
the terminal shows a human line for each. Event types and their fields are listed in
docs/EVENTS.md.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

Listener = Callable[[dict[str, Any]], None]


class EventLog:
    """Fans each event out to listeners: JSON-lines writers and the terminal printer."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._files: list[TextIO] = []

    def add(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_jsonl(self, target: Path | TextIO) -> None:
        fh = open(target, "a", encoding="utf-8", buffering=1) if isinstance(target, Path) else target
        if isinstance(target, Path):
            self._files.append(fh)

        def write(event: dict[str, Any]) -> None:
            fh.write(json.dumps(event, separators=(",", ":"), default=str) + "\n")
            fh.flush()

        self.add(write)

    def emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "time": round(time.time(), 3), **fields}
        for listener in self._listeners:
            listener(event)
        return event

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        self._files.clear()


def terminal_printer(stream: TextIO = sys.stderr) -> Listener:
    """One readable line per event that matters to a person watching a terminal."""

    def show(e: dict[str, Any]) -> None:
        t = e["type"]
        if t == "start":
            line = (f"node {e.get('node_name', '')} | model {e.get('model')} | preset {e.get('preset')} | "
                    f"I={e.get('local_groups')} J={e.get('external_groups')} L={e.get('completions')} | "
                    f"rounds {e.get('round_start', 0) + 1}..{e.get('round_end')}")
        elif t == "round":
            parts = [f"round {e['round']:>4}", f"reward {e['reward_mean']:.3f}", f"acc {e['accuracy']:.3f}",
                     f"format {e['format_rate']:.2f}", f"gen {e['gen_tokens_per_s']:.0f} tok/s"]
            if "loss" in e:
                parts += [f"loss {e['loss']:+.4f}", f"trained {e['groups_trained']}/{e['groups_trained'] + e['groups_dropped']}"]
            if e.get("relay_connected") is not None:  # None: no relay configured
                parts.append(f"ext {e['external_groups']}" + ("" if e.get("relay_connected") else " (offline)"))
            parts.append(f"{e['round_s']:.1f}s")
            line = " | ".join(parts)
        elif t == "eval":
            line = f"eval  round {e['round']:>4} | pass@1 {e['eval_accuracy']:.3f} | sampled reward {e['eval_sampled_reward']:.3f}"
        elif t in ("status", "warning"):
            line = f"{t}: {e.get('message', '')}"
        elif t == "stop":
            line = f"stopped after round {e.get('round')}: {e.get('reason', '')}"
        else:
            return
        print(line, file=stream, flush=True)

    return show
