"""The pure pool: eligibility, uniform sampling, limits, adoption."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from relay.pool import ENTRY_OVERHEAD_BYTES, RECEIVER_BYTES, Pool, PoolLimits

A, B, C = "a" * 32, "b" * 32, "c" * 32


def add(pool: Pool, author: str = A, key: str = "k", *, swarm: str = "s", dataset: str = "ds",
        spread: bool = True, now: float = 100.0, payload: bytes | None = None) -> str | None:  # fmt: skip
    return pool.add(
        swarm, author, dataset=dataset, key=key, payload=payload or f"{author[:1]}:{key}".encode(),
        has_spread=spread, now=now,
    )  # fmt: skip


def sample(pool: Pool, receiver: str = B, n: int = 10, **kw: object) -> list[bytes]:
    kw.setdefault("max_age_s", 1000.0)
    kw.setdefault("now", 100.0)
    return pool.sample("s", receiver, n, **kw).payloads  # type: ignore[arg-type]


def test_sample_skips_own_stale_and_zero_spread() -> None:
    pool = Pool(rng=random.Random(0))
    assert add(pool, A, "old", now=10) is None
    assert add(pool, A, "mine-for-b", now=100) is None
    assert add(pool, B, "b-own", now=100) is None
    assert add(pool, A, "flat", spread=False) == "zero_advantage"
    got = sample(pool, B, max_age_s=50, now=100)
    assert got == [b"a:mine-for-b"]


def test_task_restriction_and_swarm_isolation() -> None:
    pool = Pool(rng=random.Random(0))
    add(pool, A, "1", dataset="arith")
    add(pool, A, "2", dataset="logic")
    add(pool, A, "3", dataset="arith", swarm="other")
    assert sorted(sample(pool, tasks=["arith"])) == [b"a:1"]
    assert sorted(sample(pool, C)) == [b"a:1", b"a:2"]
    assert pool.sample("nowhere", B, 5, max_age_s=10, now=100).payloads == []


def test_unseen_only_and_adoption_once_per_receiver() -> None:
    pool = Pool(rng=random.Random(0))
    add(pool, A, "1")
    first = pool.sample("s", B, 5, max_age_s=100, now=100)
    assert first.payloads == [b"a:1"] and first.adopted_from == [A]
    assert pool.sample("s", B, 5, max_age_s=100, now=100).payloads == []  # already seen
    again = pool.sample("s", B, 5, max_age_s=100, now=100, unseen_only=False)
    assert again.payloads == [b"a:1"] and again.adopted_from == []  # no second credit
    assert pool.sample("s", C, 5, max_age_s=100, now=100).adopted_from == [A]


def test_clock_stepping_back_keeps_order() -> None:
    pool = Pool()
    add(pool, A, "1", now=100)
    add(pool, A, "2", now=50)  # wall clock stepped back
    assert sorted(sample(pool, max_age_s=10, now=105)) == [b"a:1", b"a:2"]


def test_duplicates_refused_per_author() -> None:
    pool = Pool()
    assert add(pool, A, "k") is None
    assert add(pool, A, "k") == "duplicate"
    assert add(pool, C, "k") is None  # another node's answers to the same task are welcome


@pytest.mark.parametrize("size", [20, 400])  # full-scan path and random-probe path
def test_sampling_is_uniform_over_eligible(size: int) -> None:
    pool = Pool(rng=random.Random(1))
    eligible = []
    for i in range(size):
        author = A if i % 4 else B  # a quarter are the receiver's own
        add(pool, author, str(i), spread=i % 3 != 0)
        if author == A and i % 3:
            eligible.append(f"a:{i}".encode())
    counts: Counter[bytes] = Counter()
    draws = 60 * len(eligible)
    for _ in range(draws // 2):
        counts.update(sample(pool, B, n=2, unseen_only=False))
    assert set(counts) == set(eligible)
    expected = draws / len(eligible)
    assert min(counts.values()) > 0.6 * expected
    assert max(counts.values()) < 1.4 * expected


def test_count_limit_evicts_oldest() -> None:
    pool = Pool(PoolLimits(max_groups=3))
    for i in range(5):
        add(pool, A, str(i), now=100 + i)
    assert pool.groups == 3 and pool.size("s") == 3
    assert sorted(sample(pool, now=105)) == [b"a:2", b"a:3", b"a:4"]
    assert add(pool, A, "0", now=106) is None  # evicted keys may come back


def test_age_limit_evicts() -> None:
    pool = Pool(PoolLimits(max_age_s=10))
    add(pool, A, "old", now=100)
    add(pool, A, "new", now=105)
    add(pool, A, "newer", now=112)  # "old" is now past 10 s
    assert pool.groups == 2
    pool.expire(now=200)
    assert pool.groups == 0 and pool.bytes == 0


def test_byte_limit_is_global_across_swarms() -> None:
    limit = 1 << 16
    pool = Pool(PoolLimits(max_bytes=limit))
    payload = b"x" * 4000
    for i in range(40):
        add(pool, A, str(i), swarm=f"s{i % 3}", now=100 + i, payload=payload)
    assert pool.bytes <= limit
    per_entry = len(payload) + ENTRY_OVERHEAD_BYTES + 2
    assert pool.groups == limit // per_entry
    # The survivors are the newest, whichever swarm they are in.
    assert sum(pool.size(f"s{k}") for k in range(3)) == pool.groups


def test_receivers_are_charged_to_the_byte_budget() -> None:
    pool = Pool()
    add(pool, A, "1")
    before = pool.bytes
    for r in range(5):
        pool.sample("s", f"{r:032x}", 1, max_age_s=100, now=100)
    assert pool.bytes == before + 5 * RECEIVER_BYTES


def test_sample_respects_max_bytes_and_too_big_groups() -> None:
    pool = Pool(PoolLimits(max_bytes=1 << 16))
    for i in range(4):
        add(pool, A, str(i), payload=b"y" * 1000)
    assert len(sample(pool, max_bytes=2500)) == 2
    assert add(pool, A, "huge", payload=b"z" * (1 << 15)) == "too_big"


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        PoolLimits(max_groups=0)
    with pytest.raises(ValueError):
        PoolLimits(max_age_s=0)


def test_sampling_stays_fast_when_full() -> None:
    pool = Pool(PoolLimits(max_groups=10_000), rng=random.Random(2))
    nodes = [f"{i:032x}" for i in range(1000)]
    for i in range(10_000):
        add(pool, nodes[i % 1000], str(i), dataset=("arith", "logic")[i % 2], now=100 + i / 1000)
    started = time.process_time()
    for i in range(1000):
        assert len(pool.sample("s", nodes[i], 4, max_age_s=600, now=111).payloads) == 4
    # ~1000 nodes each asking once; the bound is loose for a busy 2-core CI machine.
    assert time.process_time() - started < 2.0
