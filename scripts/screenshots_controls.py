"""Screenshots of the computer-use controls for docs/screenshots/: Preferences' four tabs, the wizard's
computer-use page and the tray's menu (with its CPU-time submenu).

    xvfb-run -a python scripts/screenshots_controls.py OUT_DIR

saves OUT_DIR/preferences-model.png, preferences-resources.png, preferences-schedule.png,
preferences-swarm.png, wizard-power.png, tray-menu.png and tray-cpu.png (and preferences-model-slow.png
when a model is too slow for this computer). The settings shown are an
example (4 cores, 2 used, 50 % of their time, a schedule over the night); the model list is this
computer's own (a real ``sapo-engine models --json``). A throw-away config dir is used.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qt_driver import Driver


def main() -> int:
    d = Driver(Path(sys.argv[1]), "sapo-shots-")
    settle = d.settle
    from PySide6.QtCore import QPoint

    from app.preferences import PreferencesDialog
    from app.settings import AppSettings
    from app.window import MainWindow
    from app.wizard import PowerPage

    settings = AppSettings(setup_done=True, only_when_idle=True, schedule_on=True, schedule_start="22:00",
                           schedule_end="07:00", node={"model": "smollm2-135m", "threads": 2, "cpu_limit": 50,
                                                       "offline": True})
    saved = []
    dialog = PreferencesDialog(settings, cores=4)
    dialog.show()
    while dialog.model.count() < 2 and dialog.models.process.running:
        settle(200)
    for i, name in enumerate(("model", "resources", "schedule", "swarm")):
        dialog.tabs.setCurrentIndex(i)
        d.shot(dialog, f"preferences-{name}.png", 300)
        saved.append(f"preferences-{name}.png")
    slow = next((i for i in range(dialog.model.count()) if "too slow here" in dialog.model.itemText(i)), None)
    if slow is not None:  # this computer has one the setup calls too slow: the warning when it is chosen
        dialog.tabs.setCurrentIndex(0)
        dialog.model.setCurrentIndex(slow)
        d.shot(dialog, "preferences-model-slow.png", 300)
        saved.append("preferences-model-slow.png")
    dialog.done(0)

    page = PowerPage(cores=4)
    page.load(settings)
    page.setTitle("How much of the computer to use")
    page.resize(760, 560)
    page.show()
    d.shot(page, "wizard-power.png", 300)
    saved.append("wizard-power.png")
    page.close()

    window = MainWindow(settings, cores=4)
    settle(500)  # the window's own first refresh (stopped), before the example state below
    window.tray.update("Training — round 3, 40 % done, about 1 min left", "running")
    menu = window.tray.menu
    menu.popup(QPoint(40, 40))
    d.shot(menu, "tray-menu.png", 500)
    saved.append("tray-menu.png")
    cpu = window.tray.controls.cpu_menu
    cpu.popup(QPoint(40, 40))
    d.shot(cpu, "tray-cpu.png", 500)
    saved.append("tray-cpu.png")
    print(f"saved {', '.join(saved)} in {d.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
