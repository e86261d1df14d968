"""The relay's bounded pool of recent groups, and server-side sampling from it.

Pure: no I/O, no clock (callers pass ``now``), randomness from an injectable RNG.
Groups are stored already encoded (a ``SharedGroup`` as JSON bytes) so a sample
reply is a join of byte strings, with no re-encoding per receiver.

Limits: per swarm by count, across all swarms by bytes (so many swarms cannot
exhaust memory), and by age. Eviction is always oldest first. The byte budget
also pays for adoption tracking (the receivers remembered per group).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Rough memory cost of bookkeeping, charged to the byte budget so that RSS tracks it.
ENTRY_OVERHEAD_BYTES = 256
RECEIVER_BYTES = 64


@dataclass(frozen=True)
class PoolLimits:
    max_groups: int = 10_000  # per swarm
    max_bytes: int = 256 << 20  # all swarms together
    max_age_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.max_groups < 1:
            raise ValueError("max_groups must be at least 1")
        if self.max_bytes < 1 << 16:
            raise ValueError("max_bytes must be at least 64 KiB")
        if not self.max_age_s > 0:
            raise ValueError("max_age_s must be positive")


class Entry:
    """One pooled group and what sampling needs to know about it."""

    __slots__ = ("author", "dataset", "key", "payload", "has_spread", "received_at", "receivers", "size")

    def __init__(
        self, author: str, dataset: str, key: str, payload: bytes, has_spread: bool, received_at: float
    ) -> None:
        self.author = author
        self.dataset = dataset
        self.key = key
        self.payload = payload
        self.has_spread = has_spread
        self.received_at = received_at
        self.receivers: set[str] = set()  # who got it: adoption counts once per receiver
        self.size = len(payload) + len(key) + ENTRY_OVERHEAD_BYTES


@dataclass(frozen=True)
class Sampled:
    payloads: list[bytes]
    adopted_from: list[str]  # one author per first-time (group, receiver) pair


class _SwarmPool:
    """Entries of one swarm, oldest first: a list with a moving head, for O(1) random access."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.head = 0
        self.by_key: dict[tuple[str, str], Entry] = {}

    def __len__(self) -> int:
        return len(self.entries) - self.head

    def oldest(self) -> Entry | None:
        return self.entries[self.head] if self.head < len(self.entries) else None

    def pop_oldest(self) -> Entry:
        entry = self.entries[self.head]
        self.head += 1
        # Compact now and then, so the dead prefix costs amortised O(1).
        if self.head > 1024 and self.head * 2 > len(self.entries):
            del self.entries[: self.head]
            self.head = 0
        del self.by_key[(entry.author, entry.key)]
        return entry

    def first_fresh(self, cutoff: float) -> int:
        return bisect.bisect_left(self.entries, cutoff, lo=self.head, key=lambda e: e.received_at)


