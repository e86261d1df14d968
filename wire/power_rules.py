"""When a volunteer's computer may train: BOINC's computing preferences as pure rules.

A contract shared by the app and the engine, so it lives in ``wire``: the app applies its Preferences (idle, a
daily schedule, battery) by pausing and resuming the engine (app/power.py); a headless node applies the same
rules itself from its settings (``schedule``, ``pause_on_battery``; engine/run/hold.py). Pure: the facts (clock,
battery, idle time) come from the caller. Unknown never pauses.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rules:
    only_when_idle: bool = False
    idle_minutes: int = 5
    pause_on_battery: bool = True
    schedule: tuple[dt.time, dt.time] | None = None  # run only from the first time to the second, daily


@dataclass(frozen=True)
class Facts:
    idle_s: float | None  # None: unknown on this system
    on_battery: bool | None  # None: no battery
    now: dt.time | None = None  # the local time of day; None: no schedule to check


def in_schedule(start: dt.time, end: dt.time, now: dt.time) -> bool:
    """Whether ``now`` is in the daily window from ``start`` (included) to ``end`` (excluded); a window that
    ends before it starts runs over midnight (22:00-07:00); start == end is the whole day."""
    if start == end:
        return True
    if start < end:
        return start <= now < end
    return now >= start or now < end


def hhmm(t: dt.time) -> str:
    return t.strftime("%H:%M")


def parse_schedule(text: str) -> tuple[dt.time, dt.time]:
    """``"22:00-07:00"`` -> (22:00, 07:00); ValueError with one line for anything else."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*", text)
    if m is None:
        raise ValueError(f"schedule must be HH:MM-HH:MM (e.g. 22:00-07:00), got {text!r}")
    h1, m1, h2, m2 = map(int, m.groups())
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        raise ValueError(f"schedule times must be 00:00 to 23:59, got {text!r}")
    return dt.time(h1, m1), dt.time(h2, m2)


def battery_state(read: Callable[[], Any]) -> bool | None:
    """True on battery, False plugged in, None where there is no battery or no way to tell. ``read`` is the
    caller's ``psutil.sensors_battery`` (wire itself imports nothing but the standard library and msgspec);
    psutil may fail, answer None, or not know whether power is plugged in: each of these is unknown, never a pause.
    """
    try:
        battery = read()
    except (AttributeError, NotImplementedError, OSError):
        return None
    plugged = getattr(battery, "power_plugged", None)
    return None if plugged is None else not plugged


def hold_reason(rules: Rules, facts: Facts) -> str | None:
    """Why the rules want training paused now, in words; None when it may run."""
    if rules.pause_on_battery and facts.on_battery:
        return "paused while on battery"
    if rules.schedule is not None and facts.now is not None and not in_schedule(*rules.schedule, facts.now):
        return f"paused outside the schedule (runs {hhmm(rules.schedule[0])}-{hhmm(rules.schedule[1])})"
    if rules.only_when_idle and facts.idle_s is not None and facts.idle_s < rules.idle_minutes * 60:
        return "paused while the computer is in use"
    return None
