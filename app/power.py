"""BOINC-style computing preferences: run only when the computer is idle, pause on battery.

The decision is a pure function (``decide``), tested alone; the facts come from psutil
(battery) and a small platform helper for the user's idle time. No library reports input
idle time across platforms, so ``idle_seconds`` is hand-written: GetLastInputInfo on
Windows, HIDIdleTime from ``ioreg`` on macOS, the desktop's D-Bus idle monitor on Linux
(GNOME's Mutter, then the freedesktop screensaver), else unknown. Unknown never pauses.
"""

from __future__ import annotations

import platform
import re
import subprocess
from dataclasses import dataclass
from typing import Literal

import psutil

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
            if self.auto_paused and state == "paused":
                self.auto_paused = False
                return "resume"
            if state != "paused":
                self.auto_paused = False
            return None
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


def idle_seconds() -> float | None:
    system = platform.system()
    try:
        if system == "Windows":
            return _windows_idle()
        if system == "Darwin":
            return _mac_idle()
        if system == "Linux":
            return _linux_idle()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


def _windows_idle() -> float | None:
    import ctypes

    class LastInputInfo(ctypes.Structure):
        _fields_ = [("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint)]

    info = LastInputInfo()
    info.cbSize = ctypes.sizeof(info)
    if not ctypes.windll.user32.GetLastInputInfo(ctypes.byref(info)):  # type: ignore[attr-defined]
        return None
    ticks = ctypes.windll.kernel32.GetTickCount()  # type: ignore[attr-defined]
    return ((ticks - info.dwTime) & 0xFFFFFFFF) / 1000.0


def _mac_idle() -> float | None:
    out = subprocess.run(["ioreg", "-c", "IOHIDSystem"], capture_output=True, text=True, timeout=5).stdout
    match = re.search(r'"HIDIdleTime"\s*=\s*(\d+)', out)
    return int(match.group(1)) / 1e9 if match else None


def _linux_idle() -> float | None:
    try:
        from PySide6.QtDBus import QDBusConnection, QDBusInterface
    except ImportError:
        return None
    bus = QDBusConnection.sessionBus()
    if not bus.isConnected():
        return None
    for service, path, iface, method, scale in (
        ("org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core", "org.gnome.Mutter.IdleMonitor",
         "GetIdletime", 1e-3),
        ("org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver", "org.freedesktop.ScreenSaver",
         "GetSessionIdleTime", 1e-3),
    ):
        reply = QDBusInterface(service, path, iface, bus).call(method)
        args = reply.arguments()
        if args and isinstance(args[0], int):
            return args[0] * scale
    return None
