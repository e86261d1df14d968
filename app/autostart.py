"""Start the app when the volunteer logs in, in the tray, as Folding@home's and BOINC's clients do.

One switch (Preferences, Schedule tab) that each desktop keeps in its own place:
- Linux and other XDG desktops: a ``.desktop`` file in ``$XDG_CONFIG_HOME/autostart/`` (the XDG Autostart spec);
- macOS: a LaunchAgent in ``~/Library/LaunchAgents/`` that runs at load (launchd reads it at the next login);
- Windows: a value under ``HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run`` (through ``QSettings``).
The command started is this app as it runs now (``sapo`` beside this Python, else ``python -m app``), with
``--background``: the engine starts and the window stays in the tray. No library does this across the three
(Qt has no autostart API), so it is hand-written here: three small writers and their removal.
"""

from __future__ import annotations

import os
import plistlib
import sys
from pathlib import Path

APP_ID = "org.saposwarm.sapo-swarm"
RUN_KEY = r"HKEY_CURRENT_USER\Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE = "SAPO Swarm"
BACKGROUND = "--background"


def command() -> list[str]:
    """How to start this app again at login: the ``sapo`` entry point installed beside this interpreter, else
    this interpreter with ``-m app``; either way in the background."""
    beside = Path(sys.executable).with_name("sapo.exe" if os.name == "nt" else "sapo")
    if beside.is_file():
        return [str(beside), BACKGROUND]
    return [sys.executable, "-m", "app", BACKGROUND]


def xdg_entry(cmd: list[str]) -> str:
    """The autostart ``.desktop`` file (Exec quoted as the Desktop Entry spec asks: each argument in double
    quotes, with ``"``, `` ` ``, ``$`` and ``\\`` escaped)."""
    def quote(arg: str) -> str:
        for ch in ("\\", '"', "`", "$"):
            arg = arg.replace(ch, "\\" + ch)
        return f'"{arg}"'.replace("\\", "\\\\")  # then the file's own string escaping of backslashes
    return ("[Desktop Entry]\n"
            "Type=Application\n"
            "Name=SAPO Swarm\n"
            "Comment=Train a small language model together with other volunteers' computers\n"
            f"Exec={' '.join(quote(a) for a in cmd)}\n"
            f"Icon={APP_ID}\n"
            "Terminal=false\n"
            "X-GNOME-Autostart-enabled=true\n")


def launch_agent(cmd: list[str]) -> bytes:
    """The macOS LaunchAgent: run once at login, as an app the user sees (not a background daemon)."""
    return plistlib.dumps({"Label": APP_ID, "ProgramArguments": cmd, "RunAtLoad": True,
                           "ProcessType": "Interactive"})


def _xdg_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "autostart" / f"{APP_ID}.desktop"


def _agent_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{APP_ID}.plist"


def entry_path() -> Path | None:
    """The file this desktop starts from (None on Windows, where it is a registry value)."""
    if sys.platform == "win32":
        return None
    return _agent_path() if sys.platform == "darwin" else _xdg_path()


def enabled() -> bool:
    path = entry_path()
    if path is None:
        from PySide6.QtCore import QSettings

        return QSettings(RUN_KEY, QSettings.Format.NativeFormat).contains(RUN_VALUE)
    return path.is_file()


def set_enabled(on: bool) -> None:
    """Switch starting at login on or off (OSError when the desktop's folder cannot be written)."""
    path = entry_path()
    if path is None:
        from PySide6.QtCore import QSettings

        run = QSettings(RUN_KEY, QSettings.Format.NativeFormat)
        if on:
            run.setValue(RUN_VALUE, " ".join(f'"{a}"' for a in command()))
        else:
            run.remove(RUN_VALUE)
        run.sync()
        return
    if not on:
        path.unlink(missing_ok=True)
        return
    body = launch_agent(command()) if sys.platform == "darwin" else xdg_entry(command()).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(body)
    os.replace(tmp, path)


def sync(want: bool) -> str | None:
    """Make the desktop's entry match the setting; a line for the user when it cannot be written."""
    try:
        if enabled() != want:
            set_enabled(want)
    except OSError as exc:
        return f"Could not {'add' if want else 'remove'} the login entry: {exc.strerror or exc}"
    return None
