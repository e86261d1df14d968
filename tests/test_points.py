"""Contribution points (wire/points.py): the one formula of the relay's leaderboard and the app's chart."""

from __future__ import annotations

import datetime as dt
import itertools

from hypothesis import given
from hypothesis import strategies as st

from wire.points import ADOPTED_POINTS, Sample, points, points_per_day

UTC = dt.UTC
DAY = 86_400.0
T0 = dt.datetime(2025, 3, 1, 9, tzinfo=UTC).timestamp()


def test_only_groups_others_trained_earn_and_rounds_count_up_to_them():
    assert points(0, 0) == 0
    assert points(0, 10_000) == 0  # rounds alone (a claim, or training alone): nothing
    assert points(3, 1) == 31 and points(3, 100) == 33
    assert points(-5, -5) == 0  # nonsense counts earn nothing rather than a negative


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 1000), st.integers(0, 1000))
def test_points_grow_with_each_count_and_an_adopted_group_beats_any_rounds(a, r, da, dr):
    assert points(a + da, r + dr) >= points(a, r)
    assert points(a + 1, 0) > points(a, r) - (min(r, a))  # one adopted group is worth more than rounds can add
    assert points(a + 1, r) - points(a, r) >= ADOPTED_POINTS


def test_points_per_day_split_the_running_total_by_day_with_empty_days_shown():
    samples = [Sample(T0, 1, 1), Sample(T0 + 3600, 2, 2), Sample(T0 + 2 * DAY, 4, 5)]
    days = points_per_day(samples, UTC)
    assert days == [(dt.date(2025, 3, 1), 22), (dt.date(2025, 3, 2), 0), (dt.date(2025, 3, 3), 22)]
    assert points_per_day(samples, UTC, start=(1, 1)) == [(dt.date(2025, 3, 1), 11), (dt.date(2025, 3, 2), 0),
                                                          (dt.date(2025, 3, 3), 22)]
    assert points_per_day([], UTC) == []


@given(st.lists(st.tuples(st.floats(0, 30 * DAY), st.integers(0, 500), st.integers(0, 500)), max_size=40))
def test_days_add_up_to_the_highest_total_and_never_go_negative(raw):
    samples = [Sample(T0 + t, a, r) for t, a, r in raw]
    days = points_per_day(samples, UTC)
    assert all(p >= 0 for _, p in days)
    top = max((points(s.groups_adopted, s.rounds) for s in samples), default=0)
    assert sum(p for _, p in days) == top  # a relay's reset (totals going back) is no loss, nor counted twice
    dates = [d for d, _ in days]
    assert dates == sorted(dates) and len(set(dates)) == len(dates)
    assert all((b - a).days == 1 for a, b in itertools.pairwise(dates))
