"""The relay's bounded, fair pool of recent groups, and server-side sampling from it.

Pure: no I/O, no clock (callers pass ``now``), randomness from an injectable RNG, or seeded (``seed``): then each
swarm draws from a stream of its own, so a swarm's samples repeat for the same requests whatever other swarms on the
relay do (the experiment's relay: a rerun of a cell gets the same peers' groups; a public relay is not seeded).
Groups are stored already encoded (a ``SharedGroup`` as JSON bytes) so a sample
reply is a join of byte strings, with no re-encoding per receiver.

Fair to authors, so one flooding node cannot crowd out the others:

- each author keeps at most ``per_author`` groups (its own oldest go first), and may add at
  most ``groups_per_minute`` (a token bucket per author, not per connection);
- when a swarm is full, the largest author loses its oldest group;
- a sample picks an author uniformly, then one of its groups, so an author supplies about
  1/authors of what others train on however much it publishes;
- the same content (``group_digest``: answer and completions, spacing, case and order made alike) is pooled
  once, whoever sends it, and refused again for as long as ``relay.seen`` remembers it (a day by default,
  long after the group itself has left the pool);
- "adopted" is credited only when a receiver reports it trained a group that was sent to it,
  once per (receiver, group) (``adopt``).

Limits: per swarm by count, across all swarms by bytes (so many swarms cannot exhaust
memory), and by age. The byte budget also pays for the receivers remembered per group.
Hand-written: nothing off the shelf does per-author fair sampling with these bounds.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from relay.seen import SeenDigests

# Rough memory cost of bookkeeping, charged to the byte budget so that RSS tracks it.
ENTRY_OVERHEAD_BYTES = 256
RECEIVER_BYTES = 64
# A sample request looks at no more than this many entries, whatever the pool holds.
SCAN_BUDGET = 4096
PROBES_PER_AUTHOR = 8


@dataclass(frozen=True)
class PoolLimits:
    max_groups: int = 10_000  # per swarm
    max_bytes: int = 256 << 20  # all swarms together
    max_age_s: float = 3600.0
    per_author: int = 500  # groups one author may have in a swarm's pool
    groups_per_minute: int = 60  # groups one author may add, per swarm (burst: one minute's worth)
    seen_max: int = 200_000  # content digests remembered after their group left the pool (all swarms together)
    seen_max_age_s: float = 86_400.0  # ... for this long at most

    def __post_init__(self) -> None:
        if self.max_groups < 1:
            raise ValueError("max_groups must be at least 1")
        if self.max_bytes < 1 << 16:
            raise ValueError("max_bytes must be at least 64 KiB")
        if not self.max_age_s > 0:
            raise ValueError("max_age_s must be positive")
        if self.per_author < 1:
            raise ValueError("per_author must be at least 1")
        if self.groups_per_minute < 1:
            raise ValueError("groups_per_minute must be at least 1")
        if self.seen_max < 1:
            raise ValueError("seen_max must be at least 1")
        if not self.seen_max_age_s > 0:
            raise ValueError("seen_max_age_s must be positive")


class Entry:
    """One pooled group and what sampling needs to know about it."""

    __slots__ = ("author", "dataset", "key", "digest", "payload", "received_at", "sent_to", "adopted_by", "size",
                 "alive")

    def __init__(self, author: str, dataset: str, key: str, digest: str, payload: bytes, received_at: float) -> None:
        self.author = author
        self.dataset = dataset
        self.key = key
        self.digest = digest
        self.payload = payload
        self.received_at = received_at
        self.sent_to: set[str] = set()  # receivers it was sent to (unseen_only; adoption needs it)
        self.adopted_by: set[str] = set()  # receivers that reported training on it
        self.size = len(payload) + len(key) + len(digest) + ENTRY_OVERHEAD_BYTES
        self.alive = True


@dataclass(frozen=True)
class Sampled:
    payloads: list[bytes]
    authors: list[str]


class _Fifo:
    """A list with a moving head: O(1) append, popleft and random access."""

    __slots__ = ("items", "head")

    def __init__(self) -> None:
        self.items: list[Entry] = []
        self.head = 0

    def __len__(self) -> int:
        return len(self.items) - self.head

    def __getitem__(self, i: int) -> Entry:
        return self.items[self.head + i]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.items[self.head :])

    def append(self, e: Entry) -> None:
        self.items.append(e)

    def first(self) -> Entry:
        return self.items[self.head]

    def popleft(self) -> Entry:
        e = self.items[self.head]
        self.head += 1
        # Compact now and then, so the dead prefix costs amortised O(1).
        if self.head > 64 and self.head * 2 > len(self.items):
            del self.items[: self.head]
            self.head = 0
        return e


class _SwarmPool:
    """One swarm: arrival order (for age), each author's groups (for quotas and sampling)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng  # its sampling's draws
        self.arrivals = _Fifo()  # every entry, oldest first; evicted ones stay (dead) until the head passes
        self.dead = 0
        self.live = 0
        self.bytes = 0
        self.by_author: dict[str, _Fifo] = {}
        self.authors: list[str] = []  # for a uniform pick in O(1)
        self.author_slot: dict[str, int] = {}
        self.by_count: dict[int, set[str]] = {}  # group count -> authors with that many: the largest in O(1)
        self.max_count = 0
        self.by_task: dict[tuple[str, str], Entry] = {}  # (author, TaskSpec key): one group per task per author
        self.by_digest: dict[str, Entry] = {}  # content: once in the pool, whoever sent it
        self.buckets: dict[str, tuple[float, float]] = {}  # author -> (publish tokens, when)

    def __len__(self) -> int:
        return self.live

    def _move(self, author: str, old: int, new: int) -> None:
        if old:
            bucket = self.by_count[old]
            bucket.discard(author)
            if not bucket:
                del self.by_count[old]
        if new:
            self.by_count.setdefault(new, set()).add(author)
        if new > self.max_count:
            self.max_count = new
        while self.max_count and self.max_count not in self.by_count:
            self.max_count -= 1

    def insert(self, e: Entry) -> None:
        fifo = self.by_author.get(e.author)
        if fifo is None:
            fifo = self.by_author[e.author] = _Fifo()
            self.author_slot[e.author] = len(self.authors)
            self.authors.append(e.author)
        fifo.append(e)
        self._move(e.author, len(fifo) - 1, len(fifo))
        self.arrivals.append(e)
        self.by_task[(e.author, e.key)] = e
        self.by_digest[e.digest] = e
        self.live += 1
        self.bytes += e.size

    def evict_oldest_of(self, author: str) -> Entry:
        fifo = self.by_author[author]
        e = fifo.popleft()
        self._move(author, len(fifo) + 1, len(fifo))
        if not fifo:
            del self.by_author[author]
            # Swap-remove from the author list.
            slot = self.author_slot.pop(author)
            last = self.authors.pop()
            if last != author:
                self.authors[slot] = last
                self.author_slot[last] = slot
        del self.by_task[(e.author, e.key)]
        del self.by_digest[e.digest]
        e.alive = False
        self.dead += 1
        self.live -= 1
        self.bytes -= e.size
        self._skip_dead()
        return e

    def _skip_dead(self) -> None:
        arrivals = self.arrivals
        while len(arrivals) and not arrivals.first().alive:
            arrivals.popleft()
            self.dead -= 1
        if self.dead > 1024 and self.dead * 2 > len(arrivals):
            fresh = _Fifo()
            fresh.items = [e for e in arrivals if e.alive]
            self.arrivals, self.dead = fresh, 0

    def oldest(self) -> Entry | None:
        return self.arrivals.first() if len(self.arrivals) else None

    def largest_author(self) -> str:
        return next(iter(self.by_count[self.max_count]))


