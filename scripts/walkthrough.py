"""The volunteer's walkthrough for docs/screenshots/: first run, training, paused, restarted, try your model, Preferences.

    xvfb-run -a python scripts/walkthrough.py OUT_DIR

The real app with the real engine (the bundled model, offline, a tiny node so that rounds take seconds: 4
questions x 4 answers of at most 24 tokens, one thread). In order, each step waiting for what it shows:
- first-run.png: the setup assistant's first page, as a new volunteer sees it (throw-away config dir);
- training.png: the dashboard mid-round, with the round's percent done and time left (round 3 or later, so
  that time left comes from rounds measured on this computer);
- paused.png: after Pause, once the engine has reached its pause point;
- restarted.png: after Stop and Start, the charts and cards rebuilt from the engine's history before the
  first new round has finished;
- try-your-model.png: a basic_arithmetic question drawn and answered by the base model and the trained one;
- preferences.png: Preferences, over the window.
Prints what each step waited for and the headline it saw. Look at every image before committing it.
Under Xvfb Qt's xcb plugin needs the X libraries the .deb depends on (pyproject.toml, Debian's
``libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 ...``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from qt_driver import Driver

ENGINE_ARGS = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic,gcd", "--local", "4",
               "--external", "0", "--completions", "4", "--max-tokens", "24", "--eval-every", "0", "--threads", "1"]


def main() -> int:
    d = Driver(Path(sys.argv[1]), "sapo-walkthrough-")
    from app.settings import AppSettings
    from app.window import MainWindow
    from app.wizard import SetupWizard

    window = None

    def wait(what: str, done, timeout: float = 1800) -> None:
        d.wait(what, done, timeout, failed=lambda: f"engine: {window.engine.state}" if window.engine.state == "crashed"
               else None, said=lambda: f"; headline: {window.dashboard.status.text()!r} "
                                       f"{window.dashboard.phase.text()!r}")

    def shot(widget, name: str) -> None:
        d.shot(widget, name)
        print(f"saved {name}", flush=True)

    # 1. First run: the setup assistant, before anything is chosen.
    settings = AppSettings(data_dir=str(d.home / "data"))
    wizard = SetupWizard(settings, cores=2, measure=False)
    wizard.resize(900, 640)
    wizard.show()
    t0 = time.monotonic()
    while wizard.report is None and wizard.query.process.running and time.monotonic() - t0 < 300:
        d.settle(200)
    shot(wizard, "first-run.png")
    wizard.close()

    # 2. Training: mid-round, with time left measured from this computer's rounds.
    window = MainWindow(settings, extra_engine_args=ENGINE_ARGS)
    window.resize(1200, 860)
    window.show()
    window.start()
    wait("round 3 under way", lambda: window.model.current_round >= 2 and 25 <= _percent_done(window.model) <= 75)
    window.refresh()
    shot(window, "training.png")

    # 3. Paused: the engine stops at its next pause point; the window says so at once, then where it stopped.
    window.pause()
    wait("paused", lambda: window.model.state == "paused")
    window.refresh()
    shot(window, "paused.png")

    # 4. Stop, then Start: the history comes back before any new round finishes.
    rounds_before = window.model.current_round
    window.stop()
    wait("stopped", lambda: not window.engine.running)
    window.start()
    wait("restarted with its history", lambda: window.model.state == "running"
         and window.model.current_round >= rounds_before and "left" in window.dashboard.phase.text())
    window.refresh()
    shot(window, "restarted.png")

    # 5. Try your model: paused at a round boundary, a drawn question, base and trained answers.
    window.pause()
    wait("paused for the question", lambda: window.model.state == "paused")
    window.resize(1200, 1100)  # room for both answers under the charts
    tab = window.dashboard.try_model
    window.dashboard.tabs.setCurrentWidget(tab)
    tab.source.setCurrentIndex(tab.source.findData("basic_arithmetic"))
    tab.ask()
    wait("the drawn question's answers", lambda: tab.pending is None)
    shot(window, "try-your-model.png")

    # 6. Preferences over the window (shown, not exec'd, so that it can be grabbed).
    from app.preferences import PreferencesDialog

    dialog = PreferencesDialog(window.settings, window.cores, window)
    dialog.show()
    wait("Preferences' model list", lambda: bool(dialog.model_tab.infos), 300)
    shot(dialog, "preferences.png")
    dialog.close()
    window.stop()
    wait("stopped at the end", lambda: not window.engine.running)
    window.close()
    return 0


def _percent_done(model) -> float:
    """How far the round in flight is, as the dashboard computes it (-1: no estimate yet)."""
    progress = model.round_eta(time.time())
    if progress is None or progress.remaining_s is None or model.phase is None:
        return -1
    return 100 * (progress.fraction or 0)


if __name__ == "__main__":
    sys.exit(main())
