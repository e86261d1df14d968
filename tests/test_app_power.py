"""Idle, schedule, battery and other programs' CPU rules as pure policy; the window acts on them through pause /
resume; other programs' CPU share measured on real processes."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time

import psutil

from app.power import Facts, PowerPolicy, Rules, hold_reason, idle_seconds, in_schedule, on_battery
from wire.power_rules import CpuMeter, CpuSample, cpu_sample, other_cpu_share

# Spins until it has used argv[1] CPU seconds (CPU time, not wall: the same work on a loaded machine).
SPIN = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass"


def test_hold_reason():
    idle_rule = Rules(only_when_idle=True, idle_minutes=5, pause_on_battery=False)
    assert hold_reason(idle_rule, Facts(idle_s=10, on_battery=None)) == "paused while the computer is in use"
    assert hold_reason(idle_rule, Facts(idle_s=301, on_battery=True)) is None
    assert hold_reason(idle_rule, Facts(idle_s=None, on_battery=None)) is None  # unknown idle time never pauses
    battery = Rules(pause_on_battery=True)
    assert hold_reason(battery, Facts(idle_s=0, on_battery=True)) == "paused while on battery"
    assert hold_reason(battery, Facts(idle_s=0, on_battery=False)) is None
    assert hold_reason(Rules(pause_on_battery=False), Facts(idle_s=0, on_battery=True)) is None


def test_other_programs_cpu_rule():
    rules = Rules(pause_on_battery=False, max_other_cpu=50)
    said = "paused while other programs use more than 50 % of the CPU"
    assert hold_reason(rules, Facts(None, None, other_cpu=0.62)) == said
    assert hold_reason(rules, Facts(None, None, other_cpu=0.50)) is None  # more than, not as much as
    assert hold_reason(rules, Facts(None, None, other_cpu=None)) is None  # unknown never pauses
    assert hold_reason(Rules(pause_on_battery=False), Facts(None, None, other_cpu=1.0)) is None  # 0: off


def test_other_programs_share_is_all_cores_time_less_the_nodes():
    a = CpuSample(wall=10.0, busy=100.0, ours=40.0, cores=4)
    assert other_cpu_share(a, CpuSample(14.0, 110.0, 46.0, 4)) == 0.25  # (10 - 6) s of 4 cores x 4 s
    assert other_cpu_share(a, CpuSample(14.0, 100.0, 46.0, 4)) == 0.0  # never below 0 (counters read apart)
    assert other_cpu_share(a, CpuSample(10.5, 110.0, 40.0, 4)) is None  # under a second apart: too close
    assert other_cpu_share(a, CpuSample(9.0, 110.0, 40.0, 4)) is None
    reads = iter([a, CpuSample(10.4, 101.0, 40.0, 4), CpuSample(12.0, 104.0, 40.0, 4), CpuSample(14.0, 112.0, 40.0, 4)])
    meter = CpuMeter(lambda: next(reads))
    assert meter() is None  # the first reading starts the window
    assert meter() is None  # too soon: the first reading stays the start
    assert meter() == 0.5  # 4 s of 8 since the first
    assert meter() == 1.0  # 8 s of 8 since the one before


def test_a_busy_program_is_another_programs_use_and_the_nodes_children_are_not_even_after_they_end():
    # Another program: a spinner that is not one of "our" processes (ours here: a sleeping child).
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = cpu_sample(psutil, [sleeper.pid], time.monotonic())
        subprocess.run([sys.executable, "-c", SPIN, "1.0"], check=True, timeout=120)
        after = cpu_sample(psutil, [sleeper.pid], time.monotonic())
    finally:
        sleeper.kill()
        sleeper.wait()
    share = other_cpu_share(before, after)
    assert share is not None and share * (after.wall - before.wall) * after.cores >= 0.9  # its CPU second, and more
    # The node's own child (a scoring worker, say) that ends and is reaped between two readings: still the node's.
    before = cpu_sample(psutil, [os.getpid()], time.monotonic())
    subprocess.run([sys.executable, "-c", SPIN, "1.0"], check=True, timeout=120)
    after = cpu_sample(psutil, [os.getpid()], time.monotonic())
    assert after.ours - before.ours >= 0.9 and after.busy - before.busy >= 0.9


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
    # other programs busy: the same pause and resume, and the window's rules come from its Preferences
    window.settings.busy_pause, window.settings.busy_percent = True, 30
    busy = window.rules()
    assert busy.max_other_cpu == 30
    window.apply_power(busy, Facts(idle_s=None, on_battery=False, other_cpu=0.8))
    assert sent[-1] == "pause" and "other programs use more than 30 %" in window.model.message
    window.engine._state = "paused"
    window.apply_power(busy, Facts(idle_s=None, on_battery=False, other_cpu=0.1))
    assert sent[-1] == "resume"


def test_the_run_menu_and_the_tray_switch_the_other_programs_rule(qtbot, tmp_path):
    from app.settings import AppSettings, load
    from app.window import MainWindow

    window = MainWindow(AppSettings(busy_percent=40), config_dir=tmp_path / "config")
    qtbot.addWidget(window)
    menu, tray = window.controls.rules["busy_pause"], window.tray.controls.rules["busy_pause"]
    assert menu.text() == "Pause while other programs &use over 40 % of the CPU" and not menu.isChecked()
    tray.trigger()
    assert window.settings.busy_pause and menu.isChecked() and window.rules().max_other_cpu == 40
    assert load(tmp_path / "config").busy_pause  # saved
    menu.trigger()
    assert not window.settings.busy_pause and not tray.isChecked() and window.rules().max_other_cpu == 0


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
