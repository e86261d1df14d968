"""The main screen: one big status line and its button on top (BOINC's simple view), then
what the node is doing, its charts, the recent answers, the swarm, and the log.

A view only: it reads a ``RunModel`` in ``refresh`` and emits signals for the buttons; the
window decides what they do.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFocusEvent, QFont
from PySide6.QtWidgets import (QAbstractItemView, QFrame, QGridLayout, QHBoxLayout, QHeaderView, QLabel,
                               QPlainTextEdit, QProgressBar, QPushButton, QSizePolicy, QSplitter, QTableWidget,
                               QTableWidgetItem, QTabWidget, QToolTip, QVBoxLayout, QWidget)

from app import palette
from app.charts import GroupsChart, ProgressChart, TimeChart
from app.run_model import LOG_SIZE, RunModel
from wire.points import points
from app.points_view import PointsView
from app.try_model import TryModelTab

REASON_WORDS = {
    "bad_spec": "unknown or malformed task",
    "question_mismatch": "question does not match its task",
    "answer_mismatch": "wrong reference answer",
    "reward_mismatch": "scores did not match the answers",
}


class Card(QFrame):
    """A figure with a caption under it."""

    def __init__(self, caption: str, tooltip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setToolTip(tooltip)
        self.value = QLabel("–")
        font = self.value.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        self.value.setFont(font)
        self.caption = QLabel(caption)
        self.caption.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.value)
        layout.addWidget(self.caption)
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # keyboard users reach the tooltip too (focusInEvent)
        self.setAccessibleName(caption)

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802 - Qt's name
        """Tab shows what the mouse's hover shows: the explanation in the tooltip."""
        super().focusInEvent(event)
        # After the focus change settles: a tooltip hides itself on the focus events still being delivered.
        QTimer.singleShot(0, self, self._show_tip)

    def _show_tip(self) -> None:
        if self.hasFocus():
            QToolTip.showText(self.mapToGlobal(self.rect().bottomLeft()), self.toolTip(), self)

    def set(self, value: str, caption: str | None = None) -> None:
        self.value.setText(value)
        self.setAccessibleDescription(value)
        if caption is not None:
            self.caption.setText(caption)


