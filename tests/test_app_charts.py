"""The stacked-bar charts keep their legend clear of the bars, at any chart size and bar height (real widgets,
offscreen): the legend is a fixed number of pixels tall, so the room above the bars is set in pixels."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PySide6.QtCore import QPointF

from app.charts import GroupsChart, TimeChart


def _legend_bottom_and_bar_top(chart, tallest: float) -> tuple[float, float]:
    vb = chart.widget.getViewBox()
    legend_bottom = chart.widget.getPlotItem().legend.sceneBoundingRect().bottom()
    bar_top = vb.mapViewToScene(QPointF(1.0, tallest)).y()  # scene y grows downwards
    return legend_bottom, bar_top


@pytest.mark.parametrize("size", [(900, 180), (520, 200), (380, 260), (1200, 420)])
@pytest.mark.parametrize("own", [2, 4, 7, 12])
def test_groups_legend_never_covers_a_bar(qtbot, size, own):
    chart = GroupsChart()
    qtbot.addWidget(chart.widget)
    chart.widget.resize(*size)
    chart.widget.show()
    qtbot.waitExposed(chart.widget)
    rows = [[own, 2, 1], [1, 2, 0], [3, 0, 0]]  # own, from the swarm, refused
    chart.set_rows([1, 2, 3], rows)
    qtbot.wait(50)
    legend_bottom, bar_top = _legend_bottom_and_bar_top(chart, own + 3)
    assert legend_bottom < bar_top, f"legend ends at y={legend_bottom:.0f}, the tallest bar begins at {bar_top:.0f}"


def test_time_legend_clear_after_the_chart_is_made_smaller(qtbot):
    chart = TimeChart()
    qtbot.addWidget(chart.widget)
    chart.widget.resize(1000, 500)
    chart.widget.show()
    qtbot.waitExposed(chart.widget)
    chart.set_rows([1, 2], [[5.0, 0.1, 6.0, 0.2, 0.0, 0.3], [4.0, 0.1, 5.0, 0.2, 40.0, 0.3]])
    chart.widget.resize(420, 190)  # its legend wraps to more rows; the range follows the resize
    qtbot.wait(100)
    legend_bottom, bar_top = _legend_bottom_and_bar_top(chart, 49.6)
    assert legend_bottom < bar_top


def test_groups_marks_only_the_rounds_where_groups_went_unused(qtbot):
    chart = GroupsChart()
    qtbot.addWidget(chart.widget)
    rounds = [SimpleNamespace(round=n, own=4, external=2, rejected=0, dropped=d) for n, d in [(1, 0), (2, 3), (3, 0), (4, 1)]]
    chart.update(SimpleNamespace(rounds=rounds))
    xs, ys = chart._unused.getData()
    assert list(xs) == [2, 4] and list(ys) == [3, 1]
