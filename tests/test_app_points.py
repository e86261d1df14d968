"""Contribution points in the app: the Points tab's total and per-day chart, and the leaderboard's points,
from the engine's events (wire/points.py's formula, the relay's too). The real window offscreen, the real
channel, a scripted engine child (tests/scripted_engine.py)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from app import engine_process
from wire import events as ev
from wire.points import points

SCRIPT = Path(__file__).resolve().parent / "scripted_engine.py"
NODE = "ef" * 16
OTHER = "12" * 16
# Noon on three days in a row (local time: the chart's days are the volunteer's)
DAY1 = dt.datetime(2025, 3, 1, 12).timestamp()
DAY = 86_400


def _round(n: int, t: float, adopted: int | None, connected: bool | None = True) -> ev.Round:
    return ev.Round(time=t, round=n, reward_mean=0.5, accuracy=0.25, format_rate=1.0, task_score=0.25, groups=4,
                    gen_tokens=100, gen_s=2.0, gen_tokens_per_s=50.0, loss=0.1, train_s=5.0, swap_ms=100.0,
                    checkpoint_ms=10.0, groups_trained=3, groups_dropped=1, tokens_trained=100, clip_low_frac=0.0,
                    clip_high_frac=0.0, grad_norm=1.0, round_s=8.0, relay_connected=connected, peers=2,
                    shared_total=2 * n, adopted_total=adopted)


def test_points_tab_shows_the_total_and_points_per_day(qtbot, window, tmp_path, monkeypatch):
    history = [_round(1, DAY1, 0), _round(2, DAY1 + 60, 2),  # day 1: 2 adopted, 2 rounds -> 22
               _round(3, DAY1 + 2 * DAY, 2, connected=False),  # day 3: trained alone, the relay counts nothing
               _round(4, DAY1 + 2 * DAY + 60, 5)]  # day 3: 5 adopted, 3 rounds counted -> 53 in all, 31 that day
    you = ev.LeaderRow(NODE, "you-node", 8, 5, 3)
    events = [ev.Start(node_id=NODE, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                       round_start=4, round_end=None, threads=2, settings={"relay": "ws://127.0.0.1:1", "swarm": "s"}),
              ev.History(events=history), ev.StateChanged(state="running", round=4),
              ev.Swarm(peers_online=2, groups_per_minute=1.0, rank=2, you=you,
                       leaderboard=[ev.LeaderRow(OTHER, "other-node", 3, 9, 40), you])]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(ev.encode(e) for e in events))
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(SCRIPT), str(path)]))
    seen: list[ev.Event] = []
    window.engine.event.connect(seen.append)
    window.start()
    qtbot.wait_until(lambda: len(seen) == len(events), timeout=20_000)
    window.refresh()

    view = window.dashboard.points_view
    assert view.total.text() == "53" == str(points(5, 3))
    assert [(d.isoformat(), p) for d, p in view.days] == [("2025-03-01", 22), ("2025-03-02", 0), ("2025-03-03", 31)]
    assert list(view.bars.opts["height"]) == [22, 0, 31]
    ticks = view.chart.getAxis("bottom")._tickLevels[0]
    assert [label for _, label in ticks] == ["01 Mar", "02 Mar", "03 Mar"]
    board = window.dashboard.leaderboard
    assert [board.item(i, 2).text() for i in range(board.rowCount())] == ["99", "53"]  # 10 x 9 + rounds up to 9


def test_training_alone_earns_no_points_and_says_why(qtbot):
    from app.points_view import PointsView
    from app.run_model import RunModel

    model = RunModel()
    model.apply(ev.Start(node_id=NODE, node_name="n", model="m", model_path="/m", round_start=0, round_end=None,
                         threads=1, settings={"offline": True}))
    model.apply(_round(1, DAY1, 0, connected=None))
    view = PointsView()
    qtbot.addWidget(view)
    view.update_from(model)
    assert view.total.text() == "–" and "training alone earns none" in view.caption.text() and view.days == []
