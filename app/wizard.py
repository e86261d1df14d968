"""The first-run wizard: this computer -> a model that suits it -> its download -> a swarm ->
this node's name -> how much of the computer to use. Everything it learns about hardware
and models comes from ``sapo-engine models --json``; it writes ``AppSettings``.
"""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QProgressBar, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget, QWizard, QWizardPage)

from app import palette
from app.engine_tasks import IdentityQuery, ModelDownload, ModelsQuery
from app.forms import PowerForm, SwarmForm
from app.icon import app_icon
from app.settings import AppSettings
from wire.models import ModelInfo, ModelsReport

FIT_WORDS = {"fits": "fits", "tight": "tight fit", "no": "does not fit"}


def fit_text(m: ModelInfo) -> str:
    """Short words for the table (the full reason is the cell's tooltip)."""
    if m.fit != "no":
        return FIT_WORDS[m.fit]
    if "slow" in m.why:
        return "too slow here"
    return "too big" if "needs" in m.why else "does not fit"


def gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GB"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "measuring…"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def _label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


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
                          f"<b>Graphics card:</b> {gpus}<br><b>System:</b> {hw.os}<br><br>"
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
        self.timing = _label("Estimating each model's round time on this computer (once, about a minute)…")
        self.timing.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.reason)
        layout.addWidget(self.terms)
        layout.addWidget(self.timing)
        self._touched = False
        self.table.itemClicked.connect(lambda *_: setattr(self, "_touched", True))

    def show_report(self, report: ModelsReport) -> None:
        keep = self.selected() if self._touched else None
        self.table.setRowCount(len(report.models))
        for i, m in enumerate(report.models):
            name = (m.display_name.replace(" (bundled)", "") + ("  ★ recommended" if m.recommended else "")
                    + ("  (own licence terms)" if m.licence else ""))
            cells = (name, "included with the app" if m.bundled else f"{m.file_size_bytes / 1e6:,.0f} MB", gib(m.needed_bytes),
                     fit_text(m), duration(m.round_s), "yes" if m.downloaded else "no")
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip("\n".join(x for x in (m.why or text, m.licence) if x))
                item.setData(Qt.ItemDataRole.UserRole, m.name)
                if m.fit == "no":
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
                self.table.setItem(i, j, item)
        target = keep or report.recommended
        for i, m in enumerate(report.models):
            if m.name == target:
                self.table.selectRow(i)
        self.reason.setText(f"Recommended: {report.reason}.")
        if report.speed is not None:
            self.timing.setText("Round times are estimates, scaled from a short test of the included model on "
                                "this computer.")
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
        if ok:
            self.bar.setRange(0, 1)
            self.bar.setValue(1)
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
        self.setSubTitle("You can change this at any time, also while training.")
        self.form = PowerForm(cores)
        QVBoxLayout(self).addWidget(self.form)


class SetupWizard(QWizard):
    def __init__(self, settings: AppSettings, cores: int = 1, measure: bool = True,
                 parent: QWidget | None = None) -> None:
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
        self.power_page.form.load(self.settings)
        self.query = ModelsQuery(self)
        self.query.done.connect(self._on_report)
        self.query.failed.connect(self._on_failed)
        self.timing = ModelsQuery(self)
        self.timing.done.connect(self._on_report)
        self.timing.failed.connect(lambda text: self.model_page.set_timing_text(
            "Round times could not be estimated: " + text))
        self._measure = measure
        self.query.start()

    def _on_report(self, report: ModelsReport) -> None:
        self.report = report
        self.hardware_page.show_report(report)
        self.model_page.show_report(report)
        if report.speed is None and self._measure and not self.timing.process.running:
            self._measure = False
            self.timing.start(measure=True, threads=self.cores)

    def _on_failed(self, text: str) -> None:
        self.hardware_page.text.setText(f"{text}<br><br>Close this window and start SAPO Swarm again; "
                                        "if it keeps happening, run <tt>sapo-engine models</tt> in a terminal.")

    def result_settings(self) -> AppSettings:
        s = copy.deepcopy(self.settings)
        model = self.model_page.selected()
        if model:
            s.node["model"] = model
        self.swarm_page.form.store(s)
        self.power_page.form.store(s)
        s.setup_done = True
        return s

    def done(self, result: int) -> None:  # noqa: D102 - leaving stops what still runs
        for proc in (self.query.process, self.timing.process, self.download_page.download.process,
                     self.name_page.query.process):
            if proc.running:
                proc.kill()
                proc.wait(3000)
        super().done(result)
