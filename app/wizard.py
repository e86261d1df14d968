"""The first-run wizard: this computer -> a model that suits it -> its download -> a swarm ->
this node's name -> how much of the computer to use. Everything it learns about hardware
and models comes from ``sapo-engine models --json``; it writes ``AppSettings``.
"""

from __future__ import annotations

import copy
import html
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QProgressBar, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget, QWizard, QWizardPage)

from app import palette
from app.engine_tasks import IdentityQuery, ModelDownload, ModelsQuery
from app.forms import SwarmForm
from app.resource_forms import ResourcesForm, RulesForm
from app.icon import app_icon
from app.settings import AppSettings
from wire.models import HardwareInfo, ModelInfo, ModelsReport, describe_placement

FIT_WORDS = {"fits": "fits", "tight": "tight fit", "no": "does not fit"}
OFFLINE_WHY = ("This computer is set to work offline, so this model cannot be downloaded. Models already on "
               "this computer can be chosen.")


def choosable(m: ModelInfo, report: ModelsReport) -> bool:
    """Fits here, and is on disk or can be downloaded."""
    return m.fit != "no" and (m.downloaded or m.bundled or not report.offline)


def preselect(report: ModelsReport, measuring: bool) -> str | None:
    """The model selected for the user: the recommendation, except a model that needs a download while the speed
    test that may advise against it still runs; then the included model (Next leads to no download)."""
    by_name = {m.name: m for m in report.models}
    rec = by_name.get(report.recommended)
    if rec is not None and choosable(rec, report) and (not measuring or rec.downloaded or rec.bundled):
        return rec.name
    return next((m.name for m in report.models if m.bundled and choosable(m, report)), None)


def fit_text(m: ModelInfo) -> str:
    """Short words for the table (the full reason is the cell's tooltip)."""
    if m.fit != "no":
        return FIT_WORDS[m.fit]
    if "slow" in m.why:
        return "too slow here"
    return "too big" if "needs" in m.why else "does not fit"


def gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GB"


def duration(seconds: float | None, measuring: bool = True) -> str:
    if seconds is None:
        return "measuring…" if measuring else "not measured"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def timing_words(report: ModelsReport) -> str:
    """Where the round times come from, in plain words: a short test scaled by size, or real rounds here."""
    speed = report.speed
    if speed is not None and speed.how.startswith("real rounds"):
        return (f"Round times come from {speed.how} on this computer, scaled by model size for the others; "
                "they are estimates.")
    return ("Round times are rough estimates: a short test of the included model on this computer, scaled by "
            "model size. Training shows the real times, and later estimates use them.")


def _label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _where(hw: HardwareInfo) -> str:
    """Where every model would train and sample here, and the fix for an idle GPU ("" from older engines)."""
    if not hw.trains_on:
        return ""
    return "<b>Each model:</b> " + html.escape(describe_placement(hw.trains_on, hw.samples_on, hw.accel_fix)) + "<br>"


class HardwarePage(QWizardPage):
    def __init__(self, wizard: "SetupWizard") -> None:
        super().__init__()
        self.w = wizard
        self.setTitle("Your computer")
        self.setSubTitle("SAPO Swarm trains a small language model on this computer, together with other "
                         "volunteers. First, what this computer can do.")
        self.text = _label("Looking at this computer…")
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addStretch(1)

    def show_report(self, report: ModelsReport) -> None:
        hw = report.hardware
        gpus = ", ".join(f"{g.name} ({gib(g.memory_bytes)})" + ("" if g.usable else " — not usable by this install")
                         for g in hw.gpus) or "none usable"
        self.text.setText(f"<b>Processor:</b> {hw.cpu_name}, {hw.cpu_physical} cores<br>"
                          f"<b>Memory:</b> {gib(hw.ram_total)} ({gib(hw.ram_available)} free now)<br>"
                          f"<b>Graphics card:</b> {gpus}<br><b>System:</b> {hw.os}<br>"
                          f"{_where(hw)}<br>"
                          "Next: a model that suits this computer.")
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802 - Qt's name
        return self.w.report is not None


