"""Idle time on Linux/X11, for real: an Xvfb server, input faked through XTest, read back through
the XScreenSaver extension the way the app reads it. Skips, saying why, where Xvfb or the X libraries
are missing (Debian: xvfb, libxss1, libxtst6)."""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
import time

import pytest

from app import idle, power


def _lib(name: str) -> ctypes.CDLL | None:
    path = ctypes.util.find_library(name)
    return ctypes.CDLL(path) if path else None


@pytest.fixture(scope="module")
def display():
    missing = [what for what, ok in (("Xvfb", shutil.which("Xvfb")), ("libXss", _lib("Xss")),
                                     ("libXtst", _lib("Xtst")), ("libX11", _lib("X11"))) if not ok]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Debian: xvfb libxss1 libxtst6)")
    # -displayfd: the server picks a free display number and writes it to us once it accepts clients.
    proc = subprocess.Popen(["Xvfb", "-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "320x240x24"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        number = proc.stdout.readline().decode().strip()
        assert number.isdigit(), "Xvfb did not start"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def _move_pointer(display: str, x: int) -> None:
    """A real input event, as a mouse would make it: XTest's fake motion through the server."""
    x11, xtst = _lib("X11"), _lib("Xtst")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    xtst.XTestFakeMotionEvent.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong]
    dpy = x11.XOpenDisplay(display.encode())
    assert dpy
    try:
        assert xtst.XTestFakeMotionEvent(dpy, -1, x, 10, 0)
        x11.XSync(dpy, 0)
    finally:
        x11.XCloseDisplay(dpy)


def test_x11_idle_time_follows_real_input(display):
    _move_pointer(display, 5)
    time.sleep(1.5)
    before = idle.x11_idle(display)
    assert before is not None and before >= 1.4  # nothing touched it since
    _move_pointer(display, 50)
    after = idle.x11_idle(display)
    assert after is not None and after < 1.0 < before  # the mouse moved: the counter started again
    # The app's Linux path takes X11 on an X11 session.
    assert idle.linux_idle({"DISPLAY": display, "XDG_SESSION_TYPE": "x11"}) == pytest.approx(after, abs=1.0)


def test_idle_rules_on_a_real_x_server(display, monkeypatch):
    monkeypatch.setenv("DISPLAY", display)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    _move_pointer(display, 7)
    in_use = power.idle_seconds()
    assert in_use is not None and in_use < 60
    rules = power.Rules(only_when_idle=True, idle_minutes=1, pause_on_battery=False)
    assert power.hold_reason(rules, power.Facts(in_use, None)) == "paused while the computer is in use"


def test_no_x_server_is_unknown_and_unknown_never_pauses(tmp_path):
    assert idle.x11_idle(":987") is None  # no server there: unknown, not an exception, not an exit
    rules = power.Rules(only_when_idle=True, idle_minutes=1, pause_on_battery=False)
    assert power.hold_reason(rules, power.Facts(idle.x11_idle(":987"), None)) is None
