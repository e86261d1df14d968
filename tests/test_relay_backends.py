"""The pool's rules on both backends: the embedded pool and the Redis Lua scripts (a real redis-server).

Hand-made cases, each run against ``EmbeddedBackend`` and ``RedisBackend`` with the same inputs and
the same expected outcome: quotas, eviction by age, count and bytes, author-first sampling, the
caller's own groups, task filter, unseen-only, dedup, publish rate, adoption, and the stats.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from relay.backend import EmbeddedBackend
from relay.pool import PoolLimits
from relay.redis_backend import RedisBackend
from tools.relay_loadgen import synthetic_group
from wire import protocol as p

A, B, C = "a" * 32, "b" * 32, "c" * 32
RNG = random.Random(0)
BACKENDS = ["embedded", "redis"]
Factory = Callable[..., Awaitable[Any]]


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """make(**limits) -> a started backend of the parametrized kind (its own swarm keys)."""
    kind = request.param
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    made: list[Any] = []

    async def factory(**limits: Any) -> Any:
        pool = PoolLimits(**limits)
        if kind == "embedded":
            backend: Any = EmbeddedBackend(pool, tmp_path / f"data{len(made)}")
        else:
            assert server is not None
            backend = RedisBackend(server.url, pool, prefix=f"t{len(made)}", use_redis_clock=False,
                                   rng=random.Random(len(made)))
        await backend.start()
        made.append(backend)
        return backend

    return factory


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(60):
            await scenario()

    asyncio.run(bounded())


def group(dataset: str = "basic_arithmetic", round_: int = 0, chars: int = 30) -> p.Group:
    return synthetic_group(RNG, dataset=dataset, completions=2, chars=chars, round_=round_)


async def put(b: Any, author: str, key: str, *, now: float = 100.0, swarm: str = "s", dataset: str = "ds",
              digest: str | None = None, payload: bytes | None = None, round_: int = 0) -> str | None:
    return await b.publish(swarm, author, group(dataset, round_), key=key, digest=digest or f"{author[:4]}{key}",
                           payload=payload or f"{author[:1]}:{key}".encode(), now=now)


async def draw(b: Any, receiver: str = B, n: int = 10, *, swarm: str = "s", max_age_s: float = 1000.0,
               now: float = 100.0, tasks: list[str] | None = None, unseen_only: bool = True) -> list[bytes]:
    return await b.sample(swarm, receiver, n, max_age_s=max_age_s, now=now, tasks=tasks, unseen_only=unseen_only,
                          max_bytes=p.MAX_FRAME_BYTES)


async def size(b: Any, author: str | None = None, swarm: str = "s") -> int:
    if isinstance(b, EmbeddedBackend):
        return b.pool.size(swarm, author)
    return int(await b.size(swarm, author))


def test_own_stale_and_other_swarms_are_not_sampled(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        assert await put(b, A, "old", now=10) is None
        assert await put(b, A, "fresh", now=100) is None
        assert await put(b, B, "own", now=100) is None
        assert await put(b, A, "elsewhere", swarm="other") is None
        assert await draw(b, B, max_age_s=50, now=100) == [b"a:fresh"]  # not stale, not B's own
        assert sorted(await draw(b, C, now=100)) == [b"a:fresh", b"a:old", b"b:own"]
        assert await draw(b, B, swarm="nowhere") == []

    run(scenario)


def test_task_filter_and_unseen_only(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        await put(b, A, "1", dataset="arith")
        await put(b, A, "2", dataset="logic")
        assert await draw(b, B, tasks=["arith"]) == [b"a:1"]
        assert await draw(b, B, tasks=["arith"]) == []  # already sent to B
        assert await draw(b, B, tasks=["arith"], unseen_only=False) == [b"a:1"]
        assert await draw(b, B) == [b"a:2"]
        assert await draw(b, B, tasks=["nothing"], unseen_only=False) == []

    run(scenario)


def test_per_author_quota_drops_the_authors_own_oldest(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(per_author=3)
        for i in range(5):
            assert await put(b, A, str(i), now=100 + i) is None
        await put(b, B, "x")
        assert await size(b, A) == 3 and await size(b, B) == 1
        assert sorted(await draw(b, C)) == [b"a:2", b"a:3", b"a:4", b"b:x"]

    run(scenario)


def test_full_swarm_evicts_the_largest_authors_oldest(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(max_groups=4)
        for i in range(3):
            await put(b, A, str(i), now=100 + i)
        await put(b, B, "0", now=110)
        await put(b, B, "1", now=111)  # 5 > 4: A (the largest) gives up its oldest
        assert (await size(b, A), await size(b, B), await size(b)) == (2, 2, 4)
        assert sorted(await draw(b, C, now=111)) == [b"a:1", b"a:2", b"b:0", b"b:1"]

    run(scenario)


def test_age_expiry(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(max_age_s=100)
        await put(b, A, "early", now=0)
        await put(b, A, "late", now=150)  # publishing expires what is past max age
        assert await size(b) == 1
        assert await draw(b, B, now=150) == [b"a:late"]
        assert await draw(b, C, now=300) == []  # sampling expires too
        assert await size(b) == 0

    run(scenario)


def test_byte_budget_evicts_the_fullest_swarms_largest_author(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(max_bytes=1 << 16)
        blob = b"x" * 10_000
        for i in range(4):
            await put(b, A, str(i), payload=blob + bytes([i]), now=100 + i)
        await put(b, B, "0", payload=blob + b"b", now=110)
        await put(b, C, "0", swarm="small", payload=b"tiny", now=110)
        for i in range(4, 7):  # ~70 KB in all: over 64 KiB, so A's oldest go
            await put(b, A, str(i), payload=blob + bytes([i]), now=110 + i)
        assert await size(b, A) == 5 and await size(b, B) == 1
        assert await size(b, C, swarm="small") == 1  # the small swarm keeps its group
        assert await put(b, B, "huge", payload=b"y" * 20_000) == "too_big"  # > a quarter of the budget

    run(scenario)


def test_author_first_sampling_is_fair_to_small_authors(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        for i in range(40):
            await put(b, A, str(i))
        await put(b, B, "only")
        # Every author once before anyone twice: the one group of B is in every draw of two.
        for _ in range(20):
            assert b"b:only" in await draw(b, C, 2, unseen_only=False)
        # One group per draw: each author about half the time, though A has 40 times as many.
        firsts = Counter([(await draw(b, C, 1, unseen_only=False))[0][:1] for _ in range(200)])
        assert 60 <= firsts[b"b"] <= 140, firsts
        # Asked for more than there are authors: around again, distinct groups.
        got = await draw(b, C, 10, unseen_only=False)
        assert len(got) == len(set(got)) == 10 and b"b:only" in got

    run(scenario)


def test_dedup_by_task_and_by_content(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        assert await put(b, A, "k", digest="d1" * 16) is None
        assert await put(b, A, "k", digest="d2" * 16) == "duplicate"  # one group per task per author
        assert await put(b, B, "other", digest="d1" * 16) == "duplicate_content"  # same content, anyone
        assert await size(b) == 1

    run(scenario)


def test_content_is_refused_after_its_group_left_the_pool_while_remembered(make: Factory) -> None:
    """relay.seen: pooled content stays refused past the pool (10 s here) for seen_max_age_s or seen_max newer."""
    async def scenario() -> None:
        b = await make(max_age_s=10, seen_max=3, seen_max_age_s=1000)
        assert await put(b, A, "1", digest="d1", now=100) is None
        assert await put(b, B, "x", digest="d1", now=120) == "duplicate_content"  # gone from the pool, remembered
        assert await size(b) == 0
        assert await put(b, A, "again", digest="d1", now=120) == "duplicate_content"  # its author's too
        assert await put(b, B, "x", digest="d1", swarm="other", now=120) is None  # per swarm
        # (remembered now: d1 in s, d1 in other)
        assert await put(b, A, "2", digest="d2", now=121) is None
        assert await put(b, B, "x", digest="d1", now=122) == "duplicate_content"
        assert await put(b, A, "3", digest="d3", now=123) is None  # 3 newer than s/d1: forgotten (bounded)
        assert await put(b, B, "x", digest="d1", now=124) is None

        b = await make(max_age_s=10, seen_max_age_s=50)
        assert await put(b, A, "1", digest="d1", now=100) is None
        assert await put(b, B, "x", digest="d1", now=150) == "duplicate_content"
        assert await put(b, B, "x", digest="d1", now=151) is None  # older than seen_max_age_s: forgotten

    run(scenario)


def test_publish_tokens_per_author(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(groups_per_minute=3)
        assert [await b.take_publish_token("s", A, 100.0) for _ in range(4)] == [True, True, True, False]
        assert await b.take_publish_token("s", B, 100.0)  # per author
        assert await b.take_publish_token("s", A, 120.0)  # 20 s refill one
        assert not await b.take_publish_token("s", A, 120.0)

    run(scenario)


def test_adoption_and_stats(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        for node in (A, B, C):
            await b.touch("s", node, 50.0)
        d1, d2 = "1" * 32, "2" * 32
        await put(b, A, "1", digest=d1, round_=3)
        await put(b, A, "2", digest=d2, round_=4)
        assert await b.report("s", B, 7, [d1], 101.0) == 0  # never sent to B: a report cannot claim it
        await draw(b, B)  # sampling alone credits nobody
        assert await b.report("s", B, 8, [d1, d1, d2, "f" * 32], 102.0) == 2
        assert await b.report("s", B, 9, [d1, d2], 103.0) == 0  # once per (receiver, group)
        assert await b.report("s", A, 1, [d1], 103.0) == 0  # one's own, never
        reply = await b.stats_reply("s", A, 104.0, 3)
        assert reply.you.groups_shared == 2 and reply.you.groups_adopted == 2 and reply.you.rounds == 3  # 1, 3, 4
        assert reply.groups_per_minute == 2.0
        assert reply.leaderboard[0].node_id == A
        rows = {row.node_id: row for row in reply.leaderboard}
        assert rows[B].rounds == 3 and rows[B].groups_adopted == 0  # rounds 7, 8, 9
        assert set(rows) == {A, B, C}
        assert reply.peers_online == 3

    run(scenario)


def test_read_only_views_agree(make: Factory) -> None:
    async def scenario() -> None:
        b = await make()
        await b.touch("s", A, 50.0)
        await put(b, A, "1")
        await put(b, A, "2")
        assert await b.pool_size("s") == 2 and await b.pool_size("nowhere") == 0
        assert await b.groups_per_minute("s", 110.0) == 2.0
        assert await b.groups_per_minute("s", 200.0) == 0.0  # a minute later
        (row,) = await b.leaderboard("s", 5, 110.0)
        assert (row.node_id, row.groups_shared) == (A, 2)

    run(scenario)


def test_rounds_count_like_the_round_set(make: Factory) -> None:
    from relay.stats import RoundSet

    async def scenario() -> None:
        b = await make()
        await b.touch("s", B, 50.0)
        rng, expected = random.Random(3), RoundSet()
        for r in [rng.randrange(400) for _ in range(300)] + list(range(1000, 1200)) + [2**31 - 1]:
            expected.add(r)
            await b.report("s", B, r, [], 60.0)
        reply = await b.stats_reply("s", B, 61.0, 1)
        assert reply.you.rounds == len(expected) and len(expected.intervals) == RoundSet.MAX_INTERVALS

    run(scenario)


def test_housekeeping_expires_a_quiet_swarms_old_groups(make: Factory) -> None:
    async def scenario() -> None:
        b = await make(max_age_s=100)
        await put(b, A, "1", now=10)
        await put(b, A, "2", now=150)
        await b.housekeeping(120.0, {})
        assert await b.pool_size("s") == 1
        await b.housekeeping(300.0, {})
        assert await b.pool_size("s") == 0
        await b.housekeeping(301.0, {})
        assert (b.pool_groups, b.pool_bytes) == (0, 0)  # the totals /metrics shows

    run(scenario)


def test_redis_losing_its_data_loses_no_later_stats(redis_server: Any) -> None:
    """Redis restarted without persistence: nodes still signed in are counted again from their next message."""

    async def scenario() -> None:
        b = RedisBackend(redis_server.url, PoolLimits(), use_redis_clock=False)
        await b.start()
        await b.touch("s", A, 50.0)
        await b.touch("s", B, 50.0)
        await put(b, A, "1", round_=1)
        await b.r.flushall()  # what a restart without persistence leaves
        await put(b, A, "2", round_=2)
        await b.report("s", B, 5, [], 101.0)
        reply = await b.stats_reply("s", A, 102.0, 2)
        assert (reply.you.groups_shared, reply.you.rounds) == (1, 1)
        assert {row.node_id for row in reply.leaderboard} == {A, B}
        await b.close()

    run(scenario)


def test_redis_out_of_memory_is_unavailable_not_a_crash(redis_server: Any) -> None:
    from relay.backend import Unavailable

    async def scenario() -> None:
        b = RedisBackend(redis_server.url, PoolLimits(), use_redis_clock=False)
        await b.start()
        await b.touch("s", A, 50.0)
        used = (await b.r.info("memory"))["used_memory"]
        await b.r.config_set("maxmemory", used + (256 << 10))
        await b.r.config_set("maxmemory-policy", "noeviction")
        with pytest.raises(Unavailable, match="maxmemory"):
            for i in range(200):
                await put(b, A, str(i), payload=b"x" * 8000)
        # Refused whole: every group pooled is complete (its hash, its author's list, the arrival index).
        pooled = await b.size("s")
        assert 0 < pooled == await b.size("s", A) == len(await b.r.keys("sapo:s:s:g:*"))
        assert pooled == int(await b.r.get("sapo:groups")) == int(await b.r.zscore("sapo:s:s:cnt", A))
        await b.r.config_set("maxmemory", 0)
        assert await put(b, A, "after") is None  # served again once Redis has room
        await b.close()

    run(scenario)