class Pool:
    def __init__(self, limits: PoolLimits | None = None, rng: random.Random | None = None,
                 seed: int | None = None) -> None:
        self.limits = limits or PoolLimits()
        self._rng = rng or random.Random()
        self._seed = seed
        self._swarms: dict[str, _SwarmPool] = {}
        self.seen = SeenDigests(self.limits.seen_max, self.limits.seen_max_age_s)
        self.groups = 0
        self.bytes = 0

    def _swarm(self, swarm: str) -> _SwarmPool:
        sp = self._swarms.get(swarm)
        if sp is None:
            rng = self._rng if self._seed is None else random.Random(f"{self._seed}/{swarm}")
            sp = self._swarms[swarm] = _SwarmPool(rng)
        return sp

    def size(self, swarm: str, author: str | None = None) -> int:
        sp = self._swarms.get(swarm)
        if sp is None:
            return 0
        if author is None:
            return len(sp)
        fifo = sp.by_author.get(author)
        return len(fifo) if fifo else 0

    def authors(self, swarm: str) -> int:
        sp = self._swarms.get(swarm)
        return len(sp.authors) if sp else 0

    # --- publishing ---------------------------------------------------------------

    def take_publish_token(self, swarm: str, author: str, now: float) -> bool:
        """One group's worth of the author's ``groups_per_minute``; False when it is spent.

        Checked before the (costly) signature, so a flood is turned away cheaply.
        """
        sp = self._swarm(swarm)
        per_min = self.limits.groups_per_minute
        tokens, stamp = sp.buckets.get(author, (float(per_min), now))
        tokens = min(float(per_min), tokens + max(0.0, now - stamp) * per_min / 60.0)
        if tokens < 1.0:
            sp.buckets[author] = (tokens, now)
            return False
        sp.buckets[author] = (tokens - 1.0, now)
        return True

    def add(
        self,
        swarm: str,
        author: str,
        *,
        dataset: str,
        key: str,
        digest: str,
        payload: bytes,
        has_spread: bool,
        now: float,
    ) -> str | None:
        """Pool one group; return why it was refused, or None.

        ``key`` identifies the task (``TaskSpec.key()``): one author, one group per task.
        ``digest`` identifies the content (``group_digest``): once in the pool, whoever sends it, and not
        again while ``seen`` remembers it (a copy published after the original aged out earns nothing).
        """
        if not has_spread:
            # No reward spread, no advantage: nobody could learn from it, so don't keep it.
            return "zero_advantage"
        sp = self._swarm(swarm)
        self._expire(sp, now)
        # Keep times non-decreasing per swarm (age eviction relies on it), even if the clock steps back.
        last = sp.arrivals.items[-1].received_at if len(sp.arrivals) else now
        entry = Entry(author, dataset, key, digest, payload, max(now, last))
        if entry.size > self.limits.max_bytes // 4:
            return "too_big"
        if (author, key) in sp.by_task:
            return "duplicate"
        if digest in sp.by_digest or self.seen.seen(swarm, digest, now):
            return "duplicate_content"
        fifo = sp.by_author.get(author)
        if fifo is not None and len(fifo) >= self.limits.per_author:
            self._evict(sp, author)  # the author's own oldest make room: quota, not a refusal
        sp.insert(entry)
        self.seen.add(swarm, digest, now)
        self.groups += 1
        self.bytes += entry.size
        self._enforce(sp)
        return None

    # --- sampling -----------------------------------------------------------------

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
        """Up to ``n`` groups: an author chosen uniformly among those with an eligible group, then
        one of its eligible groups uniformly; repeated (authors in turn) until ``n``.

        Eligible: not the receiver's own, received within ``max_age_s``, of one of ``tasks``
        (if given), and (with ``unseen_only``) never sent to this receiver before. Replies
        stop short of ``max_bytes`` of payload. At most ``SCAN_BUDGET`` entries are looked at.
        """
        sp = self._swarms.get(swarm)
        if sp is None or n <= 0:
            return Sampled([], [])
        self._expire(sp, now)
        cutoff = now - max_age_s
        task_set = frozenset(tasks) if tasks is not None else None

        def eligible(e: Entry) -> bool:
            return (
                e.received_at >= cutoff
                and (task_set is None or e.dataset in task_set)
                and not (unseen_only and receiver in e.sent_to)
            )

        rng, budget = sp.rng, SCAN_BUDGET
        picked: list[Entry] = []
        chosen: set[int] = set()
        # First every author once, in a random order (a lazy shuffle: no per-request cost for the
        # whole list); then around again, among those that had more, until n.
        order = _lazy_shuffle(len(sp.authors), rng)
        again: deque[tuple[str, list[Entry] | None]] = deque()
        while len(picked) < n and budget > 0:
            pos = next(order, None)
            if pos is not None:
                author, cands = sp.authors[pos], None
                if author == receiver:
                    continue
            elif again:
                author, cands = again.popleft()
            else:
                break
            got, cands, budget = _pick_one(sp.by_author[author], cands, eligible, chosen, rng, budget)
            if got is None:
                continue  # nothing here for this receiver: the author drops out
            picked.append(got)
            chosen.add(id(got))
            if cands is None or cands:
                again.append((author, cands))
        payloads: list[bytes] = []
        authors: list[str] = []
        room = max_bytes if max_bytes is not None else float("inf")
        for entry in picked:
            if len(entry.payload) > room:
                continue
            room -= len(entry.payload) + 1
            payloads.append(entry.payload)
            authors.append(entry.author)
            if receiver not in entry.sent_to:
                entry.sent_to.add(receiver)
                self._charge(sp, entry, RECEIVER_BYTES)
        self._enforce(sp)
        return Sampled(payloads, authors)

    def adopt(self, swarm: str, receiver: str, digests: Iterable[str]) -> list[str]:
        """A receiver reports it trained these groups: the authors to credit, once per (receiver, group).

        Only groups still pooled and actually sent to this receiver count, never one's own.
        """
        sp = self._swarms.get(swarm)
        if sp is None:
            return []
        credited = []
        for digest in dict.fromkeys(digests):
            e = sp.by_digest.get(digest)
            if e is None or e.author == receiver or receiver not in e.sent_to or receiver in e.adopted_by:
                continue
            e.adopted_by.add(receiver)
            self._charge(sp, e, RECEIVER_BYTES)
            credited.append(e.author)
        self._enforce(sp)
        return credited

    # --- limits -----------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Drop groups past max age in every swarm; forget empty swarms and idle publish buckets."""
        per_min = self.limits.groups_per_minute
        self.seen.expire(now)
        for name, sp in list(self._swarms.items()):
            self._expire(sp, now)
            # A bucket that has refilled is the same as no bucket: keep only those still spending.
            sp.buckets = {a: b for a, b in sp.buckets.items() if b[0] + (now - b[1]) * per_min / 60.0 < per_min}
            if not len(sp) and not sp.buckets:
                del self._swarms[name]

    def _charge(self, sp: _SwarmPool, e: Entry, amount: int) -> None:
        e.size += amount
        sp.bytes += amount
        self.bytes += amount

    def _expire(self, sp: _SwarmPool, now: float) -> None:
        cutoff = now - self.limits.max_age_s
        while (e := sp.oldest()) is not None and e.received_at < cutoff:
            self._evict(sp, e.author)  # the oldest overall is its author's oldest too

    def _enforce(self, sp: _SwarmPool) -> None:
        while len(sp) > self.limits.max_groups:
            self._evict(sp, sp.largest_author())
        while self.bytes > self.limits.max_bytes:
            # Over the shared budget: the fullest swarm's largest author gives up its oldest group.
            victim = max((s for s in self._swarms.values() if len(s)), key=lambda s: s.bytes)
            self._evict(victim, victim.largest_author())

    def _evict(self, sp: _SwarmPool, author: str) -> None:
        e = sp.evict_oldest_of(author)
        self.groups -= 1
        self.bytes -= e.size


