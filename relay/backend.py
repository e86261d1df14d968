"""Where the relay keeps its shared state: the pool of groups and the contribution stats.

The server talks only to a ``Backend``. Two implementations:

- ``EmbeddedBackend`` (the default): today's in-memory ``Pool`` and SQLite ``StatsStore``, one
  process. Every call runs without awaiting, so each request is atomic on the event loop.
- ``relay.redis_backend.RedisBackend`` (``sapo-relay --redis URL``): the same rules in Redis, so
  any number of replicas share one pool and one set of stats per swarm.

A backend that cannot reach its store raises ``Unavailable``; the server answers the request with
``Code.UNAVAILABLE`` and reports unhealthy on ``/healthz`` until the store is back.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from relay.pool import Pool, PoolLimits
from relay.stats import StatsStore
from wire import protocol as p

STATS_FILE = "relay-stats.sqlite3"


class Unavailable(Exception):
    """The shared state cannot be reached now; the request may succeed later (or on another relay)."""


class Backend(Protocol):
    kind: str  # "embedded" or "redis": shown on /healthz

    @property
    def healthy(self) -> bool: ...
    @property
    def pool_groups(self) -> int: ...  # all swarms (for /metrics; may lag a second)
    @property
    def pool_bytes(self) -> int: ...

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def housekeeping(self, now: float, peers: Mapping[str, int]) -> None:
        """Once a second: expire old groups, persist, and (replicas) say how many peers this relay serves."""

    async def touch(self, swarm: str, node_id: str, now: float) -> None:
        """A node was admitted: create or refresh its stats row."""

    def seen(self, swarm: str, node_id: str, now: float) -> None:
        """A node left: its last-seen time, written soon (never fails: called while a connection closes)."""

    async def take_publish_token(self, swarm: str, author: str, now: float) -> bool: ...

    async def publish(self, swarm: str, author: str, group: p.Group, *, key: str, digest: str, payload: bytes,
                      now: float) -> str | None:
        """Pool one group and count it for its author; why it was refused, or None."""

    async def sample(self, swarm: str, receiver: str, n: int, *, max_age_s: float, now: float,
                     tasks: Iterable[str] | None, unseen_only: bool, max_bytes: int) -> list[bytes]: ...

    async def report(self, swarm: str, receiver: str, round_: int, digests: list[str], now: float) -> int:
        """A round done, these groups trained: credit their authors once per receiver; how many were credited."""

    async def stats_reply(self, swarm: str, node_id: str, now: float, local_peers: int) -> p.StatsReply: ...

    async def peers_online(self, swarm: str, local_peers: int) -> int:
        """Peers of a swarm on every replica (this one's own count is ``local_peers``)."""

    # Read-only views (status page, /metrics): swarm-wide with Redis.
    async def leaderboard(self, swarm: str, limit: int, now: float) -> list[p.LeaderboardRow]: ...
    async def groups_per_minute(self, swarm: str, now: float) -> float: ...
    async def pool_size(self, swarm: str) -> int: ...
    async def has_swarm(self, swarm: str) -> bool:
        """Whether the swarm has any state (never creates or loads any: a status URL can name anything)."""


class EmbeddedBackend:
    """One relay process: the pure pool in memory, stats in SQLite (the default)."""

    kind = "embedded"

    def __init__(self, limits: PoolLimits, data_dir: Path, seed: int | None = None) -> None:
        self.pool = Pool(limits, seed=seed)
        self.data_dir = data_dir
        self.stats: StatsStore | None = None

    @property
    def healthy(self) -> bool:
        return True

    @property
    def pool_groups(self) -> int:
        return self.pool.groups

    @property
    def pool_bytes(self) -> int:
        return self.pool.bytes

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.stats = StatsStore(self.data_dir / STATS_FILE)

    async def close(self) -> None:
        if self.stats is not None:
            self.stats.close()

    async def housekeeping(self, now: float, peers: Mapping[str, int]) -> None:
        self.pool.expire(now)
        assert self.stats is not None
        await self.stats.flush_async()

    async def touch(self, swarm: str, node_id: str, now: float) -> None:
        assert self.stats is not None
        self.stats.touch(swarm, node_id, now)

    def seen(self, swarm: str, node_id: str, now: float) -> None:
        if self.stats is not None:
            self.stats.touch(swarm, node_id, now)

    async def take_publish_token(self, swarm: str, author: str, now: float) -> bool:
        return self.pool.take_publish_token(swarm, author, now)

    async def publish(self, swarm: str, author: str, group: p.Group, *, key: str, digest: str, payload: bytes,
                      now: float) -> str | None:
        reason = self.pool.add(swarm, author, dataset=group.spec.dataset, key=key, digest=digest, payload=payload,
                               has_spread=True, now=now)
        if reason is None:
            assert self.stats is not None
            self.stats.record_publish(swarm, author, statistics.fmean(group.rewards), group.round, now)
        return reason

    async def sample(self, swarm: str, receiver: str, n: int, *, max_age_s: float, now: float,
                     tasks: Iterable[str] | None, unseen_only: bool, max_bytes: int) -> list[bytes]:
        got = self.pool.sample(swarm, receiver, n, max_age_s=max_age_s, now=now, tasks=tasks,
                               unseen_only=unseen_only, max_bytes=max_bytes)
        return got.payloads

    async def report(self, swarm: str, receiver: str, round_: int, digests: list[str], now: float) -> int:
        assert self.stats is not None
        self.stats.record_round(swarm, receiver, round_, now)
        credited = self.pool.adopt(swarm, receiver, digests)
        for author in credited:
            self.stats.record_adoption(swarm, author)
        return len(credited)

    async def stats_reply(self, swarm: str, node_id: str, now: float, local_peers: int) -> p.StatsReply:
        assert self.stats is not None
        me = self.stats.node(swarm, node_id) or self.stats.touch(swarm, node_id, now)
        return p.StatsReply(
            peers_online=local_peers,
            groups_per_minute=await self.groups_per_minute(swarm, now),
            leaderboard=await self.leaderboard(swarm, p.LEADERBOARD_ROWS, now),
            you=me.to_row(),
        )

    async def peers_online(self, swarm: str, local_peers: int) -> int:
        return local_peers

    async def leaderboard(self, swarm: str, limit: int, now: float) -> list[p.LeaderboardRow]:
        assert self.stats is not None
        return [row.to_row() for row in self.stats.leaderboard(swarm, limit, now)]

    async def groups_per_minute(self, swarm: str, now: float) -> float:
        assert self.stats is not None
        return float(self.stats.groups_per_minute(swarm, now))

    async def pool_size(self, swarm: str) -> int:
        return self.pool.size(swarm)

    async def has_swarm(self, swarm: str) -> bool:
        return self.stats is not None and self.stats.has_swarm(swarm)
