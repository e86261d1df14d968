"""The dashboard's charts (pyqtgraph): learning progress, time per round, groups per round."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from app import palette
from app.run_model import RoundPoint, RunModel, moving_average

pg.setConfigOptions(antialias=True, background=palette.CHART_BACKGROUND, foreground=palette.CHART_TEXT)

AVERAGE_WINDOW = 5


def _plot(title: str, left: str, parent: QWidget | None) -> pg.PlotWidget:
    w = pg.PlotWidget(parent=parent)
    w.setTitle(title, size="11pt")
    w.setAccessibleName(f"chart: {title}")
    w.setLabel("left", left)
    w.setLabel("bottom", "round")
    w.showGrid(x=False, y=True, alpha=0.2)
    w.setMouseEnabled(x=False, y=False)
    w.setMenuEnabled(False)
    w.hideButtons()
    w.setMinimumHeight(180)
    return w


def integer_rounds(widget: pg.PlotWidget, xs: list[int]) -> None:
    """Rounds are whole numbers: one tick per round while there are few, automatic ticks after."""
    span = (max(xs) - min(xs)) if xs else 0
    axis = widget.getAxis("bottom")
    if span <= 12:
        axis.setTickSpacing(1, 1)
    else:
        axis.setTickSpacing()  # back to automatic


def _see_through(color: str, alpha: int) -> QColor:
    c = QColor(color)
    c.setAlpha(alpha)
    return c


def _faint(color: str) -> QColor:
    return _see_through(color, 90)


class ProgressChart:
    """Reward and correct answers per round (faint), their moving averages (bold), test results (dots)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        self.widget = _plot("How well it answers", "reward; share correct (1 = 100 %)", parent)
        self.top = 1.0  # the axis reaches the best reward of the run: 1 plus its format bonus
        self.widget.setYRange(0, self.top, padding=0.02)
        legend = self.widget.addLegend(offset=(8, 8), labelTextSize="9pt")
        legend.setBrush(pg.mkBrush(_see_through(palette.CHART_BACKGROUND, 200)))
        self._reward = self.widget.plot(pen=pg.mkPen(_faint(palette.REWARD), width=1))
        self._accuracy = self.widget.plot(pen=pg.mkPen(_faint(palette.ACCURACY), width=1))
        self._reward_avg = self.widget.plot(pen=pg.mkPen(palette.REWARD, width=3),
                                            name=f"reward ({AVERAGE_WINDOW}-round average)")
        self._accuracy_avg = self.widget.plot(pen=pg.mkPen(palette.ACCURACY, width=3),
                                              name=f"correct in training ({AVERAGE_WINDOW}-round average)")
        self._test = self.widget.plot(pen=None, symbol="o", symbolSize=9, symbolBrush=palette.PRACTICE_TEST,
                                      symbolPen=palette.DOT_EDGE,
                                      name="practice test (new questions, best answer)")
        self.widget.setToolTip(
            "Reward: the score each training answer gets, 1 for a correct answer plus a small bonus for a "
            "well-formed one, so it can go a little above 1.\n"
            "Correct in training: the share of training answers that were exactly right. The model writes "
            "several varied answers to each question on purpose, so this is lower than the test.\n"
            "Practice test: new questions the model never trains on, one best answer each; "
            "this shows whether it really improves (compare it with its first dot).")

    def update(self, model: RunModel) -> None:
        xs = [r.round for r in model.rounds]
        reward = [r.reward for r in model.rounds]
        top = max([model.best_reward()] + reward)
        if top != self.top:
            self.top = top
            self.widget.setYRange(0, top, padding=0.02)
        accuracy = [r.accuracy for r in model.rounds]
        self._reward.setData(xs, reward)
        self._accuracy.setData(xs, accuracy)
        self._reward_avg.setData(xs, moving_average(reward, AVERAGE_WINDOW) if xs else [])
        self._accuracy_avg.setData(xs, moving_average(accuracy, AVERAGE_WINDOW) if xs else [])
        self._test.setData([e[0] for e in model.evals], [e[1] for e in model.evals])
        integer_rounds(self.widget, xs + [e[0] for e in model.evals])


