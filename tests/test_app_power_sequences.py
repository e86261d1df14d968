"""Every sequence of in use / idle, plugged / battery, inside / outside the schedule, and the user's own pause
and resume, ends in the right state.

First the pure policy against an engine that, like the real loop, pauses only at its next pause point (a pause
asked for may still be on its way when the rule lets go); then the real window, with a fake clock and fake
idle and battery sources, through the real channel to a scripted engine child.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from app import engine_process, power
from app.power import Facts, PowerPolicy, Rules, hold_reason
from wire import events as ev

NIGHT = (dt.time(22, 0), dt.time(7, 0))
SCRIPT = Path(__file__).resolve().parent / "scripted_engine.py"


@dataclass
class LoopEngine:
    """The engine loop's answer to commands (engine/run/control.py): a pause waits for the next pause point."""

    state: str = "running"
    pending: bool = False

    def send(self, command: str | None) -> None:
        if command == "pause":
            self.pending = True
        elif command == "resume":
            self.pending = False
            if self.state == "paused":
                self.state = "running"

    def pause_point(self) -> None:
        if self.pending:
            self.state, self.pending = "paused", False


@dataclass
class Expected:
    """What the user and the rules together want, said independently of the policy's bookkeeping."""

    user: str | None = None  # "pause" / "resume": the user's last word
    overridden: bool = False  # the user resumed while a rule held, and the rule has held ever since
    history: list = field(default_factory=list)

    def paused(self, reason: str | None) -> bool:
        if self.user == "pause":
            return True
        return reason is not None and not self.overridden


facts = st.builds(Facts, idle_s=st.sampled_from([None, 5.0, 60.0, 3600.0]),
                  on_battery=st.sampled_from([None, False, True]),
                  now=st.sampled_from([dt.time(12, 0), dt.time(23, 30), dt.time(3, 0), dt.time(7, 0)]))
rules = st.builds(Rules, only_when_idle=st.booleans(), idle_minutes=st.just(5), pause_on_battery=st.booleans(),
                  schedule=st.sampled_from([None, NIGHT]))
step = st.tuples(facts, st.booleans(), st.sampled_from([None, None, None, None, "pause", "resume"]))


@settings(max_examples=400, deadline=None)
@given(rules=rules, steps=st.lists(step, min_size=1, max_size=25))
def test_every_sequence_ends_in_the_right_state(rules, steps):
    policy, engine, want = PowerPolicy(), LoopEngine(), Expected()
    for fact, reached, user in steps:
        reason = hold_reason(rules, fact)
        if user == "pause":
            policy.user_paused()
            engine.send("pause")
            want.user, want.overridden = "pause", False
        elif user == "resume":
            policy.user_resumed(reason)
            engine.send("resume")
            want.user, want.overridden = "resume", reason is not None
        engine.send(policy.decide(reason, engine.state))
        if reason is None:
            want.overridden = False
        if reached:
            engine.pause_point()
    last = hold_reason(rules, steps[-1][0])
    for _ in range(3):  # the facts stay as they are: the policy's checks go on, the engine reaches pause points
        engine.send(policy.decide(last, engine.state))
        engine.pause_point()
    assert (engine.state == "paused") == want.paused(last), (engine, policy, want, last)
    assert engine.pending is False or engine.state == "paused"


def test_a_users_pause_on_its_way_is_not_undone_by_a_rule_that_holds_and_lets_go():
    """The user pauses; before the engine's pause point a rule holds and lets go: the rule must not resume."""
    policy, engine = PowerPolicy(), LoopEngine()
    policy.user_paused()
    engine.send("pause")
    engine.send(policy.decide("paused while on battery", engine.state))
    engine.send(policy.decide(None, engine.state))
    engine.pause_point()
    assert engine.state == "paused"


class Fakes:
    """The window's sources of facts, moved by the test."""

    def __init__(self) -> None:
        self.idle: float | None = 3600.0
        self.battery: bool | None = False
        self.now = dt.time(23, 0)

    def sources(self) -> power.Sources:
        return power.Sources(idle=lambda: self.idle, battery=lambda: self.battery, clock=lambda: self.now)


def test_the_window_follows_idle_battery_and_schedule_through_the_real_channel(qtbot, tmp_path, monkeypatch):
    from app.settings import AppSettings
    from app.window import MainWindow

    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    fakes = Fakes()
    settings = AppSettings(data_dir=str(tmp_path / "data"), only_when_idle=True, idle_minutes=5,
                           pause_on_battery=True, schedule_on=True, schedule_start="22:00", schedule_end="07:00")
    window = MainWindow(settings, sources=fakes.sources())
    qtbot.addWidget(window)
    script = tmp_path / "run.jsonl"
    start = ev.Start(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                     round_start=0, round_end=None, threads=1)
    script.write_bytes(ev.encode(start) + ev.encode(ev.StateChanged(state="running")))
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(SCRIPT), str(script)]))
    sent: list[str] = []
    send = window.engine.send
    monkeypatch.setattr(window.engine, "send", lambda c: sent.append(c.__struct_config__.tag) or send(c))
    try:
        window.start()
        qtbot.wait_until(lambda: window.engine.state == "running", timeout=20_000)

        def check(expected: str) -> None:
            window.check_power()
            qtbot.wait_until(lambda: window.engine.state == expected, timeout=10_000)

        check("running")  # 23:00, idle for an hour, plugged in
        fakes.battery = True
        check("paused")
        assert "on battery" in window.model.message
        fakes.battery = False
        check("running")
        fakes.idle = 10.0  # in use
        check("paused")
        fakes.now = dt.time(12, 0)  # ... and then outside the schedule as well
        check("paused")
        fakes.idle = 3600.0  # no longer in use, still outside the schedule
        check("paused")
        assert "outside the schedule" in window.model.message or window.model.state == "paused"
        fakes.now = dt.time(2, 0)  # the window opens, past midnight
        check("running")
        n = sent.count("pause")
        window.pause()  # the user's own pause stands, whatever the rules do next
        qtbot.wait_until(lambda: window.engine.state == "paused", timeout=10_000)
        fakes.battery = True
        check("paused")
        fakes.battery = False
        check("paused")
        assert sent.count("resume") == 2 and sent.count("pause") == n + 1
        window.resume()
        qtbot.wait_until(lambda: window.engine.state == "running", timeout=10_000)
        # a rule switched on from the tray acts at once: the schedule switched off, the clock says noon
        fakes.now = dt.time(12, 0)
        window.tray.controls.rules["schedule_on"].trigger()
        assert not window.settings.schedule_on
        window.tray.controls.rules["schedule_on"].trigger()
        qtbot.wait_until(lambda: window.engine.state == "paused", timeout=10_000)
        assert window.controls.rules["schedule_on"].isChecked()  # the Run menu shows it too
    finally:
        with qtbot.wait_signal(window.engine.finished, timeout=20_000):
            window.stop()
