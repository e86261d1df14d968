"""What the status page shows, as plain JSON-ready dicts: the one place that gathers it.

``swarm_status`` (one swarm) and ``relay_status`` (the swarms this relay serves) read only the
relay's accessors (its peers, ``Pool.size``, ``StatsStore.groups_per_minute`` / ``leaderboard``),
so a relay whose pool and stats live elsewhere (Redis) changes what those accessors read, not
this module. Both are coroutines for that reason: a shared store is read with awaits (the
in-memory accessors answer at once).

Everything here is public: anyone who can reach the relay's port can read it (see
docs/DEPLOY.md). It holds no token, no key, no address; node ids are already public (every
group a node shares carries its id and key). A URL names a swarm, so a request for an unknown
swarm must not create state: such swarms are answered with zeros, and nothing is loaded.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from wire.identity import display_name
from wire.protocol import LEADERBOARD_ROWS

if TYPE_CHECKING:
    from relay.server import Relay

SWARM_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # wire.protocol.SwarmName
MAX_SWARMS_LISTED = 100
MAX_MODELS_LISTED = 10
MODEL_CHARS = 48  # a model name is chosen by its peer: shown short, and only as text


async def swarm_status(relay: Relay, swarm: str, now: float | None = None) -> dict[str, Any]:
    """Peers online, groups per minute, pool size, models online and the leaderboard of one swarm."""
    now = time.time() if now is None else now
    stats = relay.stats
    sessions = relay.peers.get(swarm, {})  # this relay's own connections
    # Only a swarm seen since start has stats in memory: a URL naming another must not load or create any.
    known = stats is not None and (bool(sessions) or stats.has_swarm(swarm))
    rows = [s.to_row() for s in stats.leaderboard(swarm, LEADERBOARD_ROWS, now)] if stats is not None and known else []
    models = Counter(s.model[:MODEL_CHARS] for s in sessions.values())
    return {
        "swarm": swarm,
        "peers_online": len(sessions),
        "groups_per_minute": stats.groups_per_minute(swarm, now) if stats is not None else 0,
        "pool_groups": relay.pool.size(swarm),
        "models": [{"model": m, "peers": n} for m, n in models.most_common(MAX_MODELS_LISTED)],
        "leaderboard": [
            {
                "name": display_name(row.node_id),
                "node_id": row.node_id,
                "shared": row.groups_shared,
                "adopted": row.groups_adopted,
                "rounds": row.rounds,
                "online": row.node_id in sessions,  # on this relay; else "last seen"
                "last_seen_s": max(0, round(now - row.last_seen)),
            }
            for row in rows
        ],
        "time": round(now, 3),
    }


async def relay_status(relay: Relay, now: float | None = None) -> dict[str, Any]:
    """The swarms with peers online on this relay, busiest first (at most MAX_SWARMS_LISTED)."""
    now = time.time() if now is None else now
    stats = relay.stats
    busiest = sorted(relay.peers.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_SWARMS_LISTED]
    return {
        "peers_online": relay.peer_count,
        "swarms_online": len(relay.peers),
        "swarms": [
            {
                "swarm": name,
                "peers_online": len(sessions),
                "groups_per_minute": stats.groups_per_minute(name, now) if stats is not None else 0,
            }
            for name, sessions in busiest
        ],
        "time": round(now, 3),
    }