class Dashboard(QWidget):
    start_clicked = Signal()
    pause_clicked = Signal()
    resume_clicked = Signal()
    finish_clicked = Signal()
    stop_clicked = Signal()
    restart_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        root = QVBoxLayout(self)
        root.addLayout(self._header())
        root.addWidget(self._problem_banner())
        root.addLayout(self._cards())
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self._charts())
        split.addWidget(self._tabs())
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        root.addWidget(split, 1)
        self._state = ""
        self._pausing = False

    # --- building ---
    def _header(self) -> QHBoxLayout:
        self.status = QLabel("Stopped")
        font = self.status.font()
        font.setPointSizeF(font.pointSizeF() * 2.0)
        font.setWeight(QFont.Weight.DemiBold)
        self.status.setFont(font)
        self.status.setAccessibleName("status")
        self.phase = QLabel("")
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(14)
        self.progress.setAccessibleName("progress of this step")
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        left = QVBoxLayout()
        left.addWidget(self.status)
        left.addWidget(self.phase)
        left.addWidget(self.progress)
        left.addWidget(self.message)
        self.where = QLabel("")  # where training and sampling run; the command that puts an idle GPU to work
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # the fix can be copied
        self.where.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        self.where.setAccessibleName("where it computes")
        left.addWidget(self.where)

        self.main_button = QPushButton("Start")
        self.main_button.setMinimumSize(150, 56)
        bf = self.main_button.font()
        bf.setPointSizeF(bf.pointSizeF() * 1.4)
        bf.setBold(True)
        self.main_button.setFont(bf)
        self.main_button.clicked.connect(self._on_main)
        self.finish_button = QPushButton("Finish this round, then pause")
        self.finish_button.setToolTip("The round in progress is completed and saved, then training pauses.")
        self.finish_button.clicked.connect(self.finish_clicked)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop after the round in progress; the next start continues from there.")
        self.stop_button.clicked.connect(self.stop_clicked)
        buttons = QVBoxLayout()
        buttons.addWidget(self.main_button)
        row = QHBoxLayout()
        row.addWidget(self.finish_button)
        row.addWidget(self.stop_button)
        buttons.addLayout(row)

        top = QHBoxLayout()
        top.addLayout(left, 1)
        top.addLayout(buttons)
        return top

    def _problem_banner(self) -> QFrame:
        self.banner = QFrame()
        self.banner.setFrameShape(QFrame.Shape.StyledPanel)
        self.banner.setStyleSheet(f"QFrame {{ background: {palette.PROBLEM_BANNER}; }}")
        self.banner_text = QLabel()
        self.banner_text.setWordWrap(True)
        self.banner_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner_details = QPlainTextEdit()
        self.banner_details.setReadOnly(True)
        self.banner_details.setMaximumHeight(120)
        self.banner_details.setAccessibleName("last lines the engine wrote")
        self.restart_button = QPushButton("Restart")
        self.restart_button.clicked.connect(self.restart_clicked)
        layout = QGridLayout(self.banner)
        layout.addWidget(self.banner_text, 0, 0)
        layout.addWidget(self.restart_button, 0, 1, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.banner_details, 1, 0, 1, 2)
        self.banner.hide()
        return self.banner

    def _cards(self) -> QHBoxLayout:
        self.card_round = Card("rounds done", "A round: the model answers a few questions several times, "
                                              "scores its answers, and learns from the better ones.")
        self.card_reward = Card("reward, last 5 rounds",
                                "The average score of the answers while training: 1 for a correct answer, plus a "
                                "small bonus for a well-formed one (so the best is a little above 1), 0 otherwise.")
        self.card_accuracy = Card("correct in training, last 5 rounds", ACCURACY_TIP)
        self.card_test = Card("practice test", TEST_TIP)
        self.card_speed = Card("answers written per minute", "How fast this computer writes answers to this "
                                                            "round's questions (while it writes; learning takes "
                                                            "its own time after).")
        self.card_swarm = Card("volunteers online", "Computers in the same swarm right now, this one included.")
        self.card_you = Card("shared / used by others", "Groups of answers this computer shared with the swarm, "
                                                        "and how many other volunteers learned from.")
        row = QHBoxLayout()
        for card in (self.card_round, self.card_reward, self.card_accuracy, self.card_test, self.card_speed,
                     self.card_swarm, self.card_you):
            card.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            row.addWidget(card)
        return row

    def _charts(self) -> QWidget:
        self.progress_chart = ProgressChart()
        self.time_chart = TimeChart()
        self.groups_chart = GroupsChart()
        for chart in (self.progress_chart, self.time_chart, self.groups_chart):
            chart.widget.setAccessibleDescription(chart.widget.toolTip())  # a screen reader reads what a tooltip shows
        box = QWidget()
        grid = QGridLayout(box)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.progress_chart.widget, 0, 0, 1, 2)
        grid.addWidget(self.time_chart.widget, 1, 0)
        grid.addWidget(self.groups_chart.widget, 1, 1)
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 2)
        return box

    def _tabs(self) -> QTabWidget:
        self.tabs = QTabWidget()
        self.feed = _table(["from", "question", "answer", "reward"])
        self.feed.setToolTip("Recent answers, this computer's own and those received from the swarm.")
        self.feed.setAccessibleName("recent answers")
        self.leaderboard = _table(["place", "volunteer", "points", "shared", "used by others", "rounds"])
        self.leaderboard.setAccessibleName("leaderboard of the swarm")
        self.refused = QLabel("")
        self.refused.setWordWrap(True)
        self.rules = QLabel("")  # the swarm's rules this computer follows
        self.rules_notice = QLabel("")  # other rules announced, or refused: what this computer does instead
        for label in (self.rules, self.rules_notice):
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.PlainText)  # a relay's swarm name or reason is never markup
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # keys can be copied
            label.hide()
        self.rules.setAccessibleName("the swarm's rules")
        self.rules_notice.setAccessibleName("about the swarm's rules")
        self.rules_notice.setStyleSheet(f"QLabel {{ background: {palette.PROBLEM_BANNER}; padding: 4px; }}")
        swarm = QWidget()
        sl = QVBoxLayout(swarm)
        sl.addWidget(self.rules)
        sl.addWidget(self.rules_notice)
        sl.addWidget(self.leaderboard)
        sl.addWidget(self.refused)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_SIZE)
        self.log.setAccessibleName("log")
        self.log.setTabChangesFocus(True)  # read-only: Tab moves on rather than being swallowed
        self.tabs.addTab(self.feed, "Recent answers")
        self.tabs.addTab(swarm, "Swarm")
        self.points_view = PointsView()
        self.tabs.addTab(self.points_view, "Points")
        self.try_model = TryModelTab()
        self.tabs.addTab(self.try_model, "Try your model")
        self.tabs.addTab(self.log, "Log")
        return self.tabs

    # --- behaviour ---
    def _on_main(self) -> None:
        if self._pausing:  # not paused yet: the button takes the pause back
            self.resume_clicked.emit()
        elif self._state in ("running", "finishing"):
            self.pause_clicked.emit()
        elif self._state == "paused":
            self.resume_clicked.emit()
        else:
            self.start_clicked.emit()

    def add_log(self, line: str) -> None:
        self.log.appendPlainText(line)

    def show_problem(self, sentence: str, tail: tuple[str, ...], can_restart: bool = True) -> None:
        self.banner_text.setText(sentence)
        self.banner_details.setPlainText("\n".join(tail))
        self.banner_details.setVisible(bool(tail))
        self.restart_button.setVisible(can_restart)
        self.banner.show()

    def hide_problem(self) -> None:
        self.banner.hide()

    def set_controls(self, state: str, replay: bool = False, pausing: bool = False) -> None:
        """Buttons follow the engine's real state (``pausing``: a pause asked for, not reached yet)."""
        self._state, self._pausing = state, pausing and state in ("running", "finishing")
        labels = {"running": "Pause", "finishing": "Pause", "paused": "Resume"}
        self.main_button.setText("Resume" if self._pausing else labels.get(state, "Start"))
        busy = state in ("starting", "stopping")
        self.main_button.setEnabled(not replay and not busy)
        self.finish_button.setEnabled(not replay and state == "running")
        self.stop_button.setEnabled(not replay and state in ("running", "paused", "finishing", "starting"))
        for button in (self.main_button, self.finish_button, self.stop_button):
            button.setVisible(not replay)

    def refresh(self, model: RunModel, now: float | None = None) -> None:
        self.status.setText(model.headline(now))
        text, done, total = model.phase_text()
        left = model.eta_text(now) if model.download is None else ""
        self.phase.setText(" · ".join(x for x in (text, left) if x))
        self.progress.setVisible(bool(text) or model.state == "starting")
        progress = model.round_eta(now) if model.download is None else None
        if progress is not None and progress.fraction is not None:  # Folding@home's bar: the round (or test) done
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(1000 * progress.fraction))
        elif total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
        elif model.state in ("running", "starting", "finishing", "stopping"):
            self.progress.setRange(0, 0)  # busy
        else:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.message.setText(model.error or model.message)
        self.where.setText(model.where[:1].upper() + model.where[1:])
        self.where.setVisible(bool(model.where))
        self._refresh_cards(model)
        for chart in (self.progress_chart, self.time_chart, self.groups_chart):
            chart.update(model)
        self._refresh_feed(model)
        self._refresh_swarm(model)
        self.points_view.update_from(model)

    def _refresh_cards(self, m: RunModel) -> None:
        # Every card is set on every refresh, "–" without data: a new run's model never shows the last one's figures.
        recent = m.rounds[-5:]
        self.card_round.setToolTip(round_tooltip(m.settings))
        per_hour = m.rounds_per_hour()
        self.card_round.set(str(m.current_round) + (f" / {m.round_end}" if m.round_end else ""),
                            f"rounds done, about {per_hour:.0f} an hour" if per_hour and per_hour >= 2
                            else f"rounds done, about {per_hour:.1f} an hour" if per_hour else "rounds done")
        self.card_reward.set(f"{sum(r.reward for r in recent) / len(recent):.2f}" if recent else "–",
                             f"reward (0 to {m.best_reward():.2f}), last 5 rounds")
        caption, held_back = m.accuracy_caption()
        self.card_accuracy.set(f"{100 * sum(r.accuracy for r in recent) / len(recent):.0f} %" if recent else "–",
                               caption)
        self.card_accuracy.setToolTip(ACCURACY_TIP + held_back)
        speed = recent[-1].answers_per_min if recent else None
        self.card_speed.set(f"{speed:.0f}" if speed is not None else "–")
        if m.evals:
            rnd, acc, _ = m.evals[-1]
            first = m.evals[0][1]
            self.card_test.set(f"{100 * acc:.0f} %", "practice test, before training" if rnd == 0
                               else f"practice test, round {rnd} ({100 * first:.0f} % at the start)")
        else:
            self.card_test.set("–", "practice test")
        self.card_swarm.set(*m.swarm_card())
        place = f", place {m.rank}" if m.rank else ""
        self.card_you.set(f"{m.shared_total} / {m.adopted_total}", f"shared / used by others{place}")

    def _refresh_feed(self, m: RunModel) -> None:
        rows = list(m.feed)
        self.feed.setRowCount(len(rows))
        for i, s in enumerate(rows):
            answer = s.answer if s.answer is not None else "(no answer)"
            mark = "✓ " if s.correct else ""
            for j, text in enumerate(("this computer" if s.source == "own" else s.source,
                                      s.question, mark + answer, f"{s.reward:.2f}")):
                self.feed.setItem(i, j, _item(text))

    def _refresh_swarm(self, m: RunModel) -> None:
        rules, notice = m.rules_text()
        for label, text in ((self.rules, rules), (self.rules_notice, notice)):
            label.setText(text)
            label.setVisible(bool(text))
        # The notice matters more than the tab it sits on: the tab's name says there is one.
        self.tabs.setTabText(self.tabs.indexOf(self.rules.parentWidget()), "Swarm ⚠" if notice else "Swarm")
        self.leaderboard.setRowCount(len(m.leaderboard))
        for i, row in enumerate(m.leaderboard):
            name = row.name + (" (you)" if row.node_id == m.node_id else "")
            for j, text in enumerate((str(i + 1), name, str(points(row.groups_adopted, row.rounds)),
                                      str(row.groups_shared), str(row.groups_adopted), str(row.rounds))):
                self.leaderboard.setItem(i, j, _item(text))
        if m.rejected_reasons:
            parts = [f"{REASON_WORDS.get(k, k.replace('_', ' '))}: {v}" for k, v in m.rejected_reasons.most_common()]
            self.refused.setText("Shared answers refused so far — " + ", ".join(parts))
        else:
            self.refused.setText("" if m.relay_connected is None else "No shared answers refused so far.")


