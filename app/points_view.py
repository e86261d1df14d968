"""The "Points" tab: contribution points in total and per day, as Folding@home shows them.

The formula is wire/points.py's, the relay leaderboard's too: 10 for each group of this computer's answers
that another volunteer trained on, plus 1 a round trained, up to one per such group. A view: it reads a
``RunModel`` in ``update``.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app import palette
from app.run_model import RunModel

EXPLAIN = ("Points count what helped others: 10 for each group of this computer's answers that another "
           "volunteer's model trained on, plus 1 for each round trained, up to one per such group. Rounds alone "
           "earn nothing, so points cannot be run up by sharing what nobody uses. The swarm's leaderboard counts "
           "the same way.")


class PointsView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.total = QLabel("–")
        font = self.total.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        self.total.setFont(font)
        self.total.setAccessibleName("contribution points in total")
        self.caption = QLabel("points in total")
        self.explain = QLabel(EXPLAIN)
        self.explain.setWordWrap(True)
        self.explain.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        self.chart = pg.PlotWidget()
        self.chart.setTitle("Points per day", size="11pt")
        self.chart.setAccessibleName("chart: points per day")
        self.chart.setLabel("left", "points")
        self.chart.showGrid(x=False, y=True, alpha=0.2)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.setMenuEnabled(False)
        self.chart.hideButtons()
        self.chart.setMinimumHeight(80)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=palette.REWARD)
        self.chart.addItem(self.bars)
        self.explain.setMinimumWidth(260)
        figures = QVBoxLayout()  # the total and what it means beside the chart: the tab stays short
        figures.addWidget(self.total)
        figures.addWidget(self.caption)
        figures.addWidget(self.explain, 1)
        layout = QHBoxLayout(self)
        layout.addLayout(figures, 1)
        layout.addWidget(self.chart, 3)
        self.days: list[tuple[object, int]] = []

    def update_from(self, model: RunModel) -> None:
        linked = model.swarm_configured or model.contributions or model.relay_rounds is not None
        self.total.setText(f"{model.points_total():,}" if linked else "–")
        self.caption.setText("points in total" if linked else "points in total: training alone earns none "
                                                              "(join a swarm to share)")
        self.days = model.points_by_day()
        xs = list(range(len(self.days)))
        heights = [p for _, p in self.days]
        self.bars.setOpts(x=xs, height=heights, width=0.7)
        step = max(1, len(xs) // 10)  # at most about ten date labels
        self.chart.getAxis("bottom").setTicks([[(i, f"{d:%d %b}") for i, (d, _) in enumerate(self.days)][::step]])
        if xs:
            self.chart.setXRange(-0.6, len(xs) - 0.4, padding=0)
            self.chart.setYRange(0, max(max(heights), 1) * 1.1, padding=0)
