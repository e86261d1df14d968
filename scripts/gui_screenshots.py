"""Screenshots of the app for docs/: the setup wizard's model and swarm pages, and a replayed dashboard.

    python scripts/gui_screenshots.py OUT_DIR [EVENTS.jsonl [NAME]]

saves OUT_DIR/wizard-model.png, wizard-swarm.png and NAME.png (default: dashboard), plus
NAME-swarm.png with the swarm tab open when the run had a relay.

Run it under Xvfb for real fonts and window decorations (``xvfb-run -a python ...``), or with
QT_QPA_PLATFORM=offscreen. Set QT_SCALE_FACTOR=2 to check 200 % scaling. The wizard uses a
throw-away config dir and reads the round-time measurement cached in SAPO_CACHE_DIR if any.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qt_driver import Driver

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    out = Path(sys.argv[1])
    events = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "learning-curve.jsonl"
    name = sys.argv[3] if len(sys.argv) > 3 else "dashboard"
    d = Driver(out, "sapo-shots-")
    settle = d.settle
    from app.replay import read_events
    from app.settings import AppSettings
    from app.window import MainWindow
    from app.wizard import SetupWizard

    wizard = SetupWizard(AppSettings(data_dir=str(d.home / "data")), cores=2, measure=False)
    wizard.show()
    while wizard.report is None and wizard.query.process.running:
        settle(200)
    if wizard.report is None:
        print("the model report failed", file=sys.stderr)
        return 1
    wizard.next()
    d.shot(wizard, "wizard-model.png", 300)
    wizard.next()
    wizard.next()
    wizard.swarm_page.form.buttons["local"].setChecked(True)
    d.shot(wizard, "wizard-swarm.png", 300)
    wizard.done(0)

    replay = read_events(events)
    window = MainWindow()
    window.show_replay(replay.events, f"replay of {events.name}", replay.skipped)
    window.resize(1200, 860)
    window.show()
    settle(500)
    window.refresh()
    d.shot(window, f"{name}.png", 300)
    saved = ["wizard-model.png", "wizard-swarm.png", f"{name}.png"]
    if window.model.leaderboard:
        window.dashboard.tabs.setCurrentIndex(1)
        d.shot(window, f"{name}-swarm.png", 300)
        saved.append(f"{name}-swarm.png")
    print(f"saved {', '.join(saved)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
