"""Hostile peers against identities and the pool: a hand-written client speaking raw JSON to a real relay.

Each test is one attack from issue 7 (impostor, forged group, flood, forged report, old client),
with the honest nodes' view checked afterwards. The node-side check against a hostile relay is
in tests/test_attacks_hostile_relay.py. Every attack runs against both backends: the embedded pool
and Redis (a real redis-server), which must refuse exactly the same things.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.pool import PoolLimits
from relay.server import Relay, RelayConfig
from tools.relay_loadgen import SimNode, synthetic_group
from wire import protocol as p
from wire.identity import Identity

SCALE = float(os.environ.get("SAPO_TEST_TIMEOUT_SCALE", "1"))
T = 5 * SCALE
RNG = random.Random(7)
REDIS_URL: str | None = None  # set per test by the backend fixture


@pytest.fixture(autouse=True, params=["embedded", "redis"])
def backend(request: pytest.FixtureRequest) -> Any:
    global REDIS_URL
    REDIS_URL = request.getfixturevalue("redis_server").url if request.param == "redis" else None
    yield request.param
    REDIS_URL = None


async def pool_size(relay: Relay, author: str | None = None) -> int:
    if relay.pool is not None:
        return relay.pool.size("s", author)
    return int(await relay.backend.size("s", author))  # type: ignore[attr-defined]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Raw:
    """The attacker's client: JSON dicts in, JSON dicts out, no protocol library on the sending side."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, url: str) -> Raw:
        return cls(await connect(url, max_size=None))

    async def send(self, obj: dict[str, Any]) -> dict[str, Any]:
        await self.ws.send(json.dumps(obj))
        async with asyncio.timeout(T):
            return json.loads(await self.ws.recv())

    async def closed_with(self) -> int:
        with pytest.raises(ConnectionClosed) as info:
            async with asyncio.timeout(T):
                while True:
                    await self.ws.recv()
        assert info.value.rcvd is not None
        return info.value.rcvd.code

    async def hello(self, public_key: bytes, swarm: str = "s") -> dict[str, Any]:
        return await self.send({"type": "hello", "v": 3, "swarm": swarm, "public_key": b64(public_key),
                                "model": "evil", "client_version": "evil/1"})

    async def join(self, me: Identity, swarm: str = "s") -> None:
        """The honest handshake, by hand: what an attacker with its own key can always do."""
        challenge = await self.hello(me.public_key, swarm)
        assert challenge["type"] == "challenge", challenge
        nonce = base64.b64decode(challenge["nonce"])
        welcome = await self.send({"type": "auth", "v": 3, "signature": b64(p.sign_challenge(me, swarm, nonce))})
        assert welcome["type"] == "welcome" and welcome["node_id"] == me.node_id, welcome

    async def publish(self, groups: list[dict[str, Any]], signatures: list[bytes]) -> dict[str, Any]:
        return await self.send({"type": "publish", "v": 3, "groups": groups, "signatures": [b64(s) for s in signatures]})


def run(scenario: Any, limit: float = 30, **config: Any) -> None:
    if REDIS_URL is not None:
        config["redis_url"] = REDIS_URL

    async def bounded(tmp: Path) -> None:
        async with asyncio.timeout(limit * SCALE):
            async with Relay(RelayConfig(data_dir=tmp, port=0, **config)) as relay:
                await scenario(relay, f"ws://127.0.0.1:{relay.port}")

    asyncio.run(bounded(config.pop("data_dir")))


async def joined(url: str, me: Identity | None = None) -> SimNode:
    node = SimNode(url, swarm="s", identity=me)
    assert isinstance(await node.connect(T), p.Welcome)
    return node


def wire_group(group: p.Group) -> dict[str, Any]:
    return msgspec.to_builtins(group)


# --- impostors ------------------------------------------------------------------------