class _StackedBars:
    """Stacked bars per round, one colour per part; rebuilt on each update (a few hundred bars at most)."""

    def __init__(self, title: str, left: str, parts: list[tuple[str, str]], parent: QWidget | None,
                 legend_cols: int = 4) -> None:
        self.widget = _plot(title, left, parent)
        self._legend = self.widget.addLegend(offset=(4, 2), labelTextSize="8pt", colCount=legend_cols,
                                             verSpacing=-6, horSpacing=8)
        self._legend.setBrush(pg.mkBrush(_see_through(palette.CHART_BACKGROUND, 220)))
        self._bars = []
        for name, color in parts:
            bar = pg.BarGraphItem(x=[], height=[], y0=[], width=0.8, brush=color, pen=pg.mkPen(None), name=name)
            self.widget.addItem(bar)  # a named item joins the legend by itself
            self._bars.append(bar)
        self._tallest = 0.0
        # The legend is a fixed number of pixels tall: the headroom over the bars depends on the chart's height.
        self.widget.getViewBox().sigResized.connect(lambda *_: self._fit_y())

    def set_rows(self, xs: list[int], rows: list[list[float]]) -> None:
        integer_rounds(self.widget, xs)
        base = [0.0] * len(xs)
        for bar, heights in zip(self._bars, zip(*rows) if rows else [[] for _ in self._bars]):
            heights = list(heights)
            bar.setOpts(x=xs, height=heights, y0=list(base), width=0.8)
            base = [b + h for b, h in zip(base, heights)]
        if xs:
            self.widget.setXRange(min(xs) - 0.6, max(xs) + 0.6, padding=0)
            self._tallest = max(base)
            self._fit_y()

    def _fit_y(self) -> None:
        """Leave the legend's height, plus a gap, free above the tallest bar (pixels to data units)."""
        plot_px = self.widget.getViewBox().height()
        legend_px = self._legend.boundingRect().height() + 2 + 6  # its offset from the top, and a gap
        free = min(0.75, legend_px / plot_px) if plot_px > 0 else 0.5
        self.widget.setYRange(0, max(self._tallest, 1) / (1 - free), padding=0)


class TimeChart(_StackedBars):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Where each round's time goes", "seconds", [
            ("writing answers", palette.TIME_WRITING), ("checking answers", palette.TIME_CHECKING),
            ("learning", palette.TIME_LEARNING), ("loading the new model", palette.TIME_LOADING),
            ("practice test", palette.TIME_TESTING), ("other", palette.TIME_OTHER)], parent, legend_cols=3)
        self.widget.setToolTip("Writing answers: the model answers this round's questions.\n"
                               "Checking answers: each answer is scored against the task's rules.\n"
                               "Learning: it trains on the answers that scored better than their siblings.\n"
                               "Loading the new model: the improved model replaces the old one for the next round.\n"
                               "Practice test: every few rounds, held-out questions check real progress.")

    def update(self, model: RunModel) -> None:
        self.set_rows([r.round for r in model.rounds], [_time_row(r) for r in model.rounds])


class GroupsChart(_StackedBars):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Groups of answers per round", "groups", [
            ("own", palette.GROUPS_OWN), ("from the swarm", palette.GROUPS_FROM_SWARM),
            ("refused", palette.GROUPS_REFUSED)], parent)
        # Unused groups are part of own + swarm (all answers scored alike), so they are marks, not a stack.
        self._unused = self.widget.plot(pen=None, symbol="x", symbolSize=10, symbolPen=pg.mkPen(palette.GROUPS_UNUSED_MARK, width=2),
                                        name="not used (answers all alike)")
        self.widget.setToolTip(
            "Each question gets several answers: a group.\n"
            "Own: groups this computer wrote. From the swarm: groups other volunteers shared, re-checked here.\n"
            "Refused: shared groups that failed the checks (wrong score, unknown task, malformed).\n"
            "x: how many of the own and swarm groups taught nothing, because all their answers scored the same.")

    def update(self, model: RunModel) -> None:
        xs = [r.round for r in model.rounds]
        self.set_rows(xs, [[r.own, r.external, r.rejected] for r in model.rounds])
        # A mark only where something was not used: an x at 0 on every other round reads as a data point.
        unused = [(r.round, r.dropped) for r in model.rounds if r.dropped > 0]
        self._unused.setData([x for x, _ in unused], [n for _, n in unused])


def _time_row(r: RoundPoint) -> list[float]:
    return [r.generate_s, r.score_s, r.train_s, r.swap_s, r.evaluate_s, r.other_s]