class ModelPage(QWizardPage):
    COLUMNS = ["model", "download", "memory needed", "fits?", "one round here", "on disk"]

    def __init__(self, wizard: "SetupWizard") -> None:
        super().__init__()
        self.w = wizard
        self.setTitle("Choose a model")
        self.setSubTitle("Bigger models learn more but need more memory and time. The recommended one is selected.")
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setWordWrap(False)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table; arrow keys choose the model
        self.table.setAccessibleName("models")
        self.table.itemSelectionChanged.connect(self.completeChanged)
        self.table.itemSelectionChanged.connect(self._show_terms)
        self.reason = _label()
        self.terms = _label()
        self.terms.setStyleSheet(f"color: {palette.CAUTION_TEXT}")
        self.timing = _label("")
        self.timing.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.reason)
        layout.addWidget(self.terms)
        layout.addWidget(self.timing)
        self._touched = False
        self.table.itemClicked.connect(lambda *_: setattr(self, "_touched", True))

    def show_report(self, report: ModelsReport, measuring: bool = False) -> None:
        keep = self.selected() if self._touched else None
        self.table.setRowCount(len(report.models))
        for i, m in enumerate(report.models):
            name = (m.display_name.replace(" (bundled)", "") + ("  ★ recommended" if m.recommended else "")
                    + ("  (own licence terms)" if m.licence else ""))
            ok = choosable(m, report)
            on_disk = "yes" if m.downloaded or m.bundled else "no, offline" if report.offline else "no"
            cells = (name, "included with the app" if m.bundled else f"{m.file_size_bytes / 1e6:,.0f} MB", gib(m.needed_bytes),
                     fit_text(m), duration(m.round_s, measuring), on_disk)
            why = m.why if m.fit == "no" else OFFLINE_WHY if not ok else ""
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip("\n".join(x for x in (why or text, m.licence) if x))
                item.setData(Qt.ItemDataRole.UserRole, m.name)
                if not ok:
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
                self.table.setItem(i, j, item)
        target = keep or preselect(report, measuring)
        self.table.clearSelection()
        for i, m in enumerate(report.models):
            if m.name == target:
                self.table.selectRow(i)
        if measuring and target != report.recommended:
            self.reason.setText("The recommendation comes after the speed test; until then the included model "
                                "is selected (it needs no download).")
        else:
            self.reason.setText(f"Recommended: {report.reason}.")
        if report.offline and "offline" not in self.reason.text():  # the engine's reason may say it already
            self.reason.setText(self.reason.text() + " " + OFFLINE_WHY.split(", so")[0] + ": models that need a "
                                "download cannot be chosen.")
        if report.speed is not None:
            self.timing.setText(timing_words(report))
        self.completeChanged.emit()

    def _show_terms(self) -> None:
        report, name = self.w.report, self.selected()
        m = next((x for x in report.models if x.name == name), None) if report else None
        self.terms.setText(f"This model comes under its own terms: {m.licence}." if m and m.licence else "")

    def set_timing_text(self, text: str) -> None:
        self.timing.setText(text)

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)

    def isComplete(self) -> bool:  # noqa: N802
        return self.selected() is not None


