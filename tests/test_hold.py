"""A headless node's computing preferences (engine/run/hold.py, rules in wire/power_rules.py): it waits between
rounds outside its schedule, on battery or while other programs keep the CPU busy, says why, goes on when allowed,
and a stop ends the wait. The real engine too: started outside its schedule it trains nothing, beside a busy
program it waits after its round, and SIGTERM ends it cleanly."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from engine.config import build_config
from engine.errors import SapoError
from engine.run.hold import Hold, rules_of
from wire import events as ev
from wire.power_rules import battery_state, parse_schedule


def test_schedules_parse_or_say_what_is_wrong():
    assert parse_schedule("22:00-07:00") == (dt.time(22), dt.time(7))
    assert parse_schedule(" 9:30 - 17:05 ") == (dt.time(9, 30), dt.time(17, 5))
    for bad, words in (("22-07", "HH:MM-HH:MM"), ("24:00-07:00", "00:00 to 23:59"), ("10:60-11:00", "00:00 to 23:59"),
                       ("", "HH:MM-HH:MM"), ("22:00-07:00-08:00", "HH:MM-HH:MM")):
        with pytest.raises(ValueError, match=words):
            parse_schedule(bad)
    with pytest.raises(SapoError, match="schedule must be HH:MM-HH:MM"):
        build_config({}, {"schedule": "nightly"})
    assert rules_of(None, False) is None
    rules = rules_of("22:00-07:00", True)
    assert rules is not None and rules.pause_on_battery and rules.schedule == (dt.time(22), dt.time(7))
    assert not rules.only_when_idle  # a headless node has no user to be idle


def _hold(clock, battery=lambda: None, schedule="22:00-07:00", on_battery=False):
    seen: list[ev.Event] = []
    hold = Hold(rules_of(schedule, on_battery), seen.append, clock=clock, battery=battery, check_s=0.01)
    return hold, seen


def test_inside_the_schedule_nothing_waits():
    hold, seen = _hold(lambda: dt.time(23, 30))
    assert hold.wait(3, lambda: False) is False and seen == []


def test_outside_it_waits_says_why_and_goes_on_at_the_start_of_the_window():
    times = iter([dt.time(21, 58), dt.time(21, 59), dt.time(21, 59, 30), dt.time(22, 0)])
    hold, seen = _hold(lambda: next(times))
    assert hold.wait(3, lambda: False) is True
    assert [type(e) for e in seen] == [ev.StateChanged, ev.Status, ev.Status, ev.StateChanged]
    assert seen[0].state == "paused" and seen[-1].state == "running" and seen[0].round == 3
    assert seen[1].message.startswith("paused outside the schedule (runs 22:00-07:00): waiting before round 4")
    assert "round 4 starts" in seen[2].message


def test_battery_holds_until_plugged_in_and_no_battery_never_holds():
    plugged = iter([True, True, False])
    hold, seen = _hold(lambda: dt.time(12), battery=lambda: next(plugged), schedule=None, on_battery=True)
    assert hold.wait(0, lambda: False) is True and seen[1].message.startswith("paused while on battery")
    hold, seen = _hold(lambda: dt.time(12), battery=lambda: None, schedule=None, on_battery=True)
    assert hold.wait(0, lambda: False) is False  # a desktop: unknown never pauses


def test_what_psutil_says_about_the_battery_reads_the_same_in_the_app_and_the_engine():
    class Battery:
        def __init__(self, plugged):
            self.power_plugged, self.percent, self.secsleft = plugged, 50.0, -1

    def fails(exc):
        def read():
            raise exc
        return read

    assert battery_state(lambda: Battery(False)) is True
    assert battery_state(lambda: Battery(True)) is False
    # unknown is never a pause: no battery, psutil not knowing whether it is plugged in, psutil failing
    assert battery_state(lambda: None) is None
    assert battery_state(lambda: Battery(None)) is None
    for exc in (NotImplementedError(), OSError("no /sys"), AttributeError("no sensors_battery here")):
        assert battery_state(fails(exc)) is None


def test_other_programs_busy_hold_until_they_use_less_and_unknown_never_holds():
    rules = rules_of(None, False, 40)
    assert rules is not None and rules.max_other_cpu == 40 and rules.schedule is None
    shares = iter([0.9, 0.55, 0.2])
    seen: list[ev.Event] = []
    hold = Hold(rules, seen.append, other_cpu=lambda: next(shares), check_s=0.01)
    assert hold.wait(2, lambda: False) is True
    assert seen[1].message.startswith("paused while other programs use more than 40 % of the CPU: waiting before "
                                      "round 3")
    assert [e.state for e in seen if isinstance(e, ev.StateChanged)] == ["paused", "running"]
    assert Hold(rules, seen.append, other_cpu=lambda: None).wait(3, lambda: False) is False
    for bad in (-1, 101):
        with pytest.raises(SapoError, match=r"max_other_cpu must be 0\.\.100"):
            build_config({}, {"max_other_cpu": bad})


def test_a_stop_ends_the_wait_at_once():
    hold, seen = _hold(lambda: dt.time(12))
    hold.check_s = 3600  # only the stop can end it
    stopped = threading.Event()
    timer = threading.Timer(0.2, lambda: (stopped.set(), hold.wake.set()))
    timer.start()
    t0 = time.monotonic()
    assert hold.wait(5, stopped.is_set) is True
    assert time.monotonic() - t0 < 30
    assert [e.state for e in seen if isinstance(e, ev.StateChanged)] == ["paused"]  # no "running" after a stop


def _until_it_waits(tmp_path, rounds: int, rule: list[str], waits: str) -> list[ev.Event]:
    """A real engine with ``rule``, its events until it says ``waits...``, then SIGTERM: all it said, exit 0."""
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic",
           "--local", "1", "--external", "0", "--completions", "2", "--max-tokens", "8", "--eval-every", "0",
           "--threads", "1", "--rounds", str(rounds), *rule, "--events", "-", "--quiet",
           "--data-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: list[ev.Event] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if (e := ev.decode_event(line)) is not None:
                seen.append(e)
                if isinstance(e, ev.Status) and e.message.startswith(waits):
                    break
        else:
            raise AssertionError(f"no wait announced: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    return seen + [e for line in rest.splitlines() if (e := ev.decode_event(line)) is not None]


@pytest.mark.slow
def test_the_real_engine_outside_its_schedule_trains_nothing_and_stops_cleanly(tmp_path):
    now = dt.datetime.now()
    window = f"{(now + dt.timedelta(hours=2)):%H:%M}-{(now + dt.timedelta(hours=3)):%H:%M}"
    seen = _until_it_waits(tmp_path, 1, ["--schedule", window], "paused outside the schedule")
    assert f"(runs {window})" in next(e.message for e in seen if isinstance(e, ev.Status) and "schedule" in e.message)
    assert not [e for e in seen if isinstance(e, ev.Round)]
    (stop,) = [e for e in seen if isinstance(e, ev.Stop)]
    assert stop.round == 0 and stop.reason == "signal SIGTERM"


@pytest.mark.slow
def test_the_real_engine_beside_a_busy_program_waits_after_its_round_and_stops_cleanly(tmp_path):
    # A busy program using one core, at the engine's own low priority so that the engine's round is not starved:
    # other programs then use more than half a core's share of the CPU, whatever else runs here.
    spinner = subprocess.Popen([sys.executable, "-c", "import os\nos.nice(19)\nwhile True: pass"])
    limit = max(1, 50 // (os.cpu_count() or 1))
    try:
        seen = _until_it_waits(tmp_path, 3, ["--max-other-cpu", str(limit)], "paused while other programs")
    finally:
        spinner.kill()
        spinner.wait()
    # The measurement starts with the node and needs a second between looks: these rounds take under one, so the
    # wait comes before round 2 or 3, never after the last.
    done = [e.round for e in seen if isinstance(e, ev.Round)]
    assert done in ([1], [1, 2])
    assert f"more than {limit} % of the CPU: waiting before round {len(done) + 1}" in next(
        e.message for e in seen if isinstance(e, ev.Status) and "other programs" in e.message)
    (stop,) = [e for e in seen if isinstance(e, ev.Stop)]
    assert stop.round == len(done) and stop.reason == "signal SIGTERM"
