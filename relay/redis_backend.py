"""The relay's pool and stats in Redis (``sapo-relay --redis redis://HOST:PORT/DB``), shared by replicas.

Each request is one Lua script (``relay.redis_lua``: the pool's rules, atomic, bounded work), so a
node connected to replica A samples groups published through replica B, and the stats agree on
every replica. Peers online: each replica writes its own peer counts every second under a key that
expires, so a replica that dies stops counting within a few seconds.

Redis unreachable: calls raise ``relay.backend.Unavailable`` (the server answers ``unavailable``),
``healthy`` turns False until a heartbeat succeeds again; the client reconnects by itself, and
scripts are loaded again after a restart (``register_script`` does that on NOSCRIPT).

What an acknowledged publish can lose is what Redis's persistence allows: with ``appendonly yes``
and ``appendfsync always`` nothing; ``everysec`` up to a second; RDB snapshots only up to the last
snapshot; none at all (``--save ''``) everything on a restart (docs/DEPLOY.md).
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay import redis_lua as lua
from relay.backend import Unavailable
from relay.pool import PoolLimits
from relay.stats import LEADERBOARD_CACHE_S, NodeStats, RoundSet
from wire import protocol as p
from wire.identity import display_name

log = logging.getLogger("relay.redis")

HEARTBEAT_TTL_S = 5  # a replica not heard from for this long no longer counts its peers
MAX_REPLICAS = 256  # replicas whose peer counts are read
SAMPLE_PROBE_BUDGET = 512  # group lookups per sample request (each a few microseconds inside Redis)
REDIS_CONNECTIONS = 64  # per replica; requests beyond it wait (up to REDIS_WAIT_S) for a free one
REDIS_WAIT_S = 5.0
SAMPLE_AUTHOR_DRAW = 128
EXPIRE_SWARMS_PER_S = 64  # swarms (drawn at random) whose old groups a replica's housekeeping expires each second  # authors drawn per sample request (more than MAX_SAMPLE_N: some have nothing)
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


def check_redis_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix") or (parts.scheme != "unix" and not parts.hostname):
        raise ValueError(f"--redis must look like redis://HOST:PORT/DB, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
        db = parts.path.strip("/")
        if parts.scheme != "unix" and db and not (db.isdigit() and int(db) < 16):
            raise ValueError
    except ValueError:
        raise ValueError(f"--redis has a bad port or database number: {url!r}") from None
    return url


class RedisBackend:
    kind = "redis"

    def __init__(self, url: str, limits: PoolLimits, prefix: str = "sapo", *, use_redis_clock: bool = True,
                 rng: random.Random | None = None) -> None:
        self.url = check_redis_url(url)
        self.limits = limits
        self.prefix = prefix
        self.replica_id = secrets.token_hex(8)
        # Redis's clock orders the pool for every replica alike; tests pass their own times instead.
        self.use_redis_clock = use_redis_clock
        self._rng = rng or random.SystemRandom()
        # Short timeouts and one quick retry: a request must fail fast (and say so) when Redis is gone.
        # A bounded pool that waits for a free connection (a burst of requests queues here, briefly)
        # rather than opening one per request or failing with "too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_S,
            socket_timeout=2.0, socket_connect_timeout=2.0,
            retry=Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError], health_check_interval=10)
        self.r = aioredis.Redis.from_pool(pool)
        self._take = self.r.register_script(lua.TAKE_TOKEN)
        self._add = self.r.register_script(lua.ADD)
        self._sample = self.r.register_script(lua.SAMPLE)
        self._report = self.r.register_script(lua.REPORT)
        self._touch = self.r.register_script(lua.TOUCH)
        self._expire = self.r.register_script(lua.EXPIRE)
        self._healthy = False
        self._totals = (0, 0)
        self._seen: dict[tuple[str, str], float] = {}
        self._peers_cache: dict[str, tuple[float, int]] = {}
        self._gpm_cache: dict[str, tuple[float, float]] = {}
        self._board_cache: dict[tuple[str, int], tuple[float, list[p.LeaderboardRow]]] = {}
        self._was_down = False
        self._last_error_log = -1e9

    # --- state for /healthz and /metrics ---

    @property
    def healthy(self) -> bool:
        return self._healthy

    @property
    def pool_groups(self) -> int:
        return self._totals[0]

    @property
    def pool_bytes(self) -> int:
        return self._totals[1]

    def _s(self, swarm: str) -> str:
        return f"{self.prefix}:s:{swarm}"

    def _now(self, now: float) -> str:
        return "" if self.use_redis_clock else repr(now)

    async def _call(self, coro):  # type: ignore[no-untyped-def]
        """Run one Redis call; Unavailable if Redis cannot be reached (or no connection came free in time).

        Health is the heartbeat's to say (once a second): a request that waited too long under load
        is refused, but does not take the replica out of a load balancer's rotation.
        """
        try:
            return await coro
        except _DOWN as exc:
            raise Unavailable(str(exc)) from None
        except RedisError as exc:
            # Redis answered, but refused (out of memory under noeviction, read-only replica, ...):
            # the request cannot be served now either, and the operator must hear of it.
            if time.monotonic() - self._last_error_log > 10:
                self._last_error_log = time.monotonic()
                log.error("Redis refused a request: %s", exc)
            raise Unavailable(str(exc)) from None

    def _mark_down(self, exc: BaseException) -> None:
        if self._healthy or not self._was_down:
            log.warning("Redis unreachable (%s): answering 'unavailable' until it is back", exc)
        self._healthy, self._was_down = False, True

    # --- lifecycle ---

    async def start(self) -> None:
        """Connect and check Redis once; a relay that cannot reach it at start refuses to start."""
        try:
            await self.r.ping()
        except (RedisError, OSError) as exc:
            await self.r.aclose()
            raise Unavailable(f"cannot reach Redis at {self.url}: {exc}") from None
        self._healthy = True
        await self.housekeeping(time.time(), {})

    async def close(self) -> None:
        try:
            await self._flush_seen()
            await self.r.delete(self._replica_key())
            await self.r.zrem(f"{self.prefix}:replicas", self.replica_id)
        except (RedisError, OSError):
            pass  # going away anyway; the heartbeat key expires by itself
        await self.r.aclose()

    def _replica_key(self) -> str:
        return f"{self.prefix}:replica:{self.replica_id}"

    async def housekeeping(self, now: float, peers: Mapping[str, int]) -> None:
        """Heartbeat with this replica's peer counts, totals for /metrics, last-seen times; health from it."""
        key = self._replica_key()
        try:
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                if peers:
                    pipe.hset(key, mapping={swarm: count for swarm, count in peers.items()})
                pipe.expire(key, HEARTBEAT_TTL_S)
                # The list of replicas is only for finding their keys (which expire by themselves);
                # a member silent for a minute is dropped, so clocks need not agree closely.
                pipe.zadd(f"{self.prefix}:replicas", {self.replica_id: now + 60})
                pipe.zremrangebyscore(f"{self.prefix}:replicas", "-inf", now)
                pipe.mget(f"{self.prefix}:groups", f"{self.prefix}:bytes")
                result = await pipe.execute()
            groups, size = result[-1]
            self._totals = (int(groups or 0), int(size or 0))
            await self._flush_seen()
            await self._expire_quiet_swarms(now)
        except _DOWN as exc:
            self._mark_down(exc)
            return
        if not self._healthy:
            log.warning("Redis reachable again at %s", self.url)
        self._healthy = True

    async def _expire_quiet_swarms(self, now: float) -> None:
        """Old groups of swarms nobody publishes to or samples from (those expire their own as they go)."""
        swarms = await self.r.zrandmember(f"{self.prefix}:swarmbytes", EXPIRE_SWARMS_PER_S)
        for swarm in swarms or []:
            name = swarm.decode()
            await self._expire(keys=[self._s(name), self.prefix],
                               args=[name, repr(self.limits.max_age_s), self._now(now)])

    async def _flush_seen(self) -> None:
        while self._seen:
            (swarm, node_id), when = next(iter(self._seen.items()))
            await self._touch(keys=[self._s(swarm), self.prefix], args=[node_id, repr(when)])
            if self._seen.get((swarm, node_id)) == when:  # not seen again meanwhile
                del self._seen[(swarm, node_id)]

    # --- nodes and stats ---

    async def touch(self, swarm: str, node_id: str, now: float) -> None:
        await self._call(self._touch(keys=[self._s(swarm), self.prefix], args=[node_id, repr(now)]))

    def seen(self, swarm: str, node_id: str, now: float) -> None:
        self._seen[(swarm, node_id)] = now  # written by the next heartbeat

    async def peers_online(self, swarm: str, local_peers: int) -> int:
        now = time.monotonic()
        cached = self._peers_cache.get(swarm)
        if cached is None or now - cached[0] >= 1.0:
            others = await self._call(self._other_peers(swarm))
            cached = self._peers_cache[swarm] = (now, others)
        return local_peers + cached[1]

    async def _other_peers(self, swarm: str) -> int:
        rids = await self.r.zrange(f"{self.prefix}:replicas", 0, MAX_REPLICAS - 1)
        rids = [r.decode() for r in rids if r.decode() != self.replica_id]
        if not rids:
            return 0
        async with self.r.pipeline(transaction=False) as pipe:
            for rid in rids:
                pipe.hget(f"{self.prefix}:replica:{rid}", swarm)
            counts = await pipe.execute()
        return sum(int(c) for c in counts if c)

    async def stats_reply(self, swarm: str, node_id: str, now: float, local_peers: int) -> p.StatsReply:
        board = await self.leaderboard(swarm, p.LEADERBOARD_ROWS, now)  # cached: usually no round trip
        async with self.r.pipeline(transaction=False) as pipe:  # the rest in one round trip
            pipe.hgetall(f"{self._s(swarm)}:node:{node_id}")
            pipe.mget(self._minute_keys(swarm, now))
            me, per_second = await self._call(pipe.execute())
        return p.StatsReply(
            peers_online=await self.peers_online(swarm, local_peers),
            groups_per_minute=float(sum(int(c) for c in per_second if c)),
            leaderboard=board,
            you=_row(node_id, me, now),
        )

    def _minute_keys(self, swarm: str, now: float) -> list[str]:
        s = self._s(swarm)
        return [f"{s}:gpm:{sec}" for sec in range(int(now) - 59, int(now) + 1)]

    async def groups_per_minute(self, swarm: str, now: float) -> float:
        cached = self._gpm_cache.get(swarm)
        if cached and 0 <= now - cached[0] < 1.0:  # the status page lists up to 100 swarms per request
            return cached[1]
        per_second = await self._call(self.r.mget(self._minute_keys(swarm, now)))
        value = float(sum(int(c) for c in per_second if c))
        if len(self._gpm_cache) > 4096:
            self._gpm_cache.clear()
        self._gpm_cache[swarm] = (now, value)
        return value

    async def has_swarm(self, swarm: str) -> bool:
        return bool(await self._call(self.r.exists(f"{self._s(swarm)}:board")))

    async def pool_size(self, swarm: str) -> int:
        return int(await self._call(self.r.zcard(f"{self._s(swarm)}:arr")))

    async def leaderboard(self, swarm: str, limit: int, now: float) -> list[p.LeaderboardRow]:
        """Top nodes by groups adopted, then shared (ties: by node id); cached for a second per swarm."""
        cached = self._board_cache.get((swarm, limit))
        if cached and now - cached[0] < LEADERBOARD_CACHE_S:
            return cached[1]
        s = self._s(swarm)
        ids = [i.decode() for i in await self._call(self.r.zrevrange(f"{s}:board", 0, limit - 1))]
        async with self.r.pipeline(transaction=False) as pipe:
            for node_id in ids:
                pipe.hgetall(f"{s}:node:{node_id}")
            rows = await self._call(pipe.execute())
        board = [_row(node_id, h, now) for node_id, h in zip(ids, rows, strict=True) if h]
        self._board_cache[(swarm, limit)] = (now, board)
        return board

    # --- the pool ---

    async def take_publish_token(self, swarm: str, author: str, now: float) -> bool:
        s = self._s(swarm)
        got = await self._call(self._take(keys=[s, self.prefix, f"{s}:tb:{author}"],
                                          args=[self.limits.groups_per_minute, self._now(now)]))
        return bool(got)

    async def publish(self, swarm: str, author: str, group: p.Group, *, key: str, digest: str, payload: bytes,
                      now: float) -> str | None:
        lim = self.limits
        mean = sum(group.rewards) / len(group.rewards)
        reason = await self._call(self._add(
            keys=[self._s(swarm), self.prefix],
            args=[swarm, author, group.spec.dataset, key, digest, payload, lim.per_author, lim.max_groups,
                  lim.max_bytes, repr(lim.max_age_s), self._now(now), repr(mean), group.round, lim.seen_max,
                  repr(lim.seen_max_age_s)],
        ))  # fmt: skip
        reason = reason.decode() if isinstance(reason, bytes) else str(reason or "")
        return reason or None

    async def sample(self, swarm: str, receiver: str, n: int, *, max_age_s: float, now: float,
                     tasks: Iterable[str] | None, unseen_only: bool, max_bytes: int) -> list[bytes]:
        if n <= 0:
            return []
        args: list[object] = [swarm, receiver, n, repr(max_age_s), self._now(now), int(unseen_only), max_bytes,
                              self._rng.randrange(1, 2**31), repr(self.limits.max_age_s), SAMPLE_PROBE_BUDGET,
                              SAMPLE_AUTHOR_DRAW]
        if tasks is not None:
            task_list = list(dict.fromkeys(tasks))
            if not task_list:
                return []  # a filter that admits nothing
            args.extend(task_list)
        return list(await self._call(self._sample(keys=[self._s(swarm), self.prefix], args=args)))

    async def report(self, swarm: str, receiver: str, round_: int, digests: list[str], now: float) -> int:
        lim = self.limits
        args: list[object] = [swarm, receiver, round_, self._now(now), lim.max_groups, lim.max_bytes, *digests]
        return int(await self._call(self._report(keys=[self._s(swarm), self.prefix], args=args)))

    # --- for tests and benchmarks ---

    async def size(self, swarm: str, author: str | None = None) -> int:
        s = self._s(swarm)
        if author is None:
            return int(await self.r.zcard(f"{s}:arr"))
        return int(await self.r.llen(f"{s}:au:{author}"))


def _row(node_id: str, h: Mapping[bytes, bytes], now: float) -> p.LeaderboardRow:
    def num(field: bytes, kind: type = int) -> float:
        return kind(h[field]) if field in h else kind(0)

    rounds = RoundSet.from_json(h.get(b"rn", b"[]").decode())
    stats = NodeStats(node_id, display_name(node_id), num(b"f", float), num(b"l", float) or now,
                      int(num(b"sh")), int(num(b"ad")), num(b"rs", float), int(num(b"rc")), rounds)
    return stats.to_row()

