"""BOINC-style computing preferences: run only when the computer is idle, pause on battery.

The decision is a pure function (``decide``), tested alone; the facts come from psutil
(battery) and app/idle.py (the user's idle time, per platform). Unknown never pauses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import psutil

from app.idle import idle_seconds  # noqa: F401 - the window asks power for both facts

Action = Literal["pause", "resume"] | None


@dataclass(frozen=True)
class Rules:
    only_when_idle: bool = False
    idle_minutes: int = 5
    pause_on_battery: bool = True


@dataclass(frozen=True)
class Facts:
    idle_s: float | None  # None: unknown on this system
    on_battery: bool | None  # None: no battery


def hold_reason(rules: Rules, facts: Facts) -> str | None:
    """Why the rules want the engine paused now, in words; None when it may run."""
    if rules.pause_on_battery and facts.on_battery:
        return "paused while on battery"
    if rules.only_when_idle and facts.idle_s is not None and facts.idle_s < rules.idle_minutes * 60:
        return "paused while the computer is in use"
    return None


@dataclass
class PowerPolicy:
    """Pauses the engine when a rule holds and resumes it when none does, but only what it paused itself:
    a pause by the user is never undone, and a resume by the user wins until the rule lets go."""

    auto_paused: bool = False
    overridden: bool = False

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
        if state in ("running", "finishing") and not self.auto_paused and not self.overridden:
            self.auto_paused = True
            return "pause"
        return None

    def user_paused(self) -> None:
        self.auto_paused = False

    def user_resumed(self, reason: str | None) -> None:
        self.auto_paused = False
        self.overridden = reason is not None


def on_battery() -> bool | None:
    try:
        battery = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):
        return None
    if battery is None or battery.power_plugged is None:
        return None
    return not battery.power_plugged
