"""Idle, schedule and battery rules as pure policy; the window acts on them through pause / resume."""

from __future__ import annotations

import datetime as dt

from app.power import Facts, PowerPolicy, Rules, hold_reason, idle_seconds, in_schedule, on_battery


def test_hold_reason():
    idle_rule = Rules(only_when_idle=True, idle_minutes=5, pause_on_battery=False)
    assert hold_reason(idle_rule, Facts(idle_s=10, on_battery=None)) == "paused while the computer is in use"
    assert hold_reason(idle_rule, Facts(idle_s=301, on_battery=True)) is None
    assert hold_reason(idle_rule, Facts(idle_s=None, on_battery=None)) is None  # unknown idle time never pauses
    battery = Rules(pause_on_battery=True)
    assert hold_reason(battery, Facts(idle_s=0, on_battery=True)) == "paused while on battery"
    assert hold_reason(battery, Facts(idle_s=0, on_battery=False)) is None
    assert hold_reason(Rules(pause_on_battery=False), Facts(idle_s=0, on_battery=True)) is None


def t(text: str) -> dt.time:
    return dt.time.fromisoformat(text)


def test_the_schedule_is_a_daily_window_also_over_midnight():
    day = (t("09:00"), t("17:30"))
    assert in_schedule(*day, t("09:00")) and in_schedule(*day, t("17:29")) and in_schedule(*day, t("12:00"))
    assert not in_schedule(*day, t("17:30")) and not in_schedule(*day, t("08:59")) and not in_schedule(*day, t("23:00"))
    night = (t("22:00"), t("07:00"))
    assert in_schedule(*night, t("23:59")) and in_schedule(*night, t("00:00")) and in_schedule(*night, t("06:59"))
    assert in_schedule(*night, t("22:00"))
    assert not in_schedule(*night, t("07:00")) and not in_schedule(*night, t("12:00")) and not in_schedule(
        *night, t("21:59"))
    assert all(in_schedule(t("08:00"), t("08:00"), t(f"{h:02d}:00")) for h in range(24))  # start == end: all day
    rules = Rules(pause_on_battery=False, schedule=night)
    assert hold_reason(rules, Facts(None, None, now=t("12:00"))) == "paused outside the schedule (runs 22:00-07:00)"
    assert hold_reason(rules, Facts(None, None, now=t("03:00"))) is None
    assert hold_reason(rules, Facts(None, None, now=None)) is None  # no clock: never pauses
    # battery is said first: it is the rule the user can most easily change (plug in)
    both = Rules(pause_on_battery=True, schedule=night)
    assert hold_reason(both, Facts(None, True, now=t("12:00"))) == "paused while on battery"


def test_policy_undoes_only_its_own_pauses():
    p = PowerPolicy()
    assert p.decide("on battery", "running") == "pause"
    assert p.decide("on battery", "paused") is None  # already paused: nothing to send
    assert p.decide(None, "paused") == "resume"  # the rule let go: resume what it paused
    assert p.decide(None, "running") is None
    # a user's own pause is never undone
    p.user_paused()
    assert p.decide(None, "paused") is None
    # nor taken over by a rule while it is on its way (the engine still runs to its pause point)
    assert p.decide("on battery", "running") is None
    # a user's resume wins while the rule holds, until the rule lets go and comes back
    p.user_resumed("on battery")
    assert p.decide("on battery", "running") is None
    assert p.decide(None, "running") is None
    assert p.decide("on battery", "running") == "pause"
    # finishing counts as running; a stopped engine is left alone
    q = PowerPolicy()
    assert q.decide("in use", "finishing") == "pause"
    assert PowerPolicy().decide("in use", "stopped") is None


def test_a_rule_that_lets_go_before_the_engine_reached_its_pause_cancels_it():
    """Issue 26: in use -> pause sent; the engine trains on to its next pause point; the user went idle before
    then. The policy must not forget its own pause, or the engine pauses for good a moment later."""
    p = PowerPolicy()
    assert p.decide("paused while the computer is in use", "running") == "pause"
    assert p.decide(None, "running") == "resume"  # cancels the pending pause
    assert p.decide(None, "paused") is None  # (had the pause won the race, this resume ends it too)
    assert p.decide(None, "running") is None
    # the battery rule is the same rule
    b = PowerPolicy()
    assert b.decide("paused while on battery", "running") == "pause"
    assert b.decide(None, "running") == "resume"
    # a user's finish stands: resuming would cancel it, and it pauses at the round's end anyway
    f = PowerPolicy()
    assert f.decide("paused while on battery", "finishing") == "pause"
    assert f.decide(None, "finishing") is None


def test_platform_facts_do_not_fail_here():
    assert on_battery() in (None, True, False)
    idle = idle_seconds()
    assert idle is None or idle >= 0


def test_the_window_pauses_and_resumes_through_the_engine_commands(qtbot, monkeypatch):
    from app.window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    sent: list[str] = []
    monkeypatch.setattr(window.engine, "pause", lambda: sent.append("pause") or True)
    monkeypatch.setattr(window.engine, "resume", lambda: sent.append("resume") or True)
    window.engine._state = "running"
    rules = Rules(pause_on_battery=True)
    window.apply_power(rules, Facts(idle_s=None, on_battery=True))
    assert sent == ["pause"] and "on battery" in window.model.message
    window.engine._state = "paused"
    window.apply_power(rules, Facts(idle_s=None, on_battery=False))
    assert sent == ["pause", "resume"]
    # the rule holds and lets go again while the engine still runs its round: the pause is taken back
    window.engine._state = "running"
    window.apply_power(rules, Facts(idle_s=None, on_battery=True))
    window.apply_power(rules, Facts(idle_s=None, on_battery=False))
    assert sent == ["pause", "resume", "pause", "resume"]


def test_tray_follows_the_state(qtbot):
    from app.window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    tray = window.tray
    tray.update("Paused — round 3", "paused")
    assert tray.pause.text() == "Resume" and tray.pause.isEnabled() and tray.status.text() == "Paused — round 3"
    tray.update("Stopped", "stopped")
    assert tray.pause.text() == "Pause" and not tray.pause.isEnabled()
    starts: list = []
    monkey_start = window.start
    window.start = lambda: starts.append(1)  # the tray's pause on a stopped engine starts it
    window.toggle_pause()
    window.start = monkey_start
    assert starts == [1]
