"""Contribution points, written once: the relay's leaderboard and the app's points chart use this formula.

    points = 10 x (your groups that other nodes trained on) + min(rounds trained, those groups)

What counts is what helped others. A group counts only when another node reports, signed, that it trained
on it; the relay credits each (receiver, group) once, never the author itself, and only for a group it
sent to that receiver (relay/pool.py ``adopt``). Publishing many groups earns nothing unless others train
on them, and the relay bounds publishing per author (groups per minute, pool share). Rounds earn at most
one point per adopted group: a round number is only the node's own claim, so reporting rounds alone, or
training alone, earns nothing; a node whose groups others use gets its rounds counted too.

Points per day (as Folding@home shows them) are differences of the running total at each day's end, so
they add up to the total exactly and never go below zero (the formula only grows with either count).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

ADOPTED_POINTS = 10
ROUND_POINTS = 1


def points(groups_adopted: int, rounds: int) -> int:
    """The total for these counts (negative counts, which no honest source sends, count as 0)."""
    adopted, rounds = max(0, groups_adopted), max(0, rounds)
    return ADOPTED_POINTS * adopted + ROUND_POINTS * min(rounds, adopted)


@dataclass(frozen=True)
class Sample:
    """Running totals at a moment: after a round, the relay's count of this node's adopted groups and
    the rounds it trained while connected."""

    time: float  # seconds since the epoch
    groups_adopted: int
    rounds: int


def points_per_day(samples: Iterable[Sample], tz: dt.tzinfo | None = None,
                   start: tuple[int, int] = (0, 0)) -> list[tuple[dt.date, int]]:
    """Points earned each day, oldest first, every day from the first sample's to the last one's (0 where
    nothing was earned). ``start``: the (adopted, rounds) totals before the first sample; ``tz``: where days
    begin (None: the local time zone). Totals going backwards (a relay's stats reset) count as no loss."""
    by_day: dict[dt.date, int] = {}
    before = points(*start)
    best = before
    for s in sorted(samples, key=lambda s: s.time):
        day = dt.datetime.fromtimestamp(s.time, tz).date()
        now = max(best, points(s.groups_adopted, s.rounds))
        by_day[day] = by_day.get(day, 0) + now - best
        best = now
    if not by_day:
        return []
    first, last = min(by_day), max(by_day)
    return [(first + dt.timedelta(days=i), by_day.get(first + dt.timedelta(days=i), 0))
            for i in range((last - first).days + 1)]
