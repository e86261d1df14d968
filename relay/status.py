"""What the status page shows, as plain JSON-ready dicts: the one place that gathers it.

``swarm_status`` (one swarm) and ``relay_status`` (the swarms this relay serves) read only the
relay's own connections and its backend's read-only views (``relay.backend``: ``peers_online``,
``pool_size``, ``groups_per_minute``, ``leaderboard``), so with replicas on Redis the numbers are
the whole swarm's. Both are coroutines for that reason: a shared store is read with awaits (the
in-memory backend answers at once). Redis unreachable: ``relay.backend.Unavailable``.

Everything here is public: anyone who can reach the relay's port can read it (see
docs/DEPLOY.md). It holds no token, no private key, no address (a manifest key's public half, yes); node ids
are already public (every group a node shares carries its id and key). A URL names a swarm, so a request for an unknown
swarm must not create state: such swarms are answered with zeros, and nothing is loaded.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from collections.abc import Mapping

from relay.swarms import SwarmEntry
from relay.view import RelayView
from wire.identity import display_name
from wire.manifest import mix_summary, signer_hex
from wire.points import points
from wire.protocol import LEADERBOARD_ROWS

MAX_SWARMS_LISTED = 100
MAX_MODELS_LISTED = 10
MODEL_CHARS = 48  # a model name is chosen by its peer: shown short, and only as text


async def swarm_status(relay: RelayView, swarm: str, now: float | None = None) -> dict[str, Any]:
    """Peers online, groups per minute, pool size, models online and the leaderboard of one swarm."""
    now = time.time() if now is None else now
    backend = relay.backend
    sessions = relay.peers.get(swarm, {})  # this relay's own connections
    # A URL naming a swarm nobody uses must not load or create any state.
    known = bool(sessions) or await backend.has_swarm(swarm)
    rows = await backend.leaderboard(swarm, LEADERBOARD_ROWS, now) if known else []
    # By contribution points (wire/points.py, the app's formula too): the backend's order by groups adopted,
    # ties now broken by the rounds that count.
    rows = sorted(rows, key=lambda r: -points(r.groups_adopted, r.rounds))
    models = Counter(s.model[:MODEL_CHARS] for s in sessions.values())  # this relay's nodes only
    return {
        "swarm": swarm,
        "peers_online": await backend.peers_online(swarm, len(sessions)),
        "groups_per_minute": round(await backend.groups_per_minute(swarm, now)),
        "pool_groups": await backend.pool_size(swarm),
        "models": [{"model": m, "peers": n} for m, n in models.most_common(MAX_MODELS_LISTED)],
        "leaderboard": [
            {
                "name": display_name(row.node_id),
                "node_id": row.node_id,
                "shared": row.groups_shared,
                "adopted": row.groups_adopted,
                "rounds": row.rounds,
                "points": points(row.groups_adopted, row.rounds),
                "online": row.node_id in sessions,  # on this relay; else "last seen"
                "last_seen_s": max(0, round(now - row.last_seen)),
            }
            for row in rows
        ],
        "time": round(now, 3),
    }


async def public_swarms(relay: RelayView, declared: Mapping[str, SwarmEntry] | None,
                        now: float | None = None) -> list[dict[str, Any]]:
    """The public swarms of ``sapo-relay --swarms`` (GET /swarms, the status page, the wizard's list): what each
    runs and how busy it is. Private swarms are never listed; no token ever is."""
    now = time.time() if now is None else now
    out = []
    for name, entry in sorted((declared or {}).items())[:MAX_SWARMS_LISTED]:
        m = entry.manifest
        if not m.public:
            continue
        out.append({
            "swarm": name,
            "description": m.description,
            "tasks": mix_summary(m),
            "models": list(m.models),
            "completions": m.completions,
            "max_tokens": m.max_tokens,
            "digest": entry.digest,
            # Where the operator signs manifests: the key and its signature of (swarm, digest), so that anyone can check
            # the listing (wire.manifest.manifest_signature_ok) and the key an invite pins; "" where unsigned.
            "signer": signer_hex(entry.signer),
            "signature": entry.signature.hex() if entry.signature is not None else "",
            # The operator's earlier manifest keys, oldest first, each handing over to the next and the last to
            # ``signer`` (wire.manifest.handover_chain checks them): what an invite pinning an old key still follows.
            "handovers": [{"old": signer_hex(h.old), "signature": bytes(h.signature).hex()} for h in entry.handovers],
            "peers_online": await relay.backend.peers_online(name, len(relay.peers.get(name, {}))),
            "groups_per_minute": round(await relay.backend.groups_per_minute(name, now)),
        })
    return out


async def relay_status(relay: RelayView, now: float | None = None,
                       declared: Mapping[str, SwarmEntry] | None = None) -> dict[str, Any]:
    """The swarms with peers online on this relay, busiest first (at most MAX_SWARMS_LISTED), and its public
    swarms (``public``) where it declares swarms."""
    now = time.time() if now is None else now
    backend = relay.backend
    busiest = sorted(relay.peers.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_SWARMS_LISTED]
    return {
        "peers_online": relay.peer_count,  # this relay's (with replicas, each lists the swarms it serves)
        "swarms_online": len(relay.peers),
        "swarms": [
            {
                "swarm": name,
                "peers_online": await backend.peers_online(name, len(sessions)),
                "groups_per_minute": round(await backend.groups_per_minute(name, now)),
            }
            for name, sessions in busiest
        ],
        "public": await public_swarms(relay, declared, now),
        "time": round(now, 3),
    }
