"""A headless node's computing preferences: between rounds, wait while outside its schedule, on battery, or while
other programs keep the CPU busy.

The rules are the app's (wire/power_rules.py), read from the node's settings (``schedule``, ``pause_on_battery``,
``max_other_cpu``).
The app applies them itself by pausing the engine, so a node under the app's control leaves them alone
(engine/run/runner.py). Waiting happens only between rounds: a round in flight always finishes. The node says
why it waits in one line and when it goes on, with state events as a pause does, and a stop ends the wait.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from wire import events as ev
from wire.power_rules import CpuMeter, Facts, Rules, battery_state, cpu_sample, hold_reason, parse_schedule

CHECK_S = 30.0  # how often a waiting node looks at the clock and the battery again


def on_battery() -> bool | None:
    """True on battery, False plugged in, None where there is no battery (or no way to tell)."""
    return battery_state(psutil.sensors_battery)


def others_cpu() -> CpuMeter:
    """Other programs' share of the CPU since the last look: this process and its children (the scoring workers)
    are the node. Started now, so that the look after the first round covers it."""
    meter = CpuMeter(lambda: cpu_sample(psutil, [os.getpid()], time.monotonic()))
    meter()
    return meter


def rules_of(schedule: str | None, pause_on_battery: bool, max_other_cpu: int = 0) -> Rules | None:
    """The node's rules, or None when it has none (nothing to check, ever)."""
    if schedule is None and not pause_on_battery and not max_other_cpu:
        return None
    return Rules(pause_on_battery=pause_on_battery, schedule=parse_schedule(schedule) if schedule else None,
                 max_other_cpu=max_other_cpu)


@dataclass
class Hold:
    rules: Rules
    emit: Callable[[ev.Event], object]
    clock: Callable[[], dt.time] = field(default=lambda: dt.datetime.now().time())
    battery: Callable[[], bool | None] = on_battery
    other_cpu: Callable[[], float | None] = field(default_factory=others_cpu)  # over the round just run, or the wait
    check_s: float = CHECK_S
    wake: threading.Event = field(default_factory=threading.Event)  # set by a stop: the wait ends at once

    def reason(self) -> str | None:
        facts = Facts(idle_s=None, on_battery=self.battery() if self.rules.pause_on_battery else None,
                      now=self.clock() if self.rules.schedule is not None else None,
                      other_cpu=self.other_cpu() if self.rules.max_other_cpu else None)
        return hold_reason(self.rules, facts)

    def wait(self, round_: int, stopped: Callable[[], bool]) -> bool:
        """Block while a rule holds (checking every ``check_s``); True when it waited at all."""
        why = self.reason()
        if why is None or stopped():
            return False
        self.emit(ev.StateChanged(state="paused", round=round_))
        self.emit(ev.Status(message=f"{why}: waiting before round {round_ + 1}; looks again every "
                                    f"{self.check_s:.0f} s"))
        while why is not None and not stopped():
            self.wake.wait(self.check_s)
            why = self.reason()
        if not stopped():
            self.emit(ev.Status(message=f"the computing rules allow training again: round {round_ + 1} starts"))
            self.emit(ev.StateChanged(state="running", round=round_))
        return True
