"""When a volunteer's computer may train: BOINC's computing preferences as pure rules.

A contract shared by the app and the engine, so it lives in ``wire``: the app applies its Preferences (idle, a
daily schedule, battery, other programs' CPU use) by pausing and resuming the engine (app/power.py); a headless
node applies the same rules itself from its settings (``schedule``, ``pause_on_battery``, ``max_other_cpu``;
engine/run/hold.py). Pure: the facts (clock, battery, idle time, CPU times) come from the caller. Unknown never
pauses.
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
    # Pause while other programs use more than this percent of all cores' time (BOINC's "suspend when non-BOINC
    # CPU usage is above"); 0: never. The node runs at low priority anyway; this is for heat, fans and battery.
    max_other_cpu: int = 0


@dataclass(frozen=True)
class Facts:
    idle_s: float | None  # None: unknown on this system
    on_battery: bool | None  # None: no battery
    now: dt.time | None = None  # the local time of day; None: no schedule to check
    other_cpu: float | None = None  # share of all cores' time other programs used lately (``CpuMeter``); None: unknown


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


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds since boot, all cores together (``busy``: anything but idle, I/O wait, steal and guests) and of
    the node's own processes (``ours``), at ``wall`` (monotonic seconds), on ``cores`` logical cores."""

    wall: float
    busy: float
    ours: float
    cores: int


def other_cpu_share(before: CpuSample, after: CpuSample) -> float | None:
    """The share (0..1) of all cores' time between two samples that went to anything but the node; None when the
    samples are too close to tell (under a second apart) or out of order."""
    wall = after.wall - before.wall
    if wall < 1.0:
        return None
    other = (after.busy - before.busy) - max(0.0, after.ours - before.ours)
    return min(1.0, max(0.0, other / (wall * max(1, after.cores))))


def cpu_sample(psutil: Any, pids: list[int], wall: float) -> CpuSample:
    """Read a ``CpuSample`` through the caller's ``psutil`` module (wire imports none): the machine's CPU times, and
    those of ``pids`` with all their children, reaped ones included (their time moves into the parent's
    ``children_*``, so a scoring worker that ends between two samples is not counted as another program's)."""
    t = psutil.cpu_times()
    busy = sum(t) - getattr(t, "idle", 0.0) - getattr(t, "iowait", 0.0)
    # Linux counts guests' time in user and nice too; steal is other machines' (a VM's host), not this one's programs
    busy -= getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0) + getattr(t, "steal", 0.0)
    ours, seen = 0.0, set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for proc in procs:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                c = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            ours += c.user + c.system + getattr(c, "children_user", 0.0) + getattr(c, "children_system", 0.0)
    return CpuSample(wall, busy, ours, psutil.cpu_count() or 1)


class CpuMeter:
    """Other programs' share of the CPU since the last reading (``other_cpu_share``), for a rule checked every few
    seconds: each reading covers the time since the one before, at least a second."""

    def __init__(self, read: Callable[[], CpuSample]) -> None:
        self.read = read
        self._last: CpuSample | None = None

    def __call__(self) -> float | None:
        now = self.read()
        share = other_cpu_share(self._last, now) if self._last is not None else None
        if self._last is None or share is not None:  # (too soon after the last reading: that one stays the start)
            self._last = now
        return share


def hold_reason(rules: Rules, facts: Facts) -> str | None:
    """Why the rules want training paused now, in words; None when it may run."""
    if rules.pause_on_battery and facts.on_battery:
        return "paused while on battery"
    if rules.schedule is not None and facts.now is not None and not in_schedule(*rules.schedule, facts.now):
        return f"paused outside the schedule (runs {hhmm(rules.schedule[0])}-{hhmm(rules.schedule[1])})"
    if rules.only_when_idle and facts.idle_s is not None and facts.idle_s < rules.idle_minutes * 60:
        return "paused while the computer is in use"
    if rules.max_other_cpu and facts.other_cpu is not None and facts.other_cpu * 100 > rules.max_other_cpu:
        return f"paused while other programs use more than {rules.max_other_cpu} % of the CPU"
    return None
