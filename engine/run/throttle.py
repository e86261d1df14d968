"""Use at most N % of CPU time (BOINC's CPU throttle): the node sleeps between steps.

The node measures the CPU time it used (its own process and its scoring workers) over a short window
of work and then sleeps long enough that, window and sleep together, CPU time / wall time stays at or
under N % of the cores it uses. Sleeps happen only at safe points (a phase's start and each step a
phase reports: a decoding step, a training micro-batch), never inside llama.cpp or torch, so a
throttled round computes exactly what an unthrottled one does, only later.

``throttle_sleep`` is the rule (pure); ``Throttle`` measures and sleeps; a stop or a new limit ends
the sleep in progress (``wake``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil

WINDOW_S = 1.0  # work measured before each sleep: short enough that the limit holds second by second


def throttle_sleep(cpu_s: float, wall_s: float, cores: int, limit: float) -> float:
    """Seconds to sleep after a window of ``wall_s`` seconds that used ``cpu_s`` CPU seconds, so that
    ``cpu_s / (cores * (wall_s + sleep)) <= limit``. ``limit`` is a share (0.5 = 50 %); 1 or more: never."""
    if limit >= 1.0 or cpu_s <= 0.0:
        return 0.0
    limit = max(limit, 0.01)
    return max(0.0, cpu_s / (max(cores, 1) * limit) - wall_s)


def process_cpu_seconds() -> float:
    """CPU seconds used so far by this process and its live children (the scoring workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue  # a worker that just ended: its time is gone from the count, never negative below
    return total


class Throttle:
    """Called at safe points (``tick``); sleeps when the last window of work went over the limit."""

    def __init__(self, percent: int = 100, cores: int = 1, cpu: Callable[[], float] = process_cpu_seconds,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] | None = None,
                 window_s: float = WINDOW_S) -> None:
        self.percent = percent
        self.cores = cores
        self._cpu, self._clock, self._window = cpu, clock, window_s
        self.wake = threading.Event()  # set by a stop or a new limit: the sleep in progress ends
        self._sleep = sleep or self.wake.wait
        self.stopped = False  # a stop was asked: the rest of the round runs unthrottled
        self.slept_s = 0.0  # in total
        self._start_wall = self._start_cpu = 0.0
        self._changed = False
        self._restart()

    def set_limit(self, percent: int, cores: int | None = None) -> None:
        """From any thread: the loop's thread starts a new window at its next safe point."""
        self.percent = percent
        if cores is not None:
            self.cores = cores
        self._changed = True
        self.wake.set()

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()

    def _restart(self) -> None:
        self._start_wall, self._start_cpu = self._clock(), self._cpu() if self.percent < 100 else 0.0

    def tick(self) -> None:
        if self.percent >= 100 or self.stopped:
            return
        if self._changed:
            self._changed = False
            self._restart()
            return
        wall = self._clock() - self._start_wall
        if wall < self._window:
            return
        self.wake.clear()  # (a stop or new limit from here on ends the sleep below)
        if self.stopped or self._changed:
            return
        cpu = self._cpu()
        # A child that ended takes its CPU time with it: the window's count can drop; never below zero.
        pause = throttle_sleep(max(0.0, cpu - self._start_cpu), wall, self.cores, self.percent / 100)
        if pause > 0:
            before = self._clock()
            self._sleep(pause)
            self.slept_s += self._clock() - before
        self._start_wall, self._start_cpu = self._clock(), self._cpu()
