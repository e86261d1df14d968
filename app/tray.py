"""The system tray icon: status at a glance, pause / resume, the computer-use controls, show the window, quit."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.controls_menu import ControlsMenu
from app.icon import app_icon


class Tray(QObject):
    toggle_pause = Signal()
    show_window = Signal()
    quit = Signal()

    def __init__(self, cores: int = 1, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.available = QSystemTrayIcon.isSystemTrayAvailable()
        self.icon = QSystemTrayIcon(app_icon(), self)
        self.menu = QMenu()
        self.status = QAction("Stopped", self.menu)
        self.status.setEnabled(False)
        self.pause = QAction("Pause", self.menu)
        self.pause.triggered.connect(self.toggle_pause)
        show = QAction("Show SAPO Swarm", self.menu)
        show.triggered.connect(self.show_window)
        leave = QAction("Quit", self.menu)
        leave.triggered.connect(self.quit)
        for item in (self.status, None, self.pause, None):
            self.menu.addSeparator() if item is None else self.menu.addAction(item)
        self.controls = ControlsMenu(self.menu, cores, self)  # the same as the Run menu's
        for item in (None, show, leave):
            self.menu.addSeparator() if item is None else self.menu.addAction(item)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._on_activated)
        if self.available:
            self.icon.show()

    def _on_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.show_window.emit()

    def update(self, headline: str, state: str, swarm: str = "") -> None:
        """``swarm``: the swarm card's words (RunModel.swarm_card), so the tray never says otherwise."""
        self.status.setText(headline)
        self.icon.setToolTip(f"SAPO Swarm: {headline}" + (f"\n{swarm}" if swarm else ""))
        self.icon.setIcon(app_icon(state))
        self.pause.setText("Resume" if state == "paused" else "Pause")
        self.pause.setEnabled(state in ("running", "paused", "finishing"))
