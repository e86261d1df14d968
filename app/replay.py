"""Reading a finished run's events file, leniently: old formats, torn last lines, future events.

Files written before ``wire.events`` had a schema (e.g. docs/learning-curve.jsonl) carry the
settings flat in ``start``; they are gathered into ``settings`` here. A line that is not an
event is counted and skipped: a replay shows what it can.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from wire import events as ev

_START_FIELDS = frozenset(ev.Start.__struct_fields__) | {"type"}
MAX_FILE_BYTES = 512 * 1024 * 1024  # a replay is for people, not for arbitrary inputs


@dataclass(frozen=True)
class Replay:
    events: list[ev.Event]
    skipped: int  # lines that were not events


def _upgrade_start(raw: dict) -> dict:
    """An old ``start`` with flat settings -> the current shape."""
    if "settings" in raw:
        return raw
    settings = {k: v for k, v in raw.items() if k not in _START_FIELDS}
    out = {k: v for k, v in raw.items() if k in _START_FIELDS}
    out.setdefault("threads", settings.get("threads") or 0)
    return out | {"settings": settings, "schema": 0}


def parse_lines(lines: list[bytes]) -> Replay:
    events: list[ev.Event] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            try:
                raw = msgspec.json.decode(line)
            except RecursionError:  # nested deeper than Python's stack: not an event either
                raise msgspec.DecodeError("JSON nested too deeply") from None
            if isinstance(raw, dict) and raw.get("type") == "start":
                line = msgspec.json.encode(_upgrade_start(raw))
            event = ev.decode_event(line)
        except msgspec.DecodeError:
            skipped += 1
            continue
        if event is not None:
            events.append(event)
    return Replay(events, skipped)


def read_events(path: Path) -> Replay:
    """All events of a file; OSError (with the reason) when it cannot be read at all."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise OSError(f"{path} is {size / 1e6:.0f} MB; a replay reads at most {MAX_FILE_BYTES / 1e6:.0f} MB")
    return parse_lines(path.read_bytes().splitlines())
