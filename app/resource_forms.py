"""What the wizard and Preferences ask about computer use, BOINC-style: how many cores and how much of
their CPU time (the engine's settings ``threads`` and ``cpu_limit``), whether other programs come first (its
``priority``), and when to run (only when idle, only
between two times of day, not on battery: the app's rules, app/power.py)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTime, Signal
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QTimeEdit,
                               QVBoxLayout, QWidget)

from app import palette
from app.settings import AppSettings, parse_hhmm

CPU_STEP = 5  # the CPU-time slider moves in 5 % steps


def cores_words(n: int, cores: int) -> str:
    return f"{n} of {cores} core{'s' if cores > 1 else ''}"


def cpu_words(percent: int) -> str:
    return "all of their time (no limit)" if percent >= 100 else f"at most {percent} % of their time"


def _muted(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {palette.MUTED_TEXT}")
    return label


class ResourcesForm(QWidget):
    """Cores chosen directly (1..all), and the share of their CPU time; both apply while training."""

    changed = Signal()

    def __init__(self, cores: int, parent: QWidget | None = None, stretch: bool = True) -> None:
        super().__init__(parent)
        self.cores = max(1, cores)
        layout = QVBoxLayout(self)
        box = QGroupBox("Processor")
        form = QFormLayout(box)
        self.threads = QSlider(Qt.Orientation.Horizontal)
        self.threads.setRange(1, self.cores)
        self.threads.setPageStep(1)
        self.threads.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.threads.setAccessibleName("cores to use")
        self.threads_label = QLabel()
        self.cpu = QSlider(Qt.Orientation.Horizontal)
        self.cpu.setRange(1, 100 // CPU_STEP)  # in steps: 5 % .. 100 %
        self.cpu.setPageStep(2)
        self.cpu.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.cpu.setTickInterval(5)
        self.cpu.setAccessibleName("share of CPU time")
        self.cpu_label = QLabel()
        form.addRow("Use", self._row(self.threads, self.threads_label))
        form.addRow("and", self._row(self.cpu, self.cpu_label))
        form.addRow(_muted("Fewer cores leave more for your own work. A CPU-time limit makes training pause "
                           "between its steps, so the processor runs cooler and quieter (BOINC's throttle); "
                           "both apply while training, from the next step or round."))
        self.yield_cpu = QCheckBox("Let my other programs go first (low priority)")
        self.yield_cpu.setToolTip("Training gets the processor time your programs leave, as BOINC and Folding@home "
                                  "run. Off: it competes with them as an equal. Applies when training next starts.")
        self.yield_cpu.setChecked(True)
        form.addRow(self.yield_cpu)
        layout.addWidget(box)
        if stretch:  # alone on a tab: at the top (the wizard stacks both forms and stretches below them)
            layout.addStretch(1)
        self.threads.valueChanged.connect(self._update)
        self.cpu.valueChanged.connect(self._update)
        self.threads.setValue(max(1, self.cores // 2))
        self.cpu.setValue(100 // CPU_STEP)
        self._update()

    @staticmethod
    def _row(slider: QSlider, label: QLabel) -> QWidget:
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(slider, 1)
        label.setMinimumWidth(190)
        h.addWidget(label)
        return row

    @property
    def percent(self) -> int:
        return self.cpu.value() * CPU_STEP

    def _update(self) -> None:
        self.threads_label.setText(cores_words(self.threads.value(), self.cores))
        self.cpu_label.setText(cpu_words(self.percent))
        self.changed.emit()

    def load(self, s: AppSettings) -> None:
        self.threads.setValue(min(self.cores, s.threads(self.cores)))
        self.cpu.setValue(max(1, round(s.cpu_limit / CPU_STEP)))
        self.yield_cpu.setChecked(s.node.get("priority", "low") == "low")

    def store(self, s: AppSettings) -> None:
        s.node["threads"] = self.threads.value()
        if self.percent >= 100:
            s.node.pop("cpu_limit", None)  # the engine's default: node.toml leaves it out
        else:
            s.node["cpu_limit"] = self.percent
        if self.yield_cpu.isChecked():
            s.node.pop("priority", None)  # the engine's default, low
        else:
            s.node["priority"] = "normal"


class RulesForm(QWidget):
    """When to run: only when idle, only between two times of day, not on battery."""

    def __init__(self, parent: QWidget | None = None, stretch: bool = True) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        idle_box = QGroupBox("While you use the computer")
        v = QVBoxLayout(idle_box)
        self.idle = QCheckBox("Run only when the computer is idle")
        self.idle.setToolTip("Training pauses while you use the computer and resumes once it has been idle "
                             "for the minutes below.")
        self.idle_minutes = QSpinBox()
        self.idle_minutes.setRange(1, 120)
        self.idle_minutes.setSuffix(" minutes without keyboard or mouse")
        self.idle_minutes.setAccessibleName("idle minutes")
        self.battery = QCheckBox("Pause while on battery")
        v.addWidget(self.idle)
        minutes = QHBoxLayout()
        minutes.setContentsMargins(24, 0, 0, 0)
        minutes.addWidget(self.idle_minutes)
        minutes.addStretch(1)
        v.addLayout(minutes)
        v.addWidget(self.battery)
        busy = QHBoxLayout()
        self.busy = QCheckBox("Pause while other programs use more than")
        self.busy.setToolTip("Training pauses while your other programs keep the processor busy (checked every "
                             "30 seconds) and goes on when they use less. Training already lets them go first; "
                             "this also spares fans, heat and battery.")
        self.busy_percent = QSpinBox()
        self.busy_percent.setRange(5, 95)
        self.busy_percent.setSingleStep(5)
        self.busy_percent.setSuffix(" % of the CPU")
        self.busy_percent.setAccessibleName("other programs' CPU use")
        busy.addWidget(self.busy)
        busy.addWidget(self.busy_percent)
        busy.addStretch(1)
        v.addLayout(busy)
        layout.addWidget(idle_box)
        when = QGroupBox("Daily schedule")
        w = QVBoxLayout(when)
        self.schedule = QCheckBox("Run only between")
        row = QHBoxLayout()
        self.start = QTimeEdit()
        self.start.setDisplayFormat("HH:mm")
        self.start.setAccessibleName("schedule start")
        self.end = QTimeEdit()
        self.end.setDisplayFormat("HH:mm")
        self.end.setAccessibleName("schedule end")
        row.addWidget(self.schedule)
        row.addWidget(self.start)
        row.addWidget(QLabel("and"))
        row.addWidget(self.end)
        row.addStretch(1)
        w.addLayout(row)
        w.addWidget(_muted("Local time, every day. A window past midnight is fine (22:00 and 07:00: overnight). "
                           "Outside it training pauses at its next pause point and goes on when the window opens."))
        layout.addWidget(when)
        login_box = QGroupBox("When you log in")
        v = QVBoxLayout(login_box)
        self.login = QCheckBox("Start SAPO Swarm in the tray when I log in")
        self.login.setToolTip("Training then starts by itself after each login, within the rules above; the window "
                              "opens from the tray icon.")
        v.addWidget(self.login)
        layout.addWidget(login_box)
        if stretch:
            layout.addStretch(1)
        self.idle.toggled.connect(self.idle_minutes.setEnabled)
        self.busy.toggled.connect(self.busy_percent.setEnabled)
        self.schedule.toggled.connect(self.start.setEnabled)
        self.schedule.toggled.connect(self.end.setEnabled)

    def load(self, s: AppSettings) -> None:
        self.idle.setChecked(s.only_when_idle)
        self.idle_minutes.setValue(s.idle_minutes)
        self.idle_minutes.setEnabled(s.only_when_idle)
        self.battery.setChecked(s.pause_on_battery)
        self.busy.setChecked(s.busy_pause)
        self.busy_percent.setValue(s.busy_percent)
        self.busy_percent.setEnabled(s.busy_pause)
        self.schedule.setChecked(s.schedule_on)
        for edit, text, fallback in ((self.start, s.schedule_start, "22:00"), (self.end, s.schedule_end, "07:00")):
            t = parse_hhmm(text, fallback)
            edit.setTime(QTime(t.hour, t.minute))
            edit.setEnabled(s.schedule_on)
        self.login.setChecked(s.start_at_login)

    def store(self, s: AppSettings) -> None:
        s.start_at_login = self.login.isChecked()
        s.only_when_idle = self.idle.isChecked()
        s.idle_minutes = self.idle_minutes.value()
        s.pause_on_battery = self.battery.isChecked()
        s.busy_pause = self.busy.isChecked()
        s.busy_percent = self.busy_percent.value()
        s.schedule_on = self.schedule.isChecked()
        s.schedule_start = self.start.time().toString("HH:mm")
        s.schedule_end = self.end.time().toString("HH:mm")
