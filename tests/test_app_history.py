"""A restart keeps the history: the engine replays its earlier rounds (a ``history`` event, from its data
dir) and the window rebuilds its charts, answers and cards from them; a new run never shows the last
run's figures. The real window and channel, a scripted engine child (tests/scripted_engine.py)."""

from __future__ import annotations

import sys
from pathlib import Path


from app import engine_process
from app.window import MainWindow
from wire import events as ev

SCRIPT = Path(__file__).resolve().parent / "scripted_engine.py"
NODE = "ab" * 16


def _start_event(round_start: int) -> ev.Start:
    return ev.Start(node_id=NODE, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                    round_start=round_start, round_end=None, threads=2, settings={"local_groups": 4})


def _round(n: int, reward: float = 0.5, **kw) -> ev.Round:
    sample = ev.RolloutSample(task="basic_arithmetic", question=f"What is {n}+{n}?", answer=str(2 * n), reward=1.0,
                              correct=True, source="own")
    return ev.Round(round=n, reward_mean=reward, accuracy=0.25, format_rate=1.0, task_score=0.25, groups=4,
                    gen_tokens=100, gen_s=2.0, gen_tokens_per_s=50.0, loss=0.1, train_s=5.0, swap_ms=100.0,
                    checkpoint_ms=10.0, groups_trained=3, groups_dropped=1, tokens_trained=100, clip_low_frac=0.0,
                    clip_high_frac=0.0, grad_norm=1.0, round_s=8.0, rollouts=[sample], **kw)


def _eval(n: int, accuracy: float) -> ev.Eval:
    return ev.Eval(round=n, eval_accuracy=accuracy, eval_sampled_reward=0.3, eval_questions=10, eval_s=1.0)




def run_script(qtbot, window: MainWindow, monkeypatch, path: Path, events: list[ev.Event]) -> None:
    """Start the window's engine as the scripted child saying ``events``; wait until it has said them all."""
    path.write_bytes(b"".join(ev.encode(e) for e in events))
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(SCRIPT), str(path)]))
    seen: list[ev.Event] = []
    window.engine.event.connect(seen.append)
    try:
        window.start()
        qtbot.wait_until(lambda: len(seen) == len(events), timeout=20_000)
    finally:
        window.engine.event.disconnect(seen.append)
    window.refresh()


def stop(qtbot, window: MainWindow) -> None:
    with qtbot.wait_signal(window.engine.finished, timeout=20_000):
        window.stop()
    window.refresh()


def test_a_restart_rebuilds_charts_answers_and_cards_from_the_engines_history(qtbot, window, tmp_path, monkeypatch):
    d = window.dashboard
    first = [_round(n, reward=0.1 * n) for n in range(1, 5)]
    run_script(qtbot, window, monkeypatch, tmp_path / "first.jsonl",
               [_start_event(0), ev.History(), ev.StateChanged(state="running"), _eval(0, 0.1), *first[:2],
                _eval(2, 0.2), *first[2:], _eval(4, 0.3)])
    assert len(d.progress_chart._reward_avg.getData()[0]) == 4 and d.feed.rowCount() == 4
    stop(qtbot, window)
    assert window.engine.state == "stopped"

    # Start again: resumed from round 4, the engine first says its history, then trains on.
    run_script(qtbot, window, monkeypatch, tmp_path / "second.jsonl",
               [_start_event(4), ev.History(events=[_eval(0, 0.1), *first[:2], _eval(2, 0.2), *first[2:],
                                                    _eval(4, 0.3)]),
                ev.StateChanged(state="running", round=4)])
    assert window.model.state == "running"
    assert len(d.progress_chart._reward_avg.getData()[0]) == 4  # the charts: the rounds before the restart
    assert d.feed.rowCount() == 4 and d.feed.item(0, 1).text() == "What is 4+4?"  # the answers, newest first
    assert d.card_round.value.text() == "4"
    assert d.card_reward.value.text() == "0.25"  # the mean of rounds 1-4's 0.1 .. 0.4
    assert d.card_test.value.text() == "30 %" and "10 % at the start" in d.card_test.caption.text()
    assert d.status.text() == "Training — round 5"


def test_a_new_run_without_history_clears_the_last_runs_cards(qtbot, window, tmp_path, monkeypatch):
    d = window.dashboard
    run_script(qtbot, window, monkeypatch, tmp_path / "first.jsonl",
               [_start_event(0), ev.StateChanged(state="running"), _eval(0, 0.5), _round(1, 0.9)])
    assert d.card_reward.value.text() == "0.90" and d.card_test.value.text() == "50 %"
    stop(qtbot, window)

    # A fresh data dir (its checkpoints deleted, say): round 0 again, nothing to replay.
    run_script(qtbot, window, monkeypatch, tmp_path / "second.jsonl",
               [_start_event(0), ev.History(), ev.StateChanged(state="running")])
    for card in (d.card_reward, d.card_accuracy, d.card_test, d.card_speed):
        assert card.value.text() == "–", card.caption.text()
    assert d.card_round.value.text() == "0" and d.feed.rowCount() == 0
    assert len(d.progress_chart._reward_avg.getData()[0] or []) == 0
