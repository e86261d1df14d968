"""``sapo``: the desktop app (also ``python -m app``).

    sapo                                  first run: the setup wizard; then the dashboard
    sapo --setup                          the setup wizard again
    sapo --background                     training starts, the window stays in the tray (the login entry's way)
    sapo --replay EVENTS.jsonl            a finished run's dashboard, from its events file
    sapo --replay FILE --screenshot OUT   render that window to a PNG and exit
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from app.single_instance import Primary

PROG = "sapo"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="SAPO Swarm: train a small language model together with "
                                                       "other volunteers' computers.")
    p.add_argument("--replay", type=Path, metavar="EVENTS.jsonl", help="show a finished run from its events file")
    p.add_argument("--screenshot", type=Path, metavar="OUT.png", help="with --replay: save the window as a PNG and exit")
    p.add_argument("--size", default="1200x860", help="window size for --screenshot, WIDTHxHEIGHT (default %(default)s)")
    p.add_argument("--setup", action="store_true", help="run the setup wizard again")
    p.add_argument("--background", action="store_true",
                   help="start training with the window in the tray (how the app starts at login, when set so in "
                        "Preferences); the window opens from the tray icon")
    p.add_argument("link", nargs="?", metavar="LINK",
                   help="an invite link (sapo-swarm://join?...): the wizard opens at its swarm step with it "
                        "(what clicking an invite does, through the desktop file's x-scheme-handler)")
    p.add_argument("--verbose", action="store_true", help="details of the app's own workings on stderr")
    return p


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"{PROG}: error: --size must look like 1200x860, got {text!r}") from None
    if not (200 <= w <= 8000 and 200 <= h <= 8000):
        raise SystemExit(f"{PROG}: error: --size must be between 200x200 and 8000x8000")
    return w, h


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.screenshot and not args.replay:
        print(f"{PROG}: error: --screenshot needs --replay FILE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(name)s: %(message)s")
    size = _size(args.size)
    replay = None
    if args.replay:
        from app.replay import read_events

        try:
            replay = read_events(args.replay)
        except OSError as exc:
            print(f"{PROG}: error: cannot read {args.replay}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if not replay.events:
            print(f"{PROG}: error: {args.replay} holds no engine events", file=sys.stderr)
            return 2

    from PySide6.QtWidgets import QApplication

    # argv[0] sets the X11 window class; with the desktop file name it lets taskbars match the window to
    # the installed menu entry (packaging/linux/org.saposwarm.sapo-swarm.desktop), on Wayland too.
    app = QApplication.instance() or QApplication(["sapo-swarm"])
    app.setApplicationName("SAPO Swarm")
    app.setDesktopFileName("org.saposwarm.sapo-swarm")
    app.setQuitOnLastWindowClosed(True)

    from app.window import MainWindow

    if replay is not None:
        window = MainWindow()
        window.show_replay(replay.events, f"replay of {args.replay.name}", replay.skipped)
        if args.screenshot:
            return _screenshot(app, window, args.screenshot, size)
        window.show()
        return app.exec()

    from app import settings as store
    from app.single_instance import claim, hand_over, holder_pid

    primary = claim(store.config_dir())
    if primary is None:  # already running (in the tray, perhaps): it shows itself, or opens the invite
        command, argument = ("join", args.link) if args.link else ("setup", "") if args.setup else ("show", "")
        if hand_over(store.config_dir(), command, argument):
            print("SAPO Swarm is already running: its window is brought forward")
            return 0
        pid = holder_pid(store.config_dir())
        print(f"{PROG}: error: SAPO Swarm is already running{f' (process {pid})' if pid else ''} but does not "
              f"answer; close it, or end that process, and start again", file=sys.stderr)
        return 1
    try:
        return _run(app, args, primary)
    finally:
        primary.release()


def _run(app, args: argparse.Namespace, primary: "Primary") -> int:  # type: ignore[no-untyped-def]
    from app import autostart, settings as store
    from app.window import MainWindow, bring_to_front
    from engine.errors import SapoError  # what engine.config raises (the settings are the engine's)

    def bring_forward(command: str, argument: str) -> None:  # before the main window: the wizard comes forward
        modal = app.activeModalWidget()
        if modal is not None:
            bring_to_front(modal)

    primary.request.connect(bring_forward)
    try:
        settings = store.load()
    except SapoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    cores = store.physical_cores()
    if args.setup or args.link or not settings.setup_done:
        from app.wizard import SetupWizard

        wizard = SetupWizard(settings, cores, invite=args.link)
        if not wizard.exec():
            return 0
        settings = wizard.result_settings()
        store.save(settings)
        problem = autostart.sync(settings.start_at_login)
        if problem:
            print(f"{PROG}: {problem}", file=sys.stderr)
    window = MainWindow(settings, cores=cores)
    if window.tray.available:  # the window's close only hides it; Quit ends the app (a dialog's close must not)
        app.setQuitOnLastWindowClosed(False)
        window.quit_requested.connect(app.quit)
    primary.request.disconnect(bring_forward)
    primary.request.connect(window.handle_request)
    present(window, background=args.background and settings.setup_done)
    window.start()
    return app.exec()


def present(window, background: bool) -> None:  # type: ignore[no-untyped-def]
    """The window at start: shown; started at login, only the tray icon, or minimized where there is no tray
    (a window nobody can reach would be a node nobody can stop)."""
    if not background:
        window.show()
    elif not window.tray.available:
        window.showMinimized()


def _screenshot(app, window, out: Path, size: tuple[int, int]) -> int:  # type: ignore[no-untyped-def]
    window.resize(*size)
    window.show()
    for _ in range(5):  # layout, then pyqtgraph's deferred range updates
        app.processEvents()
    window.refresh()
    app.processEvents()
    if not window.grab().save(str(out)):
        print(f"{PROG}: error: cannot write {out}", file=sys.stderr)
        return 2
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
