"""Preferences: the wizard's choices, editable later (model by name, swarm, power and rules)."""

from __future__ import annotations

import copy

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QTabWidget, QVBoxLayout,
                               QWidget)

from app.forms import PowerForm, SwarmForm
from app.engine_tasks import ModelsQuery
from app.settings import AppSettings



class PreferencesDialog(QDialog):
    def __init__(self, settings: AppSettings, cores: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.settings = copy.deepcopy(settings)
        tabs = QTabWidget()
        self.power = PowerForm(cores)
        self.power.load(self.settings)
        self.swarm = SwarmForm()
        self.swarm.load(self.settings)
        model_tab = QWidget()
        form = QFormLayout(model_tab)
        self.model = QComboBox()
        self.model.setEditable(True)  # a path to a .gguf file is fine too
        self.model.setCurrentText(self.settings.model or "smollm2-135m")
        self.models = ModelsQuery(self)  # the catalog's names, from the engine
        self.models.done.connect(self._on_models)
        self.models.start()
        self.model.setAccessibleName("model")
        form.addRow("Model:", self.model)
        note = QLabel("A model not on this computer yet is downloaded at the next start. "
                      "Run the setup again (sapo --setup) to compare models on this computer.")
        note.setWordWrap(True)
        form.addRow(note)
        tabs.addTab(self.power, "Computer use")
        tabs.addTab(self.swarm, "Swarm")
        tabs.addTab(model_tab, "Model")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.swarm.changed.connect(self._check)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(self.buttons)
        self._check()

    def _on_models(self, report) -> None:  # type: ignore[no-untyped-def]
        current = self.model.currentText()
        self.model.clear()
        for m in report.models:
            self.model.addItem(m.name + ("" if m.fit != "no" else "  (does not fit this computer)"), m.name)
        self.model.setCurrentText(current)

    def done(self, result: int) -> None:  # noqa: D102
        if self.models.process.running:
            self.models.process.kill()
            self.models.process.wait(3000)
        super().done(result)

    def _check(self) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(self.swarm.problem_text() is None)

    def result_settings(self) -> AppSettings:
        s = copy.deepcopy(self.settings)
        self.power.store(s)
        self.swarm.store(s)
        s.node["model"] = self.model.currentText().split("  (")[0].strip() or None
        if s.node["model"] is None:
            s.node.pop("model")
        return s
