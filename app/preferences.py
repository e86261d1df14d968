"""Preferences: the wizard's choices, editable later, in four tabs: Model, Resources, Schedule, Swarm.

Models are listed by their display names, marked as the setup's model page marks them ("too slow here",
"too big", "recommended"); choosing one that does not fit says why, at once. Comparing models by their
round times here is the setup wizard's job: a button opens it (the dialog closes with ``OPEN_SETUP``).
"""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout,
                               QLabel, QPushButton, QTabWidget, QVBoxLayout, QWidget)

from app import palette
from app.engine_tasks import ModelsQuery
from app.forms import SwarmForm
from app.resource_forms import ResourcesForm, RulesForm
from app.settings import AppSettings
from app.wizard import duration, fit_text
from wire.models import ModelInfo, ModelsReport

OPEN_SETUP = 2  # exec()'s result when the user asked for the setup wizard instead


def model_label(m: ModelInfo, recommended: str) -> str:
    """A catalog model as the list shows it: its display name, size, and a mark when it is not a good choice."""
    marks = []
    if m.name == recommended:
        marks.append("recommended")
    if m.fit == "no":
        marks.append(fit_text(m))
    elif m.fit == "tight":
        marks.append("tight fit")
    size = f"{m.file_size_bytes / 1024**2:.0f} MB"
    return f"{m.display_name} — {size}" + (f"  ({', '.join(marks)})" if marks else "")


def model_warning(m: ModelInfo | None) -> str:
    """What to say under the list about the chosen model; empty when nothing is wrong."""
    if m is None or m.fit != "no":
        return ""
    time = f" A round would take {duration(m.round_s, measuring=False)} here." if m.round_s else ""
    if fit_text(m) == "too slow here":
        return (f"The setup found {m.display_name} too slow for this computer ({m.why}).{time} You can still "
                "choose it, but training will make little progress.")
    return f"{m.display_name} does not fit this computer ({m.why}): the engine will refuse to start with it."


class ModelTab(QWidget):
    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.infos: dict[str, ModelInfo] = {}
        layout = QVBoxLayout(self)
        box = QGroupBox("The model this computer trains")
        form = QFormLayout(box)
        self.combo = QComboBox()
        self.combo.setAccessibleName("model")
        current = settings.model or "smollm2-135m"
        self.combo.addItem(current, current)  # its display name comes with the catalog, a moment later
        other = QPushButton("Other model file…")
        other.setToolTip("A llama, qwen2 or qwen3 model as a .gguf file on this computer")
        other.clicked.connect(self._pick_file)
        row = QHBoxLayout()
        row.addWidget(self.combo, 1)
        row.addWidget(other)
        form.addRow("Model:", row)
        self.warning = QLabel("")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {palette.ERROR_TEXT}")
        form.addRow(self.warning)
        # Each model keeps its own checkpoints in the data folder (engine.learning.checkpoint.model_store).
        note = QLabel("A model not on this computer yet is downloaded at the next start. Each model keeps its own "
                      "training: a new one starts from its first round, and switching back carries on where "
                      "that model stopped.")
        note.setWordWrap(True)
        note.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        form.addRow(note)
        layout.addWidget(box)
        compare = QGroupBox("Which model suits this computer?")
        v = QVBoxLayout(compare)
        v.addWidget(QLabel("The setup assistant measures this computer and shows each model's round time here."))
        self.setup_button = QPushButton("Open the setup assistant…")
        self.setup_button.setAccessibleName("open the setup assistant")
        h = QHBoxLayout()
        h.addWidget(self.setup_button)
        h.addStretch(1)
        v.addLayout(h)
        layout.addWidget(compare)
        layout.addStretch(1)
        self.combo.currentIndexChanged.connect(self._update)

    @property
    def selected(self) -> str | None:
        return self.combo.currentData() or None

    def show_report(self, report: ModelsReport) -> None:
        current = self.selected
        self.infos = {m.name: m for m in report.models}
        self.combo.blockSignals(True)
        self.combo.clear()
        for m in report.models:
            self.combo.addItem(model_label(m, report.recommended), m.name)
            self.combo.setItemData(self.combo.count() - 1, m.why or m.name, Qt.ItemDataRole.ToolTipRole)
        if current and current not in self.infos:  # a path to a .gguf file, or a name this engine does not list
            self.combo.addItem(current, current)
        self.combo.setCurrentIndex(max(0, self.combo.findData(current)))
        self.combo.blockSignals(False)
        self._update()

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A model file", "", "GGUF models (*.gguf)")
        if path:
            if self.combo.findData(path) < 0:
                self.combo.addItem(path, path)
            self.combo.setCurrentIndex(self.combo.findData(path))

    def _update(self) -> None:
        text = model_warning(self.infos.get(self.selected or ""))
        self.warning.setText(text)
        self.warning.setVisible(bool(text))


class PreferencesDialog(QDialog):
    def __init__(self, settings: AppSettings, cores: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.resize(640, 520)
        self.settings = copy.deepcopy(settings)
        self.model_tab = ModelTab(self.settings)
        self.model = self.model_tab.combo
        self.model_tab.setup_button.clicked.connect(lambda: self.done(OPEN_SETUP))
        self.resources = ResourcesForm(cores)
        self.resources.load(self.settings)
        self.rules = RulesForm()
        self.rules.load(self.settings)
        self.swarm = SwarmForm()
        self.swarm.load(self.settings)
        self.tabs = QTabWidget()
        for widget, title in ((self.model_tab, "Model"), (self.resources, "Resources"), (self.rules, "Schedule"),
                              (self.swarm, "Swarm")):
            self.tabs.addTab(widget, title)
        self.models = ModelsQuery(self)  # the catalog, with this computer's fit, from the engine
        self.models.done.connect(self.model_tab.show_report)
        self.models.start()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.swarm.changed.connect(self._check)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.buttons)
        self._check()

    def done(self, result: int) -> None:  # noqa: D102
        if self.models.process.running:
            self.models.process.kill()
            self.models.process.wait(3000)
        super().done(result)

    def _check(self) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(self.swarm.problem_text() is None)

    def result_settings(self) -> AppSettings:
        s = copy.deepcopy(self.settings)
        self.resources.store(s)
        self.rules.store(s)
        self.swarm.store(s)
        model = self.model_tab.selected
        if model:
            s.node["model"] = model
        else:
            s.node.pop("model", None)
        return s