class Pool:
    def __init__(self, limits: PoolLimits | None = None, rng: random.Random | None = None) -> None:
        self.limits = limits or PoolLimits()
        self._rng = rng or random.Random()
        self._swarms: dict[str, _SwarmPool] = {}
        self.groups = 0
        self.bytes = 0

    def size(self, swarm: str) -> int:
        sp = self._swarms.get(swarm)
        return len(sp) if sp else 0

    def add(
        self,
        swarm: str,
        author: str,
        *,
        dataset: str,
        key: str,
        payload: bytes,
        has_spread: bool,
        now: float,
    ) -> str | None:
        """Pool one group; return why it was refused, or None.

        ``key`` identifies the task (``TaskSpec.key()``): one author, one group per task.
        """
        if not has_spread:
            # No reward spread, no advantage: nobody could learn from it, so don't keep it.
            return "zero_advantage"
        sp = self._swarms.setdefault(swarm, _SwarmPool())
        # Keep times non-decreasing per swarm (bisect relies on it), even if the clock steps back.
        last = sp.entries[-1].received_at if len(sp) else now
        entry = Entry(author, dataset, key, payload, has_spread, max(now, last))
        if entry.size > self.limits.max_bytes // 4:
            return "too_big"
        if (author, key) in sp.by_key:
            return "duplicate"
        sp.entries.append(entry)
        sp.by_key[(author, key)] = entry
        self.groups += 1
        self.bytes += entry.size
        self._enforce(sp, now)
        return None

    def sample(
        self,
        swarm: str,
        receiver: str,
        n: int,
        *,
        max_age_s: float,
        now: float,
        tasks: Iterable[str] | None = None,
        unseen_only: bool = True,
        max_bytes: int | None = None,
    ) -> Sampled:
        """Up to ``n`` groups chosen uniformly at random among the eligible ones.

        Eligible: not the receiver's own, received within ``max_age_s``, with reward
        spread, of one of ``tasks`` (if given), and (with ``unseen_only``) never sent
        to this receiver before. Replies stop short of ``max_bytes`` of payload.
        """
        sp = self._swarms.get(swarm)
        if sp is None or n <= 0:
            return Sampled([], [])
        self._expire(sp, now)
        task_set = frozenset(tasks) if tasks is not None else None

        def eligible(e: Entry) -> bool:
            return (
                e.author != receiver
                and e.has_spread
                and (task_set is None or e.dataset in task_set)
                and not (unseen_only and receiver in e.receivers)
            )

        lo = max(sp.head, sp.first_fresh(now - max_age_s))
        picked = _pick(sp.entries, lo, n, eligible, self._rng)
        payloads: list[bytes] = []
        adopted: list[str] = []
        budget = max_bytes if max_bytes is not None else float("inf")
        for entry in picked:
            if len(entry.payload) > budget:
                continue
            budget -= len(entry.payload) + 1
            payloads.append(entry.payload)
            if receiver not in entry.receivers:
                entry.receivers.add(receiver)
                entry.size += RECEIVER_BYTES
                self.bytes += RECEIVER_BYTES
                adopted.append(entry.author)
        self._enforce(sp, now)
        return Sampled(payloads, adopted)

    def expire(self, now: float) -> None:
        """Drop groups past max age in every swarm, and forget empty swarms."""
        for name, sp in list(self._swarms.items()):
            self._expire(sp, now)
            if not len(sp):
                del self._swarms[name]

    def _expire(self, sp: _SwarmPool, now: float) -> None:
        cutoff = now - self.limits.max_age_s
        while (e := sp.oldest()) is not None and e.received_at < cutoff:
            self._drop(sp)

    def _enforce(self, sp: _SwarmPool, now: float) -> None:
        self._expire(sp, now)
        while len(sp) > self.limits.max_groups:
            self._drop(sp)
        while self.bytes > self.limits.max_bytes:
            # Over the shared budget: evict the oldest group of any swarm.
            victim = min(
                (s for s in self._swarms.values() if len(s)),
                key=lambda s: s.entries[s.head].received_at,
            )
            self._drop(victim)

    def _drop(self, sp: _SwarmPool) -> None:
        entry = sp.pop_oldest()
        self.groups -= 1
        self.bytes -= entry.size


def _pick(entries: list[Entry], lo: int, n: int, eligible: Callable[[Entry], bool], rng: random.Random) -> list[Entry]:
    """A uniform random subset of up to n eligible entries of ``entries[lo:]``.

    Random probing first (cheap when most entries qualify), then a full scan when
    probing finds too few: each accepted probe is uniform over the eligible ones,
    so both paths draw the same distribution.
    """
    hi = len(entries)
    span = hi - lo
    if span <= 0:
        return []
    if span > 4 * n + 32:
        chosen: dict[int, Entry] = {}
        for _ in range(8 * n + 16):
            i = rng.randrange(lo, hi)
            if i not in chosen and eligible(entries[i]):
                chosen[i] = entries[i]
                if len(chosen) == n:
                    return list(chosen.values())
    candidates = [e for e in entries[lo:hi] if eligible(e)]
    if len(candidates) <= n:
        rng.shuffle(candidates)
        return candidates
    return rng.sample(candidates, n)
