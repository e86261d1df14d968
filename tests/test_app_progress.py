"""Progress as Folding@home shows it (issue 26 items 6 and 8): the round in flight by the engine's number, its
percent done and time left from measured phase rates, the practice test's own progress (not round 1's time),
rounds per hour, "Pausing…" at once, "Starting…" while the local relay starts; figures that say what they mean.

Real widgets offscreen; the window tests run a scripted engine child (tests/scripted_engine.py)."""

from __future__ import annotations

import pytest

from app import eta
from app.dashboard import Dashboard
from app.run_model import RunModel
from tests.test_app_history import _round, run_script
from wire import events as ev

NODE = "ab" * 16
SETTINGS = {"local_groups": 4, "completions": 4, "format_bonus": 0.1, "eval_every": 0}


def _start(round_start: int = 0, round_end: int | None = None, **settings) -> ev.Start:
    return ev.Start(node_id=NODE, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                    round_start=round_start, round_end=round_end, threads=2, settings=SETTINGS | settings)


def _phase(rnd: int, phase: str, done: int, total: int, t: float) -> ev.PhaseProgress:
    return ev.PhaseProgress(round=rnd, phase=phase, done=done, total=total, time=t)


@pytest.fixture
def dashboard(qtbot):
    d = Dashboard()
    qtbot.addWidget(d)
    return d


def test_the_round_in_flight_shows_its_percent_and_time_left_from_measured_phase_times(dashboard):
    m = RunModel()
    # 8 s rounds: 2 s writing, 5 s learning, 0.1 s loading the new model, 0.9 s other
    for e in (_start(), ev.StateChanged(state="running"), _round(1), _round(2)):
        m.apply(e)
    m.apply(_phase(3, "generating", 0, 16, t=100.0))
    m.apply(_phase(3, "generating", 8, 16, t=101.25))  # half the answers in 1.25 s: 1.25 s more to write
    dashboard.refresh(m, now=101.25)
    # left: 1.25 writing (at its own rate) + 5 learning + 0.1 loading + 0.9 other = 7.25 s; 1.25 of 8.5 s done
    assert m.round_eta(101.25).remaining_s == pytest.approx(7.25)
    assert dashboard.status.text() == "Training — round 3, 15 %"
    assert dashboard.phase.text() == "Writing answers (8 of 16) · round 15 % done, about 5 s left"
    assert (dashboard.progress.maximum(), dashboard.progress.value()) == (1000, 147)
    assert dashboard.card_round.caption.text() == "rounds done, about 450 an hour"
    m.apply(_phase(3, "training", 0, 4, t=102.5))  # writing done; learning has taken 5 s before
    dashboard.refresh(m, now=105.0)
    assert m.round_eta(105.0).remaining_s == pytest.approx(2.5 + 0.1 + 0.9)
    assert dashboard.status.text() == "Training — round 3, 59 %"
    # A pause's time is no round's: after 100 s paused the round is where it was.
    m.apply(ev.StateChanged(state="paused", time=105.0))
    dashboard.refresh(m, now=150.0)
    assert m.round_eta(150.0) is None and "left" not in dashboard.phase.text()
    m.apply(ev.StateChanged(state="running", time=205.0))
    assert m.round_eta(205.0).remaining_s == pytest.approx(2.5 + 0.1 + 0.9)


def test_before_a_first_round_it_says_the_round_number_and_when_time_left_is_known(dashboard):
    m = RunModel()
    for e in (_start(round_start=4), ev.StateChanged(state="running"), _phase(5, "generating", 2, 16, t=10.0)):
        m.apply(e)
    dashboard.refresh(m, now=12.0)
    assert dashboard.status.text() == "Training — round 5"  # the engine's number, with no round limit and no rounds
    assert "known once a round has finished" in dashboard.phase.text()