def _lazy_shuffle(n: int, rng: random.Random) -> Iterator[int]:
    """A uniform random permutation of range(n), produced one element at a time (Fisher-Yates)."""
    swapped: dict[int, int] = {}
    for i in range(n):
        j = rng.randrange(i, n)
        yield swapped.get(j, j)
        swapped[j] = swapped.get(i, i)


def _pick_one(
    fifo: _Fifo,
    cands: list[Entry] | None,
    eligible: Callable[[Entry], bool],
    chosen: set[int],
    rng: random.Random,
    budget: int,
) -> tuple[Entry | None, list[Entry] | None, int]:
    """One uniform eligible entry of one author, not yet chosen.

    ``cands``: the author's remaining eligible entries if a scan already listed them, else None.
    Random probes first (cheap when most qualify), then a scan of the author's groups (at most
    ``per_author``). Each accepted probe is uniform over the eligible ones, so both paths draw
    the same distribution. Returns (entry or None, the candidates left if known, budget left).
    """
    if cands is None:
        size = len(fifo)
        for _ in range(min(PROBES_PER_AUTHOR, size)):
            e = fifo[rng.randrange(size)]
            budget -= 1
            if id(e) not in chosen and eligible(e):
                return e, None, budget
        cands = [e for e in fifo if id(e) not in chosen and eligible(e)]
        budget -= size
    if not cands:
        return None, cands, budget
    return cands.pop(rng.randrange(len(cands))), cands, budget
