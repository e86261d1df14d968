"""The CPU-time limit: the rule alone, the throttle on a fake clock and CPU meter, and its commands.

A real engine run at 50 % measured against its wall time is a benchmark (benchmarks/bench_cpu_limit.py),
not a timed test: on a shared machine its figure moves with the load.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.config import build_config
from engine.errors import SapoError
from engine.run.control import Control
from engine.run.throttle import Throttle, process_cpu_seconds, throttle_sleep
from wire import events as ev


def test_the_rule():
    assert throttle_sleep(1.0, 1.0, cores=1, limit=0.5) == pytest.approx(1.0)  # 1 s busy, 1 s asleep: 50 %
    assert throttle_sleep(2.0, 1.0, cores=2, limit=0.25) == pytest.approx(3.0)  # 2 cores busy 1 s: 4 s in all
    assert throttle_sleep(0.4, 1.0, cores=1, limit=0.5) == 0.0  # under the limit already (waiting, I/O)
    assert throttle_sleep(5.0, 1.0, cores=1, limit=1.0) == 0.0  # 100 %: never
    assert throttle_sleep(0.0, 1.0, cores=1, limit=0.1) == 0.0


@given(cpu=st.floats(0, 64), wall=st.floats(0.01, 10), cores=st.integers(1, 64), percent=st.integers(1, 99))
def test_after_the_sleep_the_window_is_within_the_limit(cpu, wall, cores, percent):
    sleep = throttle_sleep(cpu, wall, cores, percent / 100)
    assert sleep >= 0
    assert cpu / (cores * (wall + sleep)) <= percent / 100 + 1e-9
    if sleep > 0:  # and no longer than needed: exactly at the limit
        assert cpu / (cores * (wall + sleep)) == pytest.approx(percent / 100)


class FakeMachine:
    """A clock and a CPU meter that only the test moves: work burns ``busy`` cores, sleep burns none."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0

    def work(self, seconds: float, busy: float) -> None:
        self.now += seconds
        self.cpu += seconds * busy

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run_steps(throttle: Throttle, machine: FakeMachine, steps: int, step_s: float, busy: float) -> None:
    for _ in range(steps):
        machine.work(step_s, busy)
        throttle.tick()


@pytest.mark.parametrize("percent,cores,busy", [(50, 1, 1.0), (25, 2, 2.0), (10, 4, 3.0), (75, 2, 2.0)])
def test_a_throttled_run_uses_at_most_its_share(percent, cores, busy):
    m = FakeMachine()
    t = Throttle(percent, cores, cpu=lambda: m.cpu, clock=lambda: m.now, sleep=m.sleep)
    run_steps(t, m, steps=600, step_s=0.05, busy=busy)  # 30 s of work in decoding steps of 50 ms
    share = m.cpu / (cores * m.now)
    assert share <= percent / 100 + 0.01
    assert share >= percent / 100 * 0.9  # and not much less: the limit is a limit, not a stall
    assert t.slept_s == pytest.approx(m.now - 30.0)


def test_no_limit_never_sleeps_and_a_new_limit_starts_a_new_window():
    m = FakeMachine()
    t = Throttle(100, 1, cpu=lambda: m.cpu, clock=lambda: m.now, sleep=m.sleep)
    run_steps(t, m, 100, 0.05, 1.0)
    assert t.slept_s == 0 and m.now == pytest.approx(5.0)
    t.set_limit(50)  # from the control thread: the loop starts measuring at its next safe point
    assert t.wake.is_set()
    run_steps(t, m, 400, 0.05, 1.0)
    assert t.slept_s > 0
    # the 5 unthrottled seconds before are not paid for afterwards
    assert (m.cpu - 5.0) / (m.now - 5.0) == pytest.approx(0.5, abs=0.02)
    t.set_limit(50, cores=2)  # threads changed at a round boundary: the same CPU time is half the share
    before = t.slept_s
    run_steps(t, m, 200, 0.05, 1.0)  # one busy core of two: 50 % already
    assert t.slept_s == pytest.approx(before, abs=1e-6)


def test_a_pause_earns_no_credit():
    """A long pause (no CPU) must not let the next minutes run unthrottled."""
    m = FakeMachine()
    t = Throttle(50, 1, cpu=lambda: m.cpu, clock=lambda: m.now, sleep=m.sleep)
    run_steps(t, m, 40, 0.05, 1.0)
    m.sleep(600)  # paused by the user: wall time, no CPU
    t.tick()
    start_cpu, start_now = m.cpu, m.now
    run_steps(t, m, 400, 0.05, 1.0)
    assert (m.cpu - start_cpu) / (m.now - start_now) == pytest.approx(0.5, abs=0.03)


def test_a_stop_ends_a_sleep_in_progress_and_the_rest_runs_unthrottled():
    cpu = [0.0]
    t = Throttle(1, 1, cpu=lambda: cpu[0], window_s=0.0)  # the real clock and the real wait
    cpu[0] = 1.0  # 1 s of CPU at 1 %: a 100 s sleep is due
    sleeper = threading.Thread(target=t.tick)
    t0 = time.monotonic()
    sleeper.start()
    time.sleep(0.2)
    assert sleeper.is_alive()
    t.stop()
    sleeper.join(5)
    assert not sleeper.is_alive() and time.monotonic() - t0 < 5
    cpu[0] = 10.0
    t.tick()  # stopped: returns at once
    assert time.monotonic() - t0 < 5


def test_the_command_reaches_the_throttle_and_bad_limits_are_warnings():
    said: list = []
    t = Throttle(100, 2)
    c = Control(said.append, t)
    c.apply('{"cmd": "set_cpu_limit", "percent": 40}')
    assert t.percent == 40 and said[-1].message == "using at most 40 % of CPU time from the next step"
    c.apply('{"cmd": "set_cpu_limit", "percent": 100}')
    assert t.percent == 100 and "no CPU-time limit" in said[-1].message
    for junk in ('{"cmd": "set_cpu_limit", "percent": 0}', '{"cmd": "set_cpu_limit", "percent": 101}',
                 '{"cmd": "set_cpu_limit", "percent": "half"}'):
        c.apply(junk)
        assert isinstance(said[-1], ev.Warning)
    assert t.percent == 100
    c.apply('{"cmd": "stop"}')
    assert t.stopped and t.wake.is_set()
    assert ev.encode(ev.SetCpuLimit(percent=30)) == b'{"cmd":"set_cpu_limit","percent":30}\n'


def test_the_setting_is_checked():
    assert build_config({}, {}).cpu_limit == 100
    assert build_config({"cpu_limit": 60}, {}).cpu_limit == 60
    for bad in (0, 101):
        with pytest.raises(SapoError, match="cpu_limit must be 1..100"):
            build_config({"cpu_limit": bad}, {})


def test_the_real_meter_counts_this_process_and_its_children():
    import subprocess
    import sys

    before = process_cpu_seconds()
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 60
        while process_cpu_seconds() - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process_cpu_seconds() - before >= 0.5  # the child's busy half second, while it lives
    finally:
        child.kill()
        child.wait()
