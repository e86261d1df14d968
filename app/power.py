"""BOINC-style computing preferences: run only when the computer is idle, only between two times of day,
pause on battery, pause while other programs keep the CPU busy.

The decisions are pure functions (``hold_reason`` and ``in_schedule``, from wire/power_rules.py, which a headless
node applies itself; ``PowerPolicy.decide``), tested alone; the facts come from ``Sources``: psutil (battery),
app/idle.py (the user's idle time, per platform), the clock and the CPU times of the machine and of this app's
processes (the engine is its child), each replaceable by a test's fake. Unknown never pauses. (How many cores
and how much of their CPU time the engine uses are the engine's settings, ``threads`` and ``cpu_limit``: it
applies them itself.)
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import psutil

from app.idle import idle_seconds
from wire.power_rules import CpuMeter, Facts, Rules, battery_state, cpu_sample, hhmm, hold_reason, in_schedule

__all__ = ["Action", "Facts", "PowerPolicy", "Rules", "Sources", "hhmm", "hold_reason", "in_schedule", "local_time",
           "on_battery"]

Action = Literal["pause", "resume"] | None


@dataclass
class PowerPolicy:
    """Pauses the engine when a rule holds and resumes it when none does, but only what it paused itself:
    a pause by the user is never undone, and a resume by the user wins until the rule lets go."""

    auto_paused: bool = False
    overridden: bool = False
    user_hold: bool = False  # the user paused: the rules leave the engine alone until the user resumes

    def decide(self, reason: str | None, state: str) -> Action:
        if reason is None:
            self.overridden = False
            if not self.auto_paused:
                return None
            self.auto_paused = False
            # Ours to undo: a pause in force, or one sent that the engine has not reached yet (it pauses at
            # its next pause point, up to a round later; forgetting it left training paused for good).
            # Not while finishing: the user's finish pauses at the round's end anyway, and a resume would cancel it.
            return "resume" if state in ("paused", "running") else None
        if self.user_hold:  # the user's pause, in force or still on its way: a rule's pause and resume would undo it
            return None
        if state in ("running", "finishing") and not self.auto_paused and not self.overridden:
            self.auto_paused = True
            return "pause"
        return None

    def user_paused(self) -> None:
        self.auto_paused = False
        self.user_hold = True

    def user_resumed(self, reason: str | None) -> None:
        self.auto_paused = False
        self.user_hold = False
        self.overridden = reason is not None

    def stopped(self) -> None:
        """The engine stopped: a new run starts with no pause of anyone's."""
        self.auto_paused = self.overridden = self.user_hold = False


def local_time() -> dt.time:
    return dt.datetime.now().time()


@dataclass
class Sources:
    """Where the facts come from: the system's, or a test's fakes."""

    idle: Callable[[], float | None] = idle_seconds
    battery: Callable[[], bool | None] = field(default_factory=lambda: on_battery)
    clock: Callable[[], dt.time] = local_time
    # Other programs' share of the CPU since the last check: this app and its children (the engine, its workers)
    # are not other programs.
    other_cpu: Callable[[], float | None] = field(
        default_factory=lambda: CpuMeter(lambda: cpu_sample(psutil, [os.getpid()], time.monotonic())))

    def facts(self, rules: Rules) -> Facts:
        return Facts(idle_s=self.idle() if rules.only_when_idle else None, on_battery=self.battery(),
                     now=self.clock() if rules.schedule is not None else None,
                     other_cpu=self.other_cpu() if rules.max_other_cpu else None)


def on_battery() -> bool | None:
    return battery_state(psutil.sensors_battery)
