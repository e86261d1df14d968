"""Idle time on Linux, for real. X11: an Xvfb server, input faked through XTest, read back through
the XScreenSaver extension the way the app reads it. Wayland/GNOME: a private D-Bus session bus with
a stand-in for GNOME's idle monitor (the same interface, path and types). Each skips, saying why,
where its pieces are missing (Debian: xvfb, libxss1, libxtst6, dbus-daemon), or fails under
SAPO_REQUIRE_IDLE=1 (CI sets it: a skipped test there would hide a broken idle rule)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import children

from app import idle, power


def _missing(why: str) -> None:
    children.missing(why, "SAPO_REQUIRE_IDLE")


def _lib(name: str) -> ctypes.CDLL | None:
    path = ctypes.util.find_library(name)
    return ctypes.CDLL(path) if path else None


_XVFB: dict[str, object] = {}  # the running server and its log, for a failure's message


@pytest.fixture(scope="module")
def display(tmp_path_factory):
    missing = [what for what, ok in (("Xvfb", shutil.which("Xvfb")), ("libXss", _lib("Xss")),
                                     ("libXtst", _lib("Xtst")), ("libX11", _lib("X11"))) if not ok]
    if missing:
        _missing(f"needs {', '.join(missing)} (Debian: xvfb libxss1 libxtst6)")
    log = tmp_path_factory.mktemp("xvfb") / "xvfb.log"
    # -displayfd: the server picks a free display number and writes it to us once it accepts clients.
    with log.open("wb") as err:
        proc = subprocess.Popen(["Xvfb", "-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "320x240x24"],
                                stdout=subprocess.PIPE, stderr=err)
    _XVFB.update(proc=proc, log=log)
    try:
        assert proc.stdout is not None
        number = proc.stdout.readline().decode().strip()
        assert number.isdigit(), "Xvfb did not start"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def _open(x11: ctypes.CDLL, display: str) -> int:
    """A connection to the test's server. Tried for a few seconds: once, in a full CI run on a loaded
    2-core machine, the first test of this file talked to the server and the next could not connect."""
    deadline = time.monotonic() + 5
    while True:
        dpy = x11.XOpenDisplay(display.encode())
        if dpy or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not dpy:
        proc, log = _XVFB.get("proc"), _XVFB.get("log")
        alive = proc is not None and proc.poll() is None  # type: ignore[attr-defined]
        tail = log.read_text(errors="replace")[-400:] if log is not None else ""  # type: ignore[attr-defined]
        pytest.fail(f"cannot open {display}: Xvfb {'running' if alive else 'gone'}; its log: {tail!r}")
    return dpy


def _move_pointer(display: str, x: int) -> None:
    """A real input event, as a mouse would make it: XTest's fake motion through the server."""
    x11, xtst = _lib("X11"), _lib("Xtst")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    xtst.XTestFakeMotionEvent.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong]
    dpy = _open(x11, display)
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


# A stand-in for GNOME's org.gnome.Mutter.IdleMonitor: the real name, path, method and uint64 milliseconds.
FAKE_MUTTER = textwrap.dedent(r'''
    import sys, time
    from PySide6.QtCore import ClassInfo, QCoreApplication, QObject, Slot
    from PySide6.QtDBus import QDBusConnection

    @ClassInfo({"D-Bus Interface": "org.gnome.Mutter.IdleMonitor"})
    class Monitor(QObject):
        @Slot(result="qulonglong")
        def GetIdletime(self):
            if sys.argv[1] == "hang":
                time.sleep(8)  # a desktop service that does not answer
            return 4321

    app = QCoreApplication([])
    bus = QDBusConnection.sessionBus()
    monitor = Monitor()
    ok = bus.registerObject("/org/gnome/Mutter/IdleMonitor/Core", monitor,
                            QDBusConnection.RegisterOption.ExportAllSlots)
    print("ready" if ok and bus.registerService("org.gnome.Mutter.IdleMonitor") else "failed", flush=True)
    app.exec()
''')

ASK = ("import time; from PySide6.QtCore import QCoreApplication; app = QCoreApplication([]); "
       "from app.idle import linux_idle; t = time.monotonic(); "
       "print(linux_idle({'XDG_SESSION_TYPE': 'wayland', 'WAYLAND_DISPLAY': 'wayland-0', 'DISPLAY': ':987'}), "
       "round(time.monotonic() - t, 1))")


@pytest.fixture
def session_bus(tmp_path):
    if not shutil.which("dbus-daemon"):
        _missing("needs dbus-daemon (Debian: dbus-daemon)")
    proc = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().decode().strip()
        assert address.startswith("unix:"), "dbus-daemon did not start"
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


def _wayland_idle(address: str, tmp_path: Path, mode: str) -> tuple[str, float]:
    env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": address,
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    script = tmp_path / "fake_mutter.py"
    script.write_text(FAKE_MUTTER)
    fake = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, env=env)
    try:
        assert fake.stdout is not None and fake.stdout.readline().decode().strip() == "ready"
        out = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        value, seconds = out.stdout.split()
        return value, float(seconds)
    finally:
        fake.kill()
        fake.wait(10)


def test_wayland_asks_the_desktops_idle_monitor_over_dbus(session_bus, tmp_path):
    value, _ = _wayland_idle(session_bus, tmp_path, "answer")
    assert value == "4.321"  # milliseconds from the monitor, as seconds; X11 not asked on Wayland


def test_a_desktop_service_that_hangs_is_unknown_within_the_limit(session_bus, tmp_path):
    value, seconds = _wayland_idle(session_bus, tmp_path, "hang")
    assert value == "None"  # unknown: never pauses
    assert seconds < idle.DBUS_TIMEOUT_MS / 1000 + 1.5  # not D-Bus's default 25 s