class DownloadPage(QWizardPage):
    def __init__(self, wizard: "SetupWizard") -> None:
        super().__init__()
        self.w = wizard
        self.setTitle("Download the model")
        self.text = _label()
        self.bar = QProgressBar()
        self.bar.setAccessibleName("download progress")
        self.cancel = QPushButton("Cancel download")
        self.retry = QPushButton("Try again")
        self.download = ModelDownload(self)
        self.download.progress.connect(self._on_progress)
        self.download.done.connect(self._on_done)
        self.cancel.clicked.connect(self.download.cancel)
        self.retry.clicked.connect(self._start)
        layout = QVBoxLayout(self)
        for widget in (self.text, self.bar, self.cancel, self.retry):
            layout.addWidget(widget)
        layout.addStretch(1)
        self._ok = False

    def model(self) -> ModelInfo | None:
        name = self.w.model_page.selected()
        return next((m for m in self.w.report.models if m.name == name), None) if self.w.report else None

    def initializePage(self) -> None:  # noqa: N802
        m = self.model()
        self._ok = m is None or m.downloaded or m.bundled
        self.retry.hide()
        if self._ok:
            self.text.setText(f"{m.display_name if m else 'The model'} is already on this computer.")
            self.bar.setRange(0, 1)
            self.bar.setValue(1)
            self.cancel.hide()
        else:
            self._start()

    def _start(self) -> None:
        m = self.model()
        assert m is not None
        self.text.setText(f"Downloading {m.display_name} ({m.file_size_bytes / 1e6:,.0f} MB)…")
        self.bar.setRange(0, 0)
        self.cancel.show()
        self.retry.hide()
        self.download.start(m.name)

    def _on_progress(self, done: int, total: int) -> None:
        if total:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(1000 * done / total))
            self.text.setText(f"Downloading: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB")

    def _on_done(self, ok: bool, sentence: str) -> None:
        self._ok = ok
        self.cancel.hide()
        self.retry.setVisible(not ok)
        self.text.setText(sentence if not ok else "Downloaded.")
        self.bar.setRange(0, 1)  # a busy bar would keep moving after the download has ended
        self.bar.setValue(1 if ok else 0)
        self.completeChanged.emit()

    def cleanupPage(self) -> None:  # noqa: N802 - going Back cancels a download in progress
        if self.download.process.running:
            self.download.cancel()

    def isComplete(self) -> bool:  # noqa: N802
        return self._ok


class SwarmPage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.setTitle("Swarm")
        self.setSubTitle("Training together helps every model: computers share their best and worst answers.")
        self.form = SwarmForm()
        self.form.changed.connect(self.completeChanged)
        QVBoxLayout(self).addWidget(self.form)

    def isComplete(self) -> bool:  # noqa: N802
        return self.form.problem_text() is None


class NamePage(QWizardPage):
    def __init__(self, wizard: "SetupWizard") -> None:
        super().__init__()
        self.w = wizard
        self.setTitle("Your name in the swarm")
        self.name = QLabel()
        font = self.name.font()
        font.setPointSizeF(font.pointSizeF() * 1.8)
        font.setBold(True)
        self.name.setFont(font)
        self.name.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.addWidget(_label("Other volunteers see this computer under this name, made from its random "
                                "identity. Nothing about you or this computer is in it."))
        layout.addWidget(self.name)
        layout.addStretch(1)

        self.query = IdentityQuery(self)
        self.query.done.connect(lambda ident: (self.name.setText(ident.node_name), self.completeChanged.emit()))
        self.query.failed.connect(self.name.setText)

    def initializePage(self) -> None:  # noqa: N802
        if self.query.report is None and not self.query.process.running:
            self.name.setText("…")
            self.query.start(self.w.settings.data_dir)

    def isComplete(self) -> bool:  # noqa: N802
        return self.query.report is not None


class PowerPage(QWizardPage):
    def __init__(self, cores: int) -> None:
        super().__init__()
        self.setTitle("How much of the computer to use")
        self.setSubTitle("You can change this at any time, also while training (Preferences, or the tray icon).")
        self.resources = ResourcesForm(cores, stretch=False)
        self.rules = RulesForm(stretch=False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.resources)
        layout.addWidget(self.rules)
        layout.addStretch(1)

    def load(self, s: AppSettings) -> None:
        self.resources.load(s)
        self.rules.load(s)

    def store(self, s: AppSettings) -> None:
        self.resources.store(s)
        self.rules.store(s)


