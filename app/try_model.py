"""The "Try your model" tab: ask a question, see the model before training and after, side by side.

A view: it emits ``asked`` with a ``wire.events.Ask`` and shows the ``answer`` event that comes back
(matched by id). The engine answers at its next pause point, so training stops for no longer than the
two answers take (engine/run/ask.py); both answers come from llama.cpp in the engine, the "before"
one with the trained adapter switched off. The app computes nothing about the answers itself.
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QFrame, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
                               QPushButton, QScrollArea, QVBoxLayout, QWidget)

from app import palette
from wire import events as ev

OWN_QUESTION = "My own question"
ANSWER_TOKENS = 128  # each answer's length limit: a few seconds of the model's time, not a round's
LIVE_STATES = ("running", "paused", "finishing")


class TryModelTab(QWidget):
    asked = Signal(object)  # ev.Ask

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self.pending: str | None = None  # the id of the ask in flight
        self._live = False

        self.source = QComboBox()
        self.source.setAccessibleName("where the question comes from")
        self.source.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # task names in full
        self.source.addItem(OWN_QUESTION, "")
        self.source.currentIndexChanged.connect(self._on_source)
        self.question = QLineEdit()
        self.question.setPlaceholderText("Type a question, e.g. What is 17 + 25?")
        self.question.setAccessibleName("your question")
        self.question.setMaxLength(ev.MAX_QUESTION_CHARS)
        self.question.returnPressed.connect(self.ask)
        self.question.textChanged.connect(self._update_button)
        self.ask_button = QPushButton("Ask both models")
        self.ask_button.clicked.connect(self.ask)
        row = QHBoxLayout()
        row.addWidget(self.source)
        row.addWidget(self.question, 1)
        row.addWidget(self.ask_button)

        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        self.asked_text = QLabel("")
        self.asked_text.setWordWrap(True)
        self.asked_text.setAccessibleName("the question asked")

        self.base_box, self.base_text, self.base_score = _answer_box("Before training (the base model)")
        self.trained_box, self.trained_text, self.trained_score = _answer_box("After training (your model)")
        answers = QGridLayout()
        answers.addWidget(self.base_box, 0, 0)
        answers.addWidget(self.trained_box, 0, 1)

        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.asked_text)
        layout.addLayout(answers, 1)
        scroll = QScrollArea()  # a short window scrolls the tab rather than growing the dashboard
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.set_live(False)

    # --- what the window tells it ---
    def set_tasks(self, tasks: list[str]) -> None:
        """The node's tasks (its ``start`` event): each is a source of questions to try."""
        keep = self.source.currentData()
        self.source.blockSignals(True)
        self.source.clear()
        self.source.addItem(OWN_QUESTION, "")
        for task in tasks:
            self.source.addItem(f"A question from {task.replace('_', ' ')}", task)
        index = self.source.findData(keep)
        self.source.setCurrentIndex(max(0, index))
        self.source.blockSignals(False)
        self._on_source()

    def set_live(self, live: bool) -> None:
        """Answers need the engine's model loaded: asking is possible while it runs or is paused."""
        self._live = live
        if not live:
            self.pending = None
            self.status.setText("Start training to try your model: the answers come from the model the engine "
                                "has loaded.")
        elif self.pending is None and not self.status.text().startswith("Answered"):
            self.status.setText("Ask a question: the model before training and your trained model answer it side "
                                "by side. Training pauses only while they answer.")
        self._update_button()

    def sent(self, ask: ev.Ask, ok: bool) -> None:
        """The window's word on sending ``ask``."""
        if not ok:
            self.pending = None
            self.status.setText("The engine is not running: start training, then ask again.")
        self._update_button()

    def show_answer(self, answer: ev.Answer) -> None:
        if answer.id != self.pending:
            return  # an answer to an earlier question, or another window's
        self.pending = None
        self._update_button()
        if answer.error:
            self.status.setText(f"No answer: {answer.error}")
            return
        task = f" (from {answer.task.replace('_', ' ')})" if answer.task else ""
        expected = f"\nExpected answer: {answer.expected}" if answer.expected else ""
        self.asked_text.setText(f"Question{task}: {answer.question}{expected}")
        self.base_text.setPlainText(answer.base)
        self.base_score.setText(_score_words(answer.base_score, answer.base_correct))
        if answer.trained is None:
            self.trained_box.setTitle("After training (your model)")
            self.trained_text.setPlainText("")
            self.trained_score.setText("No training yet: your model answers once its first round is done.")
        else:
            rounds = "round" if answer.round == 1 else "rounds"
            self.trained_box.setTitle(f"After {answer.round} {rounds} of training (your model)")
            self.trained_text.setPlainText(answer.trained)
            self.trained_score.setText(_score_words(answer.trained_score, answer.trained_correct))
        self.status.setText(f"Answered in {answer.seconds:.1f} s.")

    # --- behaviour ---
    def ask(self) -> None:
        if not self.ask_button.isEnabled():
            return
        task = self.source.currentData() or ""
        question = "" if task else self.question.text().strip()
        command = ev.Ask(id=f"try-{next(self._ids)}", question=question, task=task, max_tokens=ANSWER_TOKENS)
        self.pending = command.id
        self.status.setText("Waiting for the engine: it answers at its next pause point (within this round), "
                            "then trains on.")
        self._update_button()
        self.asked.emit(command)

    def _on_source(self) -> None:
        own = not self.source.currentData()
        self.question.setEnabled(own)
        self._update_button()

    def _update_button(self) -> None:
        has_question = bool(self.source.currentData()) or bool(self.question.text().strip())
        self.ask_button.setEnabled(self._live and self.pending is None and has_question)


def _answer_box(title: str) -> tuple[QGroupBox, QPlainTextEdit, QLabel]:
    box = QGroupBox(title)
    text = QPlainTextEdit()
    text.setReadOnly(True)
    text.setMinimumHeight(36)  # the dashboard's lower half is short: the box grows with the window
    text.setAccessibleName(title)
    text.setTabChangesFocus(True)
    score = QLabel("")
    score.setWordWrap(True)
    layout = QVBoxLayout(box)
    layout.addWidget(text, 1)
    layout.addWidget(score)
    return box, text, score


def _score_words(score: float | None, correct: bool | None) -> str:
    """A task question's score in words; a typed question has none."""
    if score is None:
        return ""
    return "✓ correct" if correct else f"✗ not correct (score {score:.2f} of 1)"
