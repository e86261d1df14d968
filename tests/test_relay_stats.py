"""Contribution stats: counting, persistence, the distinct-round set."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.stats import RateWindow, RoundSet, StatsStore
from wire.identity import display_name

A, B = "a" * 32, "b" * 32


def test_counts_survive_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    store = StatsStore(db)
    store.touch("s", A, now=10)
    store.touch("s", B, now=11)
    store.record_publish("s", A, 0.5, 1, now=12)
    store.record_publish("s", A, 1.0, 2, now=13)
    store.record_round("s", A, 3, now=14)
    store.record_adoption("s", A)
    store.record_adoption("s", "f" * 32)  # unknown author: ignored, no crash
    store.close()
    store.close()  # twice is fine

    again = StatsStore(db)
    a = again.node("s", A)
    assert a is not None
    assert (a.name, a.groups_shared, a.groups_adopted, len(a.rounds)) == (display_name(A), 2, 1, 3)
    assert a.mean_reward == 0.75 and a.first_seen == 10 and a.last_seen == 14
    assert again.node("other", A) is None
    assert [s.node_id for s in again.leaderboard("s", 10, now=20)] == [A, B]
    again.close()


def test_names_are_derived_not_stored_choices(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    with sqlite3.connect(db) as conn:  # a row from before v2, with a chosen (hostile) name
        StatsStore(db).close()
        conn.execute("INSERT INTO nodes (swarm, node_id, name, first_seen, last_seen) VALUES ('s', ?, ?, 1, 1)",
                     (A, "\x1b[31mroot"))
    store = StatsStore(db)
    node = store.node("s", A)
    assert node is not None and node.name == display_name(A)
    store.close()


def test_flush_async_writes_in_batches(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    store = StatsStore(db)

    async def go() -> tuple[int, int]:
        for i in range(1000):
            store.touch("s", f"{i:032x}", now=1)
        first = await store.flush_async()
        return first, await store.flush_async()

    assert asyncio.run(go()) == (1000, 0)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 1000
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_leaderboard_is_cached_briefly(tmp_path: Path) -> None:
    store = StatsStore(tmp_path / "s.sqlite3")
    store.touch("s", A, now=1)
    assert len(store.leaderboard("s", 5, now=100.0)) == 1
    store.touch("s", B, now=1)
    assert len(store.leaderboard("s", 5, now=100.5)) == 1
    assert len(store.leaderboard("s", 5, now=101.5)) == 2
    store.close()


def test_rate_window() -> None:
    rate = RateWindow()
    rate.add(1000.2)
    rate.add(1030.0, 2)
    assert rate.per_minute(1030.5) == 3
    assert rate.per_minute(1061.0) == 2
    assert rate.per_minute(2000.0) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=200))
def test_round_set_counts_distinct_rounds(rounds: list[int]) -> None:
    rs, seen = RoundSet(), set()
    for r in rounds:
        new = rs.add(r)
        if new:
            seen.add(r)
        else:
            assert r in seen or len(rs.intervals) == RoundSet.MAX_INTERVALS
    assert len(rs) == len(seen)
    assert RoundSet.from_json(rs.to_json()).intervals == rs.intervals
    flat = [x for iv in rs.intervals for x in iv]
    assert flat == sorted(flat)


def test_round_set_is_bounded_and_forgiving() -> None:
    rs = RoundSet()
    for r in range(0, 10_000, 2):
        rs.add(r)
    assert len(rs.intervals) == RoundSet.MAX_INTERVALS
    assert RoundSet.from_json("not json").intervals == []
