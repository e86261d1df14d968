"""The dashboard from events: the run model (no Qt), replay of recorded files, the screenshot command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.replay import parse_lines, read_events
from app.run_model import RunModel, moving_average
from wire import events as ev

ROOT = Path(__file__).resolve().parent.parent
CURVE = ROOT / "docs" / "learning-curve.jsonl"


def _round(n: int, **kw) -> ev.Round:
    base = dict(round=n, reward_mean=0.5, accuracy=0.25, format_rate=1.0, task_score=0.25, groups=4, gen_tokens=100,
                gen_s=2.0, gen_tokens_per_s=50.0, loss=0.1, train_s=5.0, swap_ms=100.0, checkpoint_ms=10.0,
                groups_trained=3, groups_dropped=1, tokens_trained=100, clip_low_frac=0.0, clip_high_frac=0.0,
                grad_norm=1.0, round_s=8.0)
    return ev.Round(**(base | kw))


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert moving_average([], 3) == []
    assert moving_average([4.0], 5) == [4.0]
    with pytest.raises(ValueError):
        moving_average([1], 0)


def test_the_model_follows_a_run():
    m = RunModel()
    m.apply(ev.Start(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m",
                     round_start=0, round_end=10, threads=2))
    m.apply(ev.StateChanged(state="running"))
    assert m.headline() == "Training — round 1 of 10"
    m.apply(ev.PhaseProgress(round=1, phase="generating", done=3, total=16))
    assert m.phase_text() == ("Writing answers (3 of 16)", 3, 16)
    sample = ev.RolloutSample(task="basic_arithmetic", question="What is 2+2?", answer="4", reward=1.1, correct=True,
                              source="brave-otter-12")
    m.apply(_round(1, external_groups=2, rejected_groups=1, rejected_reasons={"reward_mismatch": 1},
                   relay_connected=True, peers=3, eval_s=1.0, round_s=9.5, score_s=0.5, rollouts=[sample]))
    point = m.rounds[-1]
    assert (point.own, point.external, point.dropped, point.rejected) == (4, 2, 1, 1)
    assert point.generate_s == 2.0 and point.score_s == 0.5 and point.swap_s == pytest.approx(0.1) and point.evaluate_s == 1.0
    assert point.other_s == pytest.approx(9.5 - 2.0 - 0.5 - 5.0 - 0.1 - 1.0)
    assert m.phase is None and m.peers == 3 and m.feed[0] == sample
    assert m.rejected_reasons == {"reward_mismatch": 1}
    m.apply(ev.Swarm(peers_online=5, groups_per_minute=2.0, rank=2,
                     leaderboard=[ev.LeaderRow("cd" * 16, "x", 9, 4, 3), ev.LeaderRow("ab" * 16, "calm-heron-07", 3, 2, 1)],
                     you=ev.LeaderRow("ab" * 16, "calm-heron-07", 3, 2, 1)))
    assert (m.peers, m.rank, m.shared_total, m.adopted_total) == (5, 2, 3, 2)
    m.apply(ev.StateChanged(state="paused", round=1))
    assert m.headline() == "Paused — after round 1 of 10"
    m.apply(ev.Download(file="x.gguf", done_bytes=5_000_000, total_bytes=10_000_000))
    assert m.phase_text() == ("Downloading x.gguf: 5 of 10 MB", 5_000_000, 10_000_000)
    m.apply(ev.ErrorEvent(message="out of memory"))
    assert m.error == "out of memory"


def test_replay_reads_the_old_learning_curve_file():
    replay = read_events(CURVE)
    assert replay.skipped == 0
    start = replay.events[0]
    assert isinstance(start, ev.Start) and start.schema == 0
    assert start.settings["local_groups"] == 4 and start.settings["eval_every"] == 2  # flat settings gathered
    m = RunModel()
    for e in replay.events:
        m.apply(e)
    assert len(m.rounds) == 40 and m.rounds[-1].round == 40
    assert len(m.evals) == 21 and m.evals[0][0] == 0


def test_replay_skips_what_is_not_an_event():
    lines = [b'{"type": "status", "message": "hi", "time": 1}', b"garbage", b'{"type": "round", "round": 1',
             b'{"type": "a_future_event"}', b"", b'[1, 2]', b"[" * 200_000]  # the last one was a RecursionError
    replay = parse_lines(lines)
    assert [type(e) for e in replay.events] == [ev.Status] and replay.skipped == 4


def test_replay_window_shows_the_run(qtbot):
    from app.window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    replay = read_events(CURVE)
    window.show_replay(replay.events, "replay")
    d = window.dashboard
    assert d.status.text() == "Replay of a finished run — round 40 of 40"
    assert d.message.text().startswith("Recorded by ")  # not a blank line under the headline
    assert d.card_round.value.text() == "40 / 40"
    assert d.card_test.value.text() == "26 %"  # the last practice test of that run
    assert len(window.dashboard.progress_chart._reward_avg.getData()[0]) == 40
    assert not d.main_button.isVisible() and not window.act_start.isEnabled()


def test_screenshot_command(tmp_path):
    out = tmp_path / "shot.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "app", "--replay", str(CURVE), "--screenshot", str(out),
                           "--size", "900x700"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert (image.width(), image.height()) == (900, 700)
    bad = subprocess.run([sys.executable, "-m", "app", "--replay", str(tmp_path / "none.jsonl")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("sapo: error: cannot read")


def test_the_round_tooltip_explains_i_j_l_with_this_runs_values(qtbot):
    from app.window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.show_replay(read_events(CURVE).events, "replay")
    tip = window.dashboard.card_round.toolTip()
    assert "I = 4: questions this computer asks itself" in tip and "J = 0" in tip and "L = 4: answers" in tip


def test_replay_of_a_swarm_run_fills_the_feed_and_the_leaderboard(qtbot):
    from app.window import MainWindow

    replay = read_events(ROOT / "docs" / "swarm-demo.jsonl")  # recorded: 2 nodes on a local relay, 5 rounds
    assert replay.skipped == 0 and any(isinstance(e, ev.PhaseProgress) for e in replay.events)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show_replay(replay.events, "replay")
    m, d = window.model, window.dashboard
    assert len(m.rounds) == 5 and sum(r.external for r in m.rounds) > 0
    sources = {d.feed.item(i, 0).text() for i in range(d.feed.rowCount())}
    assert "this computer" in sources and len(sources) == 2  # own answers and a peer's, by its name
    assert d.leaderboard.rowCount() == 2 and d.leaderboard.item(0, 1).text().endswith("(you)")
    assert m.rank == 1 and d.card_you.value.text() == f"{m.shared_total} / {m.adopted_total}"


def test_the_dashboard_says_where_the_engine_computes_and_how_to_use_an_idle_gpu(qtbot):
    from app.window import MainWindow

    start = dict(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m",
                 round_start=0, round_end=10, threads=2)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show_replay([ev.Start(**start, trains_on="cpu", samples_on="cpu",
                                 accel_fix="SAPO_ACCEL=cuda scripts/setup.sh"), _round(1)], "replay")
    where = window.dashboard.where
    assert where.text() == ("Trains on the CPU, samples on the CPU (llama.cpp); this computer's GPU is unused by "
                            "this install, to use it: SAPO_ACCEL=cuda scripts/setup.sh")
    window.show_replay([ev.Start(**start, trains_on="mps", samples_on="gpu"), _round(1)], "replay")
    assert where.text() == "Trains on the Apple GPU (MPS), samples on the GPU (llama.cpp offload)"
    window.show_replay([ev.Start(**start), _round(1)], "replay")  # an engine before these fields: says nothing
    assert where.text() == "" and where.isHidden()


def test_tasks_drawn_less_show_on_the_accuracy_card_and_go_when_restored(qtbot):
    from app.window import MainWindow

    start = ev.Start(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m",
                     round_start=0, round_end=10, threads=2)
    window = MainWindow()
    qtbot.addWidget(window)
    card = window.dashboard.card_accuracy
    window.show_replay([start, _round(1), _round(2, tasks_held_back={"arc_1d": 0.25})], "replay")
    assert card.caption.text() == "correct in training, last 5 rounds; drawn less: arc_1d"
    assert "Drawn less for now: arc_1d" in card.toolTip() and "at 25% of the usual weight" in card.toolTip()
    window.show_replay([start, _round(2, tasks_held_back={"arc_1d": 0.25, "bf": 0.25}), _round(3)], "replay")
    assert card.caption.text() == "correct in training, last 5 rounds"  # a right answer restored them
    assert "Drawn less" not in card.toolTip()
