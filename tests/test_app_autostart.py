"""Living in the tray: starting at login (the desktop's own entry, written, validated by the desktop's tool, run and
removed), and a window whose close leaves training running where there is a tray."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app import autostart  # noqa: E402
from app.settings import AppSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def exec_line(entry: str) -> list[str]:
    """The argv a desktop runs for an entry's Exec line, unquoted as the Desktop Entry spec says (not shlex:
    inside double quotes the spec escapes ``$`` and `` ` `` too): the check that xdg_entry quotes right."""
    line = next(x for x in entry.splitlines() if x.startswith("Exec="))[len("Exec="):]
    line = line.replace("\\\\", "\\")  # the file's string escaping first
    args: list[str] = []
    arg: list[str] | None = None  # None between arguments; "" is an argument too
    quoted, i = False, 0
    while i < len(line):
        ch = line[i]
        if ch == " " and not quoted:
            if arg is not None:
                args.append("".join(arg))
            arg, i = None, i + 1
            continue
        arg = [] if arg is None else arg
        if quoted and ch == "\\" and line[i + 1:i + 2] in ('"', "`", "$", "\\"):
            arg.append(line[i + 1])
            i += 2
        elif ch == '"':
            quoted, i = not quoted, i + 1
        else:
            arg.append(ch)
            i += 1
    if arg is not None:
        args.append("".join(arg))
    return args


def _validate(path: Path) -> None:
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip("desktop-file-validate (desktop-file-utils) is not installed")
    done = subprocess.run([tool, str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG autostart entry")
def test_the_login_entry_starts_this_app_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert not autostart.enabled()
    autostart.set_enabled(True)
    path = tmp_path / "xdg" / "autostart" / "org.saposwarm.sapo-swarm.desktop"
    assert autostart.enabled() and autostart.entry_path() == path
    _validate(path)
    argv = exec_line(path.read_text())
    assert argv[-1] == "--background" and argv == autostart.command()
    # What the desktop will run is this app: asked for its help, it answers with the flag it is started with.
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0 and "--background" in done.stdout and "usage: sapo" in done.stdout
    autostart.set_enabled(False)
    assert not path.exists() and not autostart.enabled()
    autostart.set_enabled(False)  # off twice is still off


def test_an_exec_line_keeps_odd_paths_whole(tmp_path):
    cmd = ['/opt/my apps/py"th$on`x\\y', "-m", "app", "--background"]
    entry = autostart.xdg_entry(cmd)
    assert exec_line(entry) == cmd
    path = tmp_path / "odd.desktop"
    path.write_text(entry)
    _validate(path)


def test_the_macos_launch_agent_runs_the_app_at_login():
    agent = plistlib.loads(autostart.launch_agent(["/Applications/SAPO Swarm.app/Contents/MacOS/sapo", "--background"]))
    assert agent == {"Label": "org.saposwarm.sapo-swarm", "RunAtLoad": True, "ProcessType": "Interactive",
                     "ProgramArguments": ["/Applications/SAPO Swarm.app/Contents/MacOS/sapo", "--background"]}


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG autostart entry")
def test_preferences_switch_the_login_entry(qtbot, window, tmp_path, monkeypatch):
    from app.preferences import PreferencesDialog

    entry = tmp_path / "xdg" / "autostart" / "org.saposwarm.sapo-swarm.desktop"  # the window fixture's XDG dir
    dialog = PreferencesDialog(window.settings, 2, window)
    qtbot.addWidget(dialog)
    assert not dialog.rules.login.isChecked()
    dialog.rules.login.setChecked(True)
    window.apply_settings(dialog.result_settings())
    assert entry.is_file() and window.settings.start_at_login
    again = PreferencesDialog(window.settings, 2, window)  # shows what is set
    qtbot.addWidget(again)
    assert again.rules.login.isChecked()
    again.rules.login.setChecked(False)
    window.apply_settings(again.result_settings())
    assert not entry.exists()
    # A folder that cannot be written: one line for the user, and the settings are still saved.
    shutil.rmtree(entry.parent)
    entry.parent.write_text("not a folder")
    window.apply_settings(AppSettings(data_dir=window.settings.data_dir, start_at_login=True))
    assert window.model.message.startswith("Could not add the login entry")
    dialog.done(0)
    again.done(0)


def test_started_at_login_the_window_waits_in_the_tray(window):
    from app.main import present

    if window.tray.available:
        present(window, background=True)
        assert not window.isVisible()
    window.tray.available = False  # no tray on this desktop: a minimized window, never an unreachable one
    present(window, background=True)
    assert window.isVisible() and window.isMinimized()


def test_closing_the_window_leaves_training_running_in_the_tray(qtbot, window, tmp_path, monkeypatch):
    """With a tray the window's close hides it and the engine goes on (Folding@home's way); Quit stops it."""
    from app import engine_process
    from wire import events as ev

    script = Path(__file__).resolve().parent / "scripted_engine.py"
    path = tmp_path / "events.jsonl"
    path.write_bytes(ev.encode(ev.StateChanged(state="running", round=0)))
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(script), str(path)]))
    window.tray.available = True  # offscreen Qt has no tray; the window is told there is one
    said = []
    monkeypatch.setattr(window.tray.icon, "showMessage", lambda title, text, *a: said.append(title))
    ended = []
    window.quit_requested.connect(lambda: ended.append(True))
    window.show()
    window.start()
    qtbot.wait_until(lambda: window.engine.running, timeout=20_000)
    window.close()
    assert not window.isVisible() and window.engine.running and not ended
    window.close()
    assert said == ["SAPO Swarm keeps training"]  # once, not at every close
    window.handle_request("show", "")  # the tray's "Show", or the launcher again
    assert window.isVisible()
    window.quit()
    assert ended == [True] and not window.engine.running
