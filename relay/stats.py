"""Contribution stats per (swarm, node): held in memory, persisted to SQLite.

Memory is the source of truth while the relay runs; each swarm's rows are loaded
on first use. Changes mark rows dirty and ``flush`` writes them in one transaction
(the server calls it about once a second, off the event loop, and on shutdown),
so 1000 busy nodes cost one small batch a second, not a commit per message.
WAL mode keeps readers and the writer out of each other's way.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import json
import logging
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from wire.identity import display_name
from wire.protocol import LeaderboardRow

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    swarm TEXT NOT NULL,
    node_id TEXT NOT NULL,
    name TEXT NOT NULL,
    groups_shared INTEGER NOT NULL DEFAULT 0,
    groups_adopted INTEGER NOT NULL DEFAULT 0,
    reward_sum REAL NOT NULL DEFAULT 0,
    reward_count INTEGER NOT NULL DEFAULT 0,
    rounds TEXT NOT NULL DEFAULT '[]',
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    PRIMARY KEY (swarm, node_id)
) WITHOUT ROWID;
"""
COLUMNS = "swarm, node_id, name, groups_shared, groups_adopted, reward_sum, reward_count, rounds, first_seen, last_seen"
LEADERBOARD_CACHE_S = 1.0


class RoundSet:
    """Distinct round numbers as sorted, disjoint [lo, hi] intervals.

    An honest node's rounds are (nearly) contiguous, so this stays one interval;
    a node sending scattered numbers stops being counted past MAX_INTERVALS.
    """

    MAX_INTERVALS = 64

    def __init__(self, intervals: list[list[int]] | None = None) -> None:
        self.intervals = intervals or []

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.intervals)

    def add(self, r: int) -> bool:
        """Add a round; True if it is new (and was counted)."""
        iv = self.intervals
        i = bisect.bisect_right(iv, [r, float("inf")])  # first interval starting after r
        if i and iv[i - 1][1] >= r:
            return False
        joins_left = bool(i) and iv[i - 1][1] == r - 1
        joins_right = i < len(iv) and iv[i][0] == r + 1
        if joins_left and joins_right:
            iv[i - 1][1] = iv[i][1]
            del iv[i]
        elif joins_left:
            iv[i - 1][1] = r
        elif joins_right:
            iv[i][0] = r
        elif len(iv) < self.MAX_INTERVALS:
            iv.insert(i, [r, r])
        else:
            return False
        return True

    def to_json(self) -> str:
        return json.dumps(self.intervals, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RoundSet:
        try:
            data = json.loads(text)
            return cls([[int(lo), int(hi)] for lo, hi in data][: cls.MAX_INTERVALS])
        except (ValueError, TypeError):
            return cls()


@dataclass(slots=True)
class NodeStats:
    node_id: str
    name: str
    first_seen: float
    last_seen: float
    groups_shared: int = 0
    groups_adopted: int = 0
    reward_sum: float = 0.0
    reward_count: int = 0
    rounds: RoundSet = field(default_factory=RoundSet)

    @property
    def mean_reward(self) -> float:
        if not self.reward_count:
            return 0.0
        return min(10.0, max(-10.0, self.reward_sum / self.reward_count))

    def to_row(self) -> LeaderboardRow:
        return LeaderboardRow(
            node_id=self.node_id,
            groups_shared=self.groups_shared,
            groups_adopted=self.groups_adopted,
            rounds=len(self.rounds),
            mean_reward=self.mean_reward,
            last_seen=self.last_seen,
        )


class RateWindow:
    """Events in the last minute, in one-second buckets (memory only)."""

    def __init__(self) -> None:
        self._buckets = [0] * 60
        self._stamps = [-1] * 60

    def add(self, now: float, count: int = 1) -> None:
        sec = int(now)
        i = sec % 60
        if self._stamps[i] != sec:
            self._stamps[i], self._buckets[i] = sec, 0
        self._buckets[i] += count

    def per_minute(self, now: float) -> int:
        sec = int(now)
        return sum(b for b, s in zip(self._buckets, self._stamps, strict=True) if sec - 60 < s <= sec)


class StatsStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable at each WAL checkpoint; fine for stats
        self._db.executescript(SCHEMA)
        self._db.commit()
        self._lock = threading.Lock()  # the connection is shared with the flush thread
        self._swarms: dict[str, dict[str, NodeStats]] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._rates: dict[str, RateWindow] = {}
        self._board_cache: dict[str, tuple[float, list[NodeStats]]] = {}
        self._closed = False

    # --- reading ------------------------------------------------------------------

    def _swarm(self, swarm: str) -> dict[str, NodeStats]:
        nodes = self._swarms.get(swarm)
        if nodes is None:
            with self._lock:
                rows = self._db.execute(f"SELECT {COLUMNS} FROM nodes WHERE swarm = ?", (swarm,)).fetchall()
            nodes = {}
            for _, node_id, _name, shared, adopted, rsum, rcount, rounds, first, last in rows:
                nodes[node_id] = NodeStats(node_id, display_name(node_id), first, last, shared, adopted, rsum, rcount,
                                           RoundSet.from_json(rounds))
            self._swarms[swarm] = nodes
        return nodes

    def has_swarm(self, swarm: str) -> bool:
        """Whether this swarm's rows are in memory (a node of it was seen since start); never loads them."""
        return swarm in self._swarms

    def node(self, swarm: str, node_id: str) -> NodeStats | None:
        return self._swarm(swarm).get(node_id)

    def groups_per_minute(self, swarm: str, now: float) -> int:
        rate = self._rates.get(swarm)
        return rate.per_minute(now) if rate else 0

    def leaderboard(self, swarm: str, limit: int, now: float) -> list[NodeStats]:
        """Top nodes by groups adopted by others, then shared; cached for a second."""
        cached = self._board_cache.get(swarm)
        if cached and now - cached[0] < LEADERBOARD_CACHE_S:
            return cached[1]
        board = heapq.nlargest(
            limit, self._swarm(swarm).values(), key=lambda s: (s.groups_adopted, s.groups_shared, s.last_seen)
        )
        self._board_cache[swarm] = (now, board)
        return board

    # --- writing ------------------------------------------------------------------

    def touch(self, swarm: str, node_id: str, now: float) -> NodeStats:
        """A node was admitted (or left): create or refresh its row."""
        nodes = self._swarm(swarm)
        stats = nodes.get(node_id)
        if stats is None:
            # The name column is only for people reading the database: derived, never chosen.
            stats = nodes[node_id] = NodeStats(node_id, display_name(node_id), now, now)
        stats.last_seen = now
        self._dirty.add((swarm, node_id))
        return stats

    def record_publish(self, swarm: str, node_id: str, mean_reward: float, round_: int, now: float) -> None:
        stats = self._swarm(swarm).get(node_id)
        if stats is None:
            return
        stats.groups_shared += 1
        stats.reward_sum += mean_reward
        stats.reward_count += 1
        stats.rounds.add(round_)
        stats.last_seen = now
        self._rates.setdefault(swarm, RateWindow()).add(now)
        self._dirty.add((swarm, node_id))

    def record_round(self, swarm: str, node_id: str, round_: int, now: float) -> None:
        stats = self._swarm(swarm).get(node_id)
        if stats is not None:
            stats.rounds.add(round_)
            stats.last_seen = now
            self._dirty.add((swarm, node_id))

    def record_adoption(self, swarm: str, author: str) -> None:
        stats = self._swarm(swarm).get(author)
        if stats is not None:
            stats.groups_adopted += 1
            self._dirty.add((swarm, author))

    # --- persistence --------------------------------------------------------------

    def _take_dirty(self) -> list[tuple[object, ...]]:
        """Snapshot dirty rows as tuples (on the event loop), to write elsewhere."""
        rows: list[tuple[object, ...]] = []
        for swarm, node_id in self._dirty:
            s = self._swarms[swarm][node_id]
            rows.append(
                (swarm, node_id, s.name, s.groups_shared, s.groups_adopted, s.reward_sum, s.reward_count,
                 s.rounds.to_json(), s.first_seen, s.last_seen)
            )  # fmt: skip
        self._dirty.clear()
        return rows

    def _write(self, rows: list[tuple[object, ...]]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS.split(", ")[2:] if c != "first_seen")
        with self._lock, self._db:
            self._db.executemany(
                f"INSERT INTO nodes ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) "
                f"ON CONFLICT (swarm, node_id) DO UPDATE SET {updates}",
                rows,
            )

    def flush(self) -> int:
        """Write dirty rows now (blocking); return how many."""
        if self._closed:
            return 0
        rows = self._take_dirty()
        if rows:
            self._write(rows)
        return len(rows)

    async def flush_async(self) -> int:
        """As ``flush``, with the SQLite work in a thread so the event loop keeps serving."""
        if self._closed:
            return 0
        rows = self._take_dirty()
        if rows:
            try:
                await asyncio.to_thread(self._write, rows)
            except sqlite3.Error:
                log.exception("writing stats failed; will retry")
                self._dirty.update((r[0], r[1]) for r in rows)  # type: ignore[misc]
                return 0
        return len(rows)

    def close(self) -> None:
        """Final flush, then close. Safe to call twice."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            with self._lock:
                self._db.close()
