"""The computer-use controls as menu items, the same in the Run menu and the tray's menu: cores, CPU time,
and the idle / schedule / battery / other programs' CPU rules. It only says what was chosen (signals) and shows the settings
(``sync``); the window applies a choice (app/window.py)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from app.resource_forms import cores_words, cpu_words
from app.settings import CPU_LIMITS, AppSettings

# Mnemonics free beside the Run menu's own (Start, Pause, Finish, sTop, Quit)
RULES = {"only_when_idle": "Run only when &idle", "schedule_on": "Run only &between",
         "pause_on_battery": "Pause on &battery", "busy_pause": "Pause while other programs &use the CPU"}


class ControlsMenu(QObject):
    threads_chosen = Signal(int)
    cpu_chosen = Signal(int)
    rule_toggled = Signal(str, bool)  # an AppSettings field of RULES, and its new value

    def __init__(self, menu: QMenu, cores: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cores = max(1, cores)
        self.cores_menu = menu.addMenu("&Cores")
        self.threads: dict[int, QAction] = {}
        group = QActionGroup(self)
        for n in range(1, self.cores + 1):
            act = QAction(cores_words(n, self.cores), self, checkable=True)
            act.triggered.connect(lambda _=False, n=n: self.threads_chosen.emit(n))
            group.addAction(act)
            self.cores_menu.addAction(act)
            self.threads[n] = act
        self.cpu_menu = menu.addMenu("CPU ti&me")
        self.cpu_group = QActionGroup(self)
        self.cpu: dict[int, QAction] = {}
        for p in CPU_LIMITS:
            self._cpu_action(p)
        self.rules: dict[str, QAction] = {}
        for key, words in RULES.items():
            act = QAction(words, self, checkable=True)
            act.triggered.connect(lambda on, k=key: self.rule_toggled.emit(k, on))
            menu.addAction(act)
            self.rules[key] = act

    def _cpu_action(self, percent: int) -> QAction:
        act = QAction(cpu_words(percent).replace("their", "the cores'"), self, checkable=True)
        act.triggered.connect(lambda _=False, p=percent: self.cpu_chosen.emit(p))
        self.cpu_group.addAction(act)
        # keep the menu in order when Preferences chose a value the tray does not list
        later = [a for p, a in sorted(self.cpu.items()) if p > percent]
        self.cpu_menu.insertAction(later[0] if later else None, act)
        self.cpu[percent] = act
        return act

    def sync(self, s: AppSettings) -> None:
        """Check marks from the settings, wherever they were changed."""
        threads = min(self.cores, s.threads(self.cores))
        self.threads[threads].setChecked(True)
        limit = s.cpu_limit
        (self.cpu.get(limit) or self._cpu_action(limit)).setChecked(True)
        for key, act in self.rules.items():
            act.setChecked(bool(getattr(s, key)))
        self.rules["schedule_on"].setText(f"Run only &between {s.schedule_start} and {s.schedule_end}")
        self.rules["busy_pause"].setText(f"Pause while other programs &use over {s.busy_percent} % of the CPU")
