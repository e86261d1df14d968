"""Content the relay pooled recently, remembered after the group has left the pool (issue 23 item 4).

The pool refuses a second group with the same content (``group_digest``) only while the first is pooled
(an hour by default). Without a longer memory, a copier who waits for the original to age out could
publish the same work on a question of its own stream and be credited for it. ``SeenDigests`` keeps each
pooled digest for ``max_age_s`` or until ``max_entries`` newer ones came (the oldest go first), whichever
is sooner: a bounded set, in time order, so expiry is O(1) per digest. ``relay.redis_lua`` keeps the same
memory in Redis (``PREFIX:seen``, a sorted set) with the same rules.

Pure: no I/O, no clock (callers pass ``now``).
"""

from __future__ import annotations

from collections import OrderedDict

EXPIRE_BUDGET = 256  # old digests dropped per call at most: no single call pays for a long quiet spell


class SeenDigests:
    def __init__(self, max_entries: int, max_age_s: float) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._when: OrderedDict[str, float] = OrderedDict()  # "swarm\ndigest" -> first pooled, oldest first

    def __len__(self) -> int:
        return len(self._when)

    def seen(self, swarm: str, digest: str, now: float) -> bool:
        """Whether this content was pooled in this swarm within ``max_age_s`` (and is still remembered)."""
        when = self._when.get(f"{swarm}\n{digest}")
        return when is not None and when >= now - self.max_age_s

    def add(self, swarm: str, digest: str, now: float) -> None:
        """Remember content just pooled (pooled again only once forgotten or past ``max_age_s``: its new time)."""
        key = f"{swarm}\n{digest}"
        self._when.pop(key, None)
        last = next(reversed(self._when.values()), now)
        self._when[key] = max(now, last)  # times never step back, so the oldest is always first
        while len(self._when) > self.max_entries:
            self._when.popitem(last=False)
        self.expire(now)

    def expire(self, now: float) -> None:
        """Forget digests older than ``max_age_s`` (at most ``EXPIRE_BUDGET`` per call)."""
        cutoff = now - self.max_age_s
        for _ in range(EXPIRE_BUDGET):
            oldest = next(iter(self._when.items()), None)
            if oldest is None or oldest[1] >= cutoff:
                return
            self._when.popitem(last=False)