def test_the_practice_test_before_training_has_its_own_progress_and_is_not_round_1s_time(dashboard):
    m = RunModel()
    for e in (_start(round_end=10), ev.StateChanged(state="running"), _phase(0, "evaluating", 0, 60, t=50.0),
              _phase(0, "evaluating", 20, 60, t=60.0)):
        m.apply(e)
    dashboard.refresh(m, now=60.0)
    assert dashboard.status.text() == "Training — practice test before round 1"
    assert dashboard.phase.text() == ("Practice test (new questions, not trained on): 20 of 60 answers · "
                                      "about 20 s left")
    assert (dashboard.progress.maximum(), dashboard.progress.value()) == (1000, 333)
    m.apply(ev.Eval(round=0, eval_accuracy=0.6, eval_sampled_reward=0.3, eval_questions=20, eval_s=30.0, time=80.0))
    m.apply(_phase(1, "generating", 0, 16, t=80.0))
    assert m.round_t0 == 80.0  # round 1 begins after the test: its time is not counted in round 1's
    dashboard.refresh(m, now=81.0)
    assert dashboard.status.text() == "Training — round 1 of 10"


def test_rates_and_words():
    assert eta.phase_remaining(0, 10, 5.0) is None and eta.phase_remaining(5, 10, 5.0) == 5.0
    assert eta.rounds_per_hour([]) is None
    assert [eta.duration_words(s) for s in (3, 42, 100, 7200)] == ["about 5 s", "about 40 s", "about 2 min",
                                                                     "about 2.0 h"]


def test_figures_say_what_they_mean(dashboard):
    m = RunModel()
    for e in (_start(), ev.StateChanged(state="running"), _round(1, reward=1.08)):
        m.apply(e)
    dashboard.refresh(m)
    # The reward's real range: 1 per correct answer plus the format bonus; the axis reaches it.
    assert dashboard.card_reward.caption.text() == "reward (0 to 1.10), last 5 rounds"
    assert dashboard.progress_chart.widget.getViewBox().viewRange()[1][1] >= 1.1
    assert "0 to 1)" not in dashboard.progress_chart.widget.getAxis("left").labelText
    # Speed in answers, not tokens: 4 groups of 4 answers written in 2 s.
    assert dashboard.card_speed.value.text() == "480"
    assert dashboard.card_speed.caption.text() == "answers written per minute"
    # Training's varied answers vs the test's single best answer, in plain words.
    assert "lower than the practice test" in dashboard.card_accuracy.toolTip()
    assert "single best answer" in dashboard.card_test.toolTip()




def test_pause_says_pausing_at_once_then_the_round_it_paused_in(qtbot, window, tmp_path, monkeypatch):
    d = window.dashboard
    run_script(qtbot, window, monkeypatch, tmp_path / "run.jsonl",
               [_start(), ev.StateChanged(state="running"), _round(1), _round(2), _phase(3, "generating", 8, 16, 1.0)])
    qtbot.wait_until(lambda: d.status.text().startswith("Training — round 3"))
    d.main_button.click()
    assert d.status.text().startswith("Pausing at the end of this step — round 3")  # at once, not at the pause point
    assert d.main_button.text() == "Resume"
    # The engine's pause point is mid-round 3: the headline says round 3, not the last finished round 2.
    qtbot.wait_until(lambda: window.model.state == "paused")
    window.refresh()
    assert d.status.text() == "Paused — in round 3, goes on from there"
    assert d.main_button.text() == "Resume"


def test_while_the_local_relay_starts_the_headline_says_starting_and_start_is_off(qtbot, window, monkeypatch):
    from app import local_relay

    monkeypatch.setattr(local_relay.LocalRelay, "start", lambda self: None)  # it never gets ready here
    window.settings.swarm_kind = "local"
    window.start()
    window.refresh()
    d = window.dashboard
    assert d.status.text() == "Starting…"
    assert not d.main_button.isEnabled() and not window.act_start.isEnabled()
    window.stop()  # gives up waiting for the relay
    window.refresh()
    assert d.status.text() == "Stopped" and d.main_button.isEnabled()