ACCURACY_TIP = ("The share of training answers that were exactly right. While training the model writes several "
                "different answers to each question on purpose (some of them guesses), to learn which work "
                "better: so this is lower than the practice test, where it gives its one best answer.")
TEST_TIP = ("New questions the model never trains on, answered once each with its single best answer (no "
            "variety): the honest measure of progress. Compare it with its own figure before training, not with "
            "'correct in training', which counts deliberately varied answers and is lower.")


def round_tooltip(settings: dict) -> str:
    """What a round is, with this run's I, J and L in plain words."""
    i, j, l = (settings.get(k, "?") for k in ("local_groups", "external_groups", "completions"))
    return ("A round: the model answers questions, scores its own answers, and learns from the better ones.\n"
            f"I = {i}: questions this computer asks itself each round.\n"
            f"J = {j}: groups of answers taken from other volunteers each round (re-checked here first).\n"
            f"L = {l}: answers written to each question; learning compares them with each other.\n"
            "Reward: 1 for a correct answer, plus a small bonus for a well-formed one.")


def _table(headers: list[str]) -> QTableWidget:
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().setVisible(False)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setWordWrap(False)
    t.setTabKeyNavigation(False)  # Tab leaves the table (one stop); arrow keys move inside it
    header = t.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(False)
    if "question" in headers:
        header.setSectionResizeMode(headers.index("question"), QHeaderView.ResizeMode.Stretch)
    return t


def _item(text: str) -> QTableWidgetItem:
    item = QTableWidgetItem(text.replace("\n", " "))
    item.setToolTip(text)
    return item