class SetupWizard(QWizard):
    def __init__(self, settings: AppSettings, cores: int = 1, measure: bool = True,
                 parent: QWidget | None = None, invite: str | None = None) -> None:
        super().__init__(parent)
        self.settings = copy.deepcopy(settings)
        self.cores = cores
        self.report: ModelsReport | None = None
        self.setWindowTitle("Set up SAPO Swarm")
        self.setWindowIcon(app_icon())
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.resize(860, 620)
        self.hardware_page = HardwarePage(self)
        self.model_page = ModelPage(self)
        self.download_page = DownloadPage(self)
        self.swarm_page = SwarmPage()
        self.name_page = NamePage(self)
        self.power_page = PowerPage(cores)
        for page in (self.hardware_page, self.model_page, self.download_page, self.swarm_page, self.name_page,
                     self.power_page):
            self.addPage(page)
        self.swarm_page.form.load(self.settings)
        self.power_page.load(self.settings)
        if invite:  # `sapo LINK` (a clicked sapo-swarm:// link): the link in the paste box, and once set up,
            self.swarm_page.form.invite.setText(invite)  # open at the join step
            if settings.setup_done:
                self.setStartId(self.pageIds()[3])
        self.query = ModelsQuery(self)
        self.query.done.connect(self._on_report)
        self.query.failed.connect(self._on_failed)
        self.timing = ModelsQuery(self)
        self.timing.done.connect(self._on_timing)
        self.timing.failed.connect(self._on_timing_failed)
        self._measure = measure  # a speed test is still to run
        self._measuring = False  # it runs
        self._measure_t0 = 0.0
        self._tick = QTimer(self)  # the speed test's seconds so far: its label says what is happening, live
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._show_measuring)
        self.query.start()

    def measuring(self) -> bool:
        """The speed test runs, or is about to: its result may change the recommendation."""
        return self._measuring or (self._measure and (self.report is None or self.report.speed is None))

    def _on_report(self, report: ModelsReport) -> None:
        self.report = report
        if report.speed is None and self._measure and not self._measuring:
            self._measure, self._measuring = False, True
            self._measure_t0 = time.monotonic()
            self.timing.start(measure=True, threads=self.cores)
            self._tick.start()
            self._show_measuring()
        self.hardware_page.show_report(report)
        self.model_page.show_report(report, self.measuring())

    def _on_timing(self, report: ModelsReport) -> None:
        self._measuring = False
        self._tick.stop()
        self._on_report(report)

    def _show_measuring(self) -> None:
        if not self._measuring:
            self._tick.stop()
            return
        self.model_page.set_timing_text(
            "Testing this computer's speed with the included model, once (the first time, most of it is "
            f"preparing the model, which training needs anyway): {time.monotonic() - self._measure_t0:.0f} s so far…")

    def _on_timing_failed(self, text: str) -> None:
        self._measuring = False
        self._tick.stop()
        self.model_page.set_timing_text("Round times could not be estimated: " + text)
        if self.report is not None:  # the recommendation stands without them
            self.model_page.show_report(self.report, measuring=False)

    def _on_failed(self, text: str) -> None:
        self.hardware_page.text.setText(f"{text}<br><br>Close this window and start SAPO Swarm again; "
                                        "if it keeps happening, run <tt>sapo-engine models</tt> in a terminal.")

    def result_settings(self) -> AppSettings:
        s = copy.deepcopy(self.settings)
        model = self.model_page.selected()
        if model:
            s.node["model"] = model
        self.swarm_page.form.store(s)
        self.power_page.store(s)
        s.setup_done = True
        return s

    def done(self, result: int) -> None:  # noqa: D102 - leaving stops what still runs
        for proc in (self.query.process, self.timing.process, self.download_page.download.process,
                     self.name_page.query.process):
            if proc.running:
                proc.kill()
                proc.wait(3000)
        super().done(result)
