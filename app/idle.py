"""How long the user has not touched keyboard or mouse, in seconds; None when this system cannot say.

Hand-written: no library reports input idle time across platforms (psutil does not). Windows:
GetLastInputInfo. macOS: HIDIdleTime from ``ioreg``. Linux: on an X11 session the X server's own
counter through the XScreenSaver extension (libXss via ctypes, what ``xprintidle`` does); on Wayland
the compositor's D-Bus idle monitor (GNOME's org.gnome.Mutter.IdleMonitor, then the freedesktop
screensaver), since Xwayland's counter only sees input to X11 windows. Every failure is None, and
None never pauses anything (app/power.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import re
import subprocess
from collections.abc import Mapping

DBUS_TIMEOUT_MS = 2000  # a hung desktop service must not stall the GUI thread for D-Bus's default 25 s


def idle_seconds() -> float | None:
    system = platform.system()
    try:
        if system == "Windows":
            return _windows_idle()
        if system == "Darwin":
            return _mac_idle()
        if system == "Linux":
            return linux_idle(os.environ)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


def linux_idle(env: Mapping[str, str]) -> float | None:
    """X11 first on an X11 session; the D-Bus monitor on Wayland, or when X cannot answer."""
    wayland = env.get("XDG_SESSION_TYPE") == "wayland" or bool(env.get("WAYLAND_DISPLAY"))
    if not wayland and env.get("DISPLAY"):
        idle = x11_idle(env["DISPLAY"])
        if idle is not None:
            return idle
    return dbus_idle()


class _XScreenSaverInfo(ctypes.Structure):
    # XScreenSaverInfo from <X11/extensions/scrnsaver.h>; Window and unsigned long are C longs.
    _fields_ = [("window", ctypes.c_ulong), ("state", ctypes.c_int), ("kind", ctypes.c_int),
                ("til_or_since", ctypes.c_ulong), ("idle", ctypes.c_ulong), ("event_mask", ctypes.c_ulong)]


def _load(name: str, soname: str) -> ctypes.CDLL | None:
    for candidate in (ctypes.util.find_library(name), soname):
        if candidate:
            try:
                return ctypes.CDLL(candidate)
            except OSError:
                continue
    return None


def x11_idle(display: str) -> float | None:
    """Milliseconds since the last input event the X server saw on ``display``, as seconds."""
    x11, xss = _load("X11", "libX11.so.6"), _load("Xss", "libXss.so.1")
    if x11 is None or xss is None:
        return None
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
    x11.XDefaultRootWindow.restype = ctypes.c_ulong
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    x11.XFree.argtypes = [ctypes.c_void_p]
    xss.XScreenSaverQueryExtension.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                               ctypes.POINTER(ctypes.c_int)]
    xss.XScreenSaverAllocInfo.restype = ctypes.POINTER(_XScreenSaverInfo)
    xss.XScreenSaverQueryInfo.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(_XScreenSaverInfo)]
    dpy = x11.XOpenDisplay(display.encode())
    if not dpy:
        return None
    try:
        event_base, error_base = ctypes.c_int(), ctypes.c_int()
        if not xss.XScreenSaverQueryExtension(dpy, ctypes.byref(event_base), ctypes.byref(error_base)):
            return None
        info = xss.XScreenSaverAllocInfo()
        if not info:
            return None
        try:
            if not xss.XScreenSaverQueryInfo(dpy, x11.XDefaultRootWindow(dpy), info):
                return None
            return info.contents.idle / 1000.0
        finally:
            x11.XFree(info)
    finally:
        x11.XCloseDisplay(dpy)


def dbus_idle() -> float | None:
    try:
        from PySide6.QtDBus import QDBus, QDBusConnection, QDBusMessage
    except ImportError:
        return None
    bus = QDBusConnection.sessionBus()
    if not bus.isConnected():
        return None
    for service, path, iface, method in (
        ("org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core", "org.gnome.Mutter.IdleMonitor",
         "GetIdletime"),
        ("org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver", "org.freedesktop.ScreenSaver",
         "GetSessionIdleTime"),
    ):
        # A plain method call: a QDBusInterface would first introspect the service, blocking without a limit.
        call = QDBusMessage.createMethodCall(service, path, iface, method)
        reply = bus.call(call, QDBus.CallMode.Block, DBUS_TIMEOUT_MS)
        if reply.type() != QDBusMessage.MessageType.ReplyMessage:
            continue
        args = reply.arguments()
        if args and isinstance(args[0], int) and args[0] >= 0:
            return args[0] / 1000.0  # both answer in milliseconds
    return None


def _windows_idle() -> float | None:
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