def test_impostor_without_the_key_is_refused_and_the_real_node_stays(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        real = await joined(url)
        before = await real.request(p.StatsRequest(), T)
        assert isinstance(before, p.StatsReply)
        victim_key = real.identity.public_key
        attempts = {
            "random signature": lambda nonce: RNG.randbytes(64),
            "signed with the impostor's own key": lambda nonce: p.sign_challenge(Identity.generate(), "s", nonce),
            # A signature the real node made for an earlier connection (an observer saw it): the nonce differs.
            "replayed signature": lambda nonce: p.sign_challenge(real.identity, "s", bytes(32)),
            "the real node's signature for another swarm": lambda nonce: p.sign_challenge(real.identity, "t", nonce),
        }
        for why, forge in attempts.items():
            evil = await Raw.open(url)
            challenge = await evil.hello(victim_key)
            assert challenge["type"] == "challenge", why
            reply = await evil.send({"type": "auth", "v": 3,
                                     "signature": b64(forge(base64.b64decode(challenge["nonce"])))})
            assert (reply["type"], reply["code"]) == ("error", "unauthorized"), why
            assert await evil.closed_with() == 1008, why
        # Old-style claims of an id are not even valid frames now.
        evil = await Raw.open(url)
        reply = await evil.send({"type": "hello", "v": 3, "swarm": "s", "node_id": real.node_id, "name": "admin",
                                 "model": "m", "client_version": "1"})
        assert (reply["type"], reply["code"]) == ("error", "invalid")
        # A hello with the victim's key and no auth at all: refused, never admitted.
        evil = await Raw.open(url)
        assert (await evil.hello(victim_key))["type"] == "challenge"
        reply = await evil.send({"type": "stats", "v": 3})
        assert (reply["type"], reply["code"]) == ("error", "unexpected")
        # The real node was never kicked off, and nothing was said in its name.
        after = await real.request(p.StatsRequest(), T)
        assert isinstance(after, p.StatsReply)
        assert after.peers_online == 1 and after.you == before.you
        assert [row.node_id for row in after.leaderboard] == [real.node_id]
        assert relay.metrics.closes.labels("1008")._value.get() == 4

    run(scenario, data_dir=tmp_path)


def test_hello_and_auth_must_come_in_time(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        evil = await Raw.open(url)
        assert (await evil.hello(Identity.generate().public_key))["type"] == "challenge"
        async with asyncio.timeout(T):
            reply = json.loads(await evil.ws.recv())  # never answers the challenge
        assert (reply["type"], reply["code"]) == ("error", "timeout")
        assert await evil.closed_with() == 1008

    run(scenario, data_dir=tmp_path, hello_timeout_s=0.3 * SCALE)


# --- forged groups ----------------------------------------------------------------------


def test_forged_group_signatures_are_refused_by_the_relay(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        honest, receiver = await joined(url), await joined(url)
        genuine = synthetic_group(RNG, completions=2, chars=30, author=honest.node_id)
        assert (await honest.request(honest.publish_message(genuine), T)).accepted == 1  # type: ignore[union-attr]
        evil_key = Identity.generate()
        evil = await Raw.open(url)
        await evil.join(evil_key)
        mine = synthetic_group(RNG, completions=2, chars=30, author=evil_key.node_id)
        altered = msgspec.structs.replace(genuine, completions=["the answer is 7", genuine.completions[1]])
        forged = [
            (mine, RNG.randbytes(64)),  # garbage
            (mine, p.sign_group(evil_key, "other-swarm", mine)),  # signed for another swarm
            (altered, p.sign_group(honest.identity, "s", genuine)),  # the honest signature on altered content
            (genuine, p.sign_group(honest.identity, "s", genuine)),  # the honest group, re-sent as its own
            (mine, p.sign_group(honest.identity, "s", mine)),  # signed by a key that is not the session's
        ]
        ack = await evil.publish([wire_group(g) for g, _ in forged], [s for _, s in forged])
        assert ack["type"] == "ack" and ack["accepted"] == 0
        # The honest node's question is not of the session's stream: refused before any signature work.
        assert [r["reason"] for r in ack["rejected"]] == ["bad_signature", "bad_signature", "not_author",
                                                          "not_author", "bad_signature"]
        got = await receiver.request(p.Sample(n=10), T)
        assert isinstance(got, p.Groups)
        assert [(s.node_id, s.group) for s in got.groups] == [(honest.node_id, genuine)]
        assert relay.metrics.rejections.labels("bad_signature")._value.get() == 3

    run(scenario, data_dir=tmp_path)


def test_a_sender_of_many_forged_groups_is_closed(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        bystander = await joined(url)
        evil, evil_key = await Raw.open(url), Identity.generate()
        await evil.join(evil_key)
        group = wire_group(synthetic_group(RNG, completions=2, chars=10, author=evil_key.node_id))
        replies = []
        with pytest.raises(ConnectionClosed) as info:
            for _ in range(10):
                replies.append(await evil.publish([group], [RNG.randbytes(64)]))
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
        assert replies[-1]["code"] == "abuse"
        assert isinstance(await bystander.request(p.StatsRequest(), T), p.StatsReply)

    run(scenario, data_dir=tmp_path, error_per_s=0.001, error_burst=3)


# --- floods -----------------------------------------------------------------------------


def test_a_flooding_author_is_rate_limited_and_sampled_in_proportion(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        honest = [await joined(url) for _ in range(3)]
        receiver = await joined(url)
        for node in honest:
            groups = [synthetic_group(RNG, completions=2, chars=20) for _ in range(3)]
            assert (await node.request(node.publish_message(*groups), T)).accepted == 3  # type: ignore[union-attr]
        flooder = Identity.generate()
        evil = await Raw.open(url)
        await evil.join(flooder)
        accepted, reasons = 0, Counter[str]()
        started = time.monotonic()
        for _ in range(10):  # 320 groups as fast as the relay takes them
            groups = [synthetic_group(RNG, completions=2, chars=20, author=flooder.node_id) for _ in range(32)]
            ack = await evil.publish([wire_group(g) for g in groups], [p.sign_group(flooder, "s", g) for g in groups])
            accepted += ack["accepted"]
            reasons.update(r["reason"] for r in ack["rejected"])
        # The relay's 60 groups a minute: a burst of 60, and one more per second the flood took (a loaded machine's).
        assert 60 <= accepted <= 60 + int(time.monotonic() - started) + 1, accepted
        assert reasons == {"rate_limited": 320 - accepted}
        assert await pool_size(relay, flooder.node_id) == accepted
        # 60 (or a few more) of 69 pooled groups are the flooder's, yet it supplies about a quarter of what others get.
        counts: Counter[str] = Counter()
        for _ in range(300):
            got = await receiver.request(p.Sample(n=1, unseen_only=False), T)
            assert isinstance(got, p.Groups)
            counts.update(s.node_id for s in got.groups)
        assert sum(counts.values()) == 300
        for node in [*honest]:
            assert 40 < counts[node.node_id] < 110, counts  # 75 expected, sd 7.5: +-4.5 sd (50 was hit once in CI)
        assert 40 < counts[flooder.node_id] < 110, counts  # by volume it would be ~260 of 300
        # Asking for 4 at once: one from each author.
        got = await receiver.request(p.Sample(n=4, unseen_only=False), T)
        assert isinstance(got, p.Groups) and len({s.node_id for s in got.groups}) == 4

    run(scenario, data_dir=tmp_path, rate_per_s=1000, burst=1000)


def test_a_flood_over_the_author_quota_evicts_only_its_own_groups(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        honest = await joined(url)
        mine = [synthetic_group(RNG, completions=2, chars=20) for _ in range(5)]
        await honest.request(honest.publish_message(*mine), T)
        flooder = Identity.generate()
        evil = await Raw.open(url)
        await evil.join(flooder)
        for _ in range(4):
            groups = [synthetic_group(RNG, completions=2, chars=20, author=flooder.node_id) for _ in range(32)]
            await evil.publish([wire_group(g) for g in groups], [p.sign_group(flooder, "s", g) for g in groups])
        assert await pool_size(relay, flooder.node_id) == 20  # its quota; its oldest went first
        assert await pool_size(relay, honest.node_id) == 5  # untouched, though the swarm is "full"
        assert await pool_size(relay) == 25

    pool = PoolLimits(max_groups=25, per_author=20, groups_per_minute=10_000)
    run(scenario, data_dir=tmp_path, pool=pool, rate_per_s=1000, burst=1000)


# --- forged reports ---------------------------------------------------------------------


def test_forged_reports_earn_nothing(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        author = await joined(url)
        groups = [synthetic_group(RNG, completions=2, chars=20) for _ in range(3)]
        await author.request(author.publish_message(*groups), T)
        digests = [p.group_digest(g) for g in groups]
        evil_key = Identity.generate()
        evil = await Raw.open(url)
        await evil.join(evil_key)

        async def report(round_: int, trained: list[str], signature: bytes) -> dict[str, Any]:
            return await evil.send({"type": "report", "v": 3, "round": round_, "trained": trained,
                                    "signature": b64(signature)})

        # Not signed by the session's key: refused outright.
        for sig in (RNG.randbytes(64), p.sign_report(author.identity, "s", 1, digests)):
            reply = await report(1, digests, sig)
            assert (reply["type"], reply["code"]) == ("error", "unauthorized")
        # Signed, but for groups the relay never sent to this node: no credit.
        reply = await report(1, digests, p.sign_report(evil_key, "s", 1, digests))
        assert (reply["type"], reply["accepted"]) == ("ack", 0)
        # Sent one group, claims all three, twice: one credit.
        sampled = await evil.send({"type": "sample", "v": 3, "n": 1})
        assert len(sampled["groups"]) == 1
        for round_ in (2, 3):
            reply = await report(round_, digests, p.sign_report(evil_key, "s", round_, digests))
            assert reply["accepted"] == (1 if round_ == 2 else 0)
        # The author reporting its own groups: no credit either.
        own = await author.request(author.report_message(1, *groups), T)
        assert isinstance(own, p.Ack) and own.accepted == 0
        stats = await author.request(p.StatsRequest(), T)
        assert isinstance(stats, p.StatsReply) and stats.you.groups_adopted == 1

    run(scenario, data_dir=tmp_path)


# --- old clients ------------------------------------------------------------------------


def test_an_old_client_is_told_which_version_to_use(tmp_path: Path) -> None:
    async def scenario(relay: Relay, url: str) -> None:
        old = await Raw.open(url)
        reply = await old.send({"type": "hello", "v": 1, "swarm": "s", "node_id": "ab" * 16, "name": "old-node",
                                "model": "m", "client_version": "sapo-engine/0.1"})
        assert (reply["type"], reply["code"]) == ("error", "version")
        assert f"use version {p.PROTOCOL_VERSION}" in reply["reason"]
        assert await old.closed_with() == 1002
        assert relay.peer_count == 0

    run(scenario, data_dir=tmp_path)
