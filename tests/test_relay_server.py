"""The relay end to end: a real server on 127.0.0.1 (ephemeral port), real websocket clients; the rules and the
hostile frames marked both_backends run against the embedded pool and against Redis (a real redis-server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from wire import protocol as p
from wire.identity import Identity
from relay.pool import PoolLimits
from relay.server import Relay, RelayConfig
from tools.relay_loadgen import SimNode, synthetic_group

SCALE = float(os.environ.get("SAPO_TEST_TIMEOUT_SCALE", "1"))
T = 5 * SCALE  # per request; replies normally take about a millisecond
RNG = random.Random(0)


def run(scenario: Callable[[], Awaitable[None]], limit: float = 20) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(limit * SCALE):
            await scenario()

    asyncio.run(bounded())


REDIS_URL: str | None = None  # set by the backend fixture for tests marked both_backends


@pytest.fixture(params=["embedded", "redis"])
def backend(request: pytest.FixtureRequest) -> Any:
    """The same hostile frames, limits and rules against both backends (a real redis-server for the second)."""
    global REDIS_URL
    REDIS_URL = request.getfixturevalue("redis_server").url if request.param == "redis" else None
    yield request.param
    REDIS_URL = None


both_backends = pytest.mark.usefixtures("backend")


@contextlib.asynccontextmanager
async def relay(tmp_path: Path, **config: Any) -> AsyncIterator[Relay]:
    if REDIS_URL is not None:
        config.setdefault("redis_url", REDIS_URL)
    async with Relay(RelayConfig(data_dir=tmp_path, port=0, **config)) as r:
        yield r


def url(r: Relay) -> str:
    return f"ws://127.0.0.1:{r.port}"


async def joined(r: Relay, swarm: str = "s", **kw: Any) -> SimNode:
    node = SimNode(url(r), swarm=swarm, **kw)
    reply = await node.connect(T)
    assert isinstance(reply, p.Welcome), reply
    return node


async def closed_with(node: SimNode) -> int:
    """Read until the relay closes the connection; return the close code."""
    assert node.ws is not None
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(T):
            while True:
                await node.ws.recv()
    assert info.value.rcvd is not None
    return info.value.rcvd.code


def g(dataset: str = "basic_arithmetic", rewards: list[float] | None = None) -> p.Group:
    group = synthetic_group(RNG, dataset=dataset, completions=2, chars=30)
    if rewards is not None:
        group = p.Group(**{**{f: getattr(group, f) for f in group.__struct_fields__}, "rewards": rewards})
    return group


async def publish(node: SimNode, *groups: p.Group) -> p.Ack:
    ack = await node.request(node.publish_message(*groups), T)
    assert isinstance(ack, p.Ack), ack
    return ack


async def sample(node: SimNode, n: int = 10, **kw: Any) -> list[p.SharedGroup]:
    reply = await node.request(p.Sample(n=n, **kw), T)
    assert isinstance(reply, p.Groups), reply
    return reply.groups


def http(r: Relay, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{r.port}{path}", timeout=T) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read().decode()


@both_backends
def test_publish_sample_round_trip_and_never_own(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            a, b = await joined(r), await joined(r)
            sent = [p.with_author(g(), a.node_id), p.with_author(g(), a.node_id)]
            assert (await publish(a, *sent)).accepted == 2
            got = await sample(b)
            assert sorted((s.group for s in got), key=lambda x: x.spec.index) == sorted(
                sent, key=lambda x: x.spec.index
            )
            assert {(s.node_id, s.public_key) for s in got} == {(a.node_id, a.identity.public_key)}
            assert all(p.shared_group_ok(s, "s") for s in got)  # the author's own signature, passed on
            assert await sample(a) == []  # never one's own
            assert await sample(b) == []  # already seen
            assert len(await sample(b, unseen_only=False)) == 2

    run(scenario)


@both_backends
def test_swarms_are_isolated(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            a, other = await joined(r, "one"), await joined(r, "two")
            await publish(a, g())
            assert await sample(other) == []
            welcome = await SimNode(url(r), swarm="one").connect(T)
            assert isinstance(welcome, p.Welcome) and welcome.peers == 2

    run(scenario)


@both_backends
def test_token_is_required_when_set(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path, token="s3cret") as r:
            for token in (None, "wrong"):
                node = SimNode(url(r), token=token)
                reply = await node.connect(T)
                assert isinstance(reply, p.Error) and reply.code == p.Code.UNAUTHORIZED
                assert await closed_with(node) == 1008
            await joined(r, token="s3cret")

    run(scenario)


@both_backends
def test_zero_advantage_groups_are_refused_and_never_sampled(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            a, b = await joined(r), await joined(r)
            ack = await publish(a, g(rewards=[1.0, 1.0]), g(rewards=[0.0, 1.0]))
            assert ack.accepted == 1 and ack.rejected == [p.Rejection(0, "zero_advantage")]
            assert [s.group.rewards for s in await sample(b)] == [[0.0, 1.0]]

    run(scenario)


@both_backends
def test_task_restriction(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            a, b = await joined(r), await joined(r)
            await publish(a, g("arith"), g("logic"), g("arith"))
            got = await sample(b, tasks=["arith", "chess"])
            assert [s.group.spec.dataset for s in got] == ["arith", "arith"]

    run(scenario)


def test_pool_limits_apply(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path, pool=PoolLimits(max_groups=3)) as r:
            a, b = await joined(r), await joined(r)
            sent = [g() for _ in range(5)]
            await publish(a, *sent)
            assert r.pool.groups == 3
            assert {s.group.spec.index for s in await sample(b)} == {x.spec.index for x in sent[2:]}
            _, _, body = await asyncio.to_thread(http, r, "/metrics")
            assert "sapo_relay_pool_groups 3.0" in body

    run(scenario)


@both_backends
def test_bad_frames_get_errors_and_spare_other_connections(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            bad, good, other = await joined(r), await joined(r), await joined(r)
            await publish(other, g())
            cases: list[tuple[str | bytes, str]] = [
                ("{nope", p.Code.MALFORMED),
                (b"\x00\x01binary", p.Code.MALFORMED),
                ('{"type": "sample", "v": 3, "n": "four"}', p.Code.INVALID),
                ('{"type": "sample", "v": 9, "n": 1}', p.Code.VERSION),
                ('{"type": "sample", "v": 1, "n": 1}', p.Code.VERSION),
                (p.encode(p.Ack(accepted=1)), p.Code.UNEXPECTED),
                (p.encode(p.Hello(swarm="s", public_key=bad.identity.public_key, model="m", client_version="1")),
                 p.Code.UNEXPECTED),
                (p.encode(p.Auth(signature=bytes(64))), p.Code.UNEXPECTED),
                (p.encode(p.Challenge(nonce=bytes(32))), p.Code.UNEXPECTED),
            ]  # fmt: skip
            for frame, code in cases:
                await bad.send_raw(frame)
                reply = await bad.recv(T)
                assert isinstance(reply, p.Error) and reply.code == code, (frame, reply)
                assert len(await sample(good, unseen_only=False)) == 1
            # Oversized: the websocket layer closes with 1009; nothing else notices.
            await bad.send_raw('"' + "x" * p.MAX_FRAME_BYTES + '"')
            assert await closed_with(bad) == 1009
            assert len(await sample(good, unseen_only=False)) == 1
            assert r.metrics.rejections.labels(p.Code.MALFORMED)._value.get() == 2

    run(scenario)


@both_backends
def test_first_message_must_be_hello_in_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            node = SimNode(url(r))
            node.ws = await connect(url(r))
            reply = await node.request(p.Sample(n=1), T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.UNEXPECTED
            assert await closed_with(node) == 1002
        async with relay(tmp_path, hello_timeout_s=0.2 * SCALE) as r:
            silent = SimNode(url(r))
            silent.ws = await connect(url(r))
            reply = await silent.recv(T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.TIMEOUT
            assert await closed_with(silent) == 1008

    run(scenario)


@both_backends
def test_rate_limit_then_close_on_abuse(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path, rate_per_s=0.001, burst=3, error_per_s=0.001, error_burst=2) as r:
            node, bystander = await joined(r), await joined(r)
            codes = []
            for _ in range(5):
                reply = await node.request(p.StatsRequest(), T)
                codes.append(reply.code if isinstance(reply, p.Error) else "ok")
            assert codes == ["ok", "ok", "ok", p.Code.RATE_LIMITED, p.Code.RATE_LIMITED]
            await node.send_raw(p.encode(p.StatsRequest()))
            reply = await node.recv(T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.ABUSE
            assert await closed_with(node) == 1008
            assert isinstance(await bystander.request(p.StatsRequest(), T), p.StatsReply)

    run(scenario)


def test_adoption_and_stats_persist_across_restart(tmp_path: Path) -> None:
    a_key, b_key = Identity.generate(), Identity.generate()

    async def first_life() -> None:
        async with relay(tmp_path) as r:
            a, b, c = await joined(r, identity=a_key), await joined(r, identity=b_key), await joined(r)
            sent = [g(), g()]
            await publish(a, *sent)
            assert len(await sample(b)) == 2
            credited = await b.request(b.report_message(1, *sent), T)
            assert isinstance(credited, p.Ack) and credited.accepted == 2
            assert len(await sample(b, unseen_only=False)) == 2
            again = await b.request(b.report_message(2, *sent), T)
            assert isinstance(again, p.Ack) and again.accepted == 0  # same receiver: no new credit
            assert len(await sample(c)) == 2
            assert isinstance(await c.request(c.report_message(1, *sent), T), p.Ack)
            assert isinstance(await a.request(a.report_message(9), T), p.Ack)
            reply = await a.request(p.StatsRequest(), T)
            assert isinstance(reply, p.StatsReply)
            assert reply.you.groups_adopted == 4 and reply.peers_online == 3
            assert reply.groups_per_minute == 2

    async def second_life() -> None:
        async with relay(tmp_path) as r:
            a = await joined(r, identity=a_key)
            reply = await a.request(p.StatsRequest(), T)
            assert isinstance(reply, p.StatsReply)
            me = reply.you
            assert (me.node_id, me.groups_shared, me.groups_adopted, me.rounds) == (a_key.node_id, 2, 4, 2)
            assert reply.leaderboard[0].node_id == a_key.node_id
            assert b_key.node_id in {row.node_id for row in reply.leaderboard}
            assert reply.peers_online == 1

    run(first_life)
    run(second_life)


def test_crashing_handler_is_closed_1011_and_others_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            victim, bystander = await joined(r), await joined(r)
            real = r._dispatch

            def dispatch(session: Any, msg: p.Message) -> bytes:
                if session.node_id == victim.node_id:
                    raise KeyError("/very/secret/internal/path")
                return real(session, msg)

            monkeypatch.setattr(r, "_dispatch", dispatch)
            await victim.send_raw(p.encode(p.StatsRequest()))
            assert victim.ws is not None
            with pytest.raises(ConnectionClosed) as info:
                await victim.recv(T)
            assert info.value.rcvd is not None
            assert (info.value.rcvd.code, info.value.rcvd.reason) == (1011, "internal error")
            assert isinstance(await bystander.request(p.StatsRequest(), T), p.StatsReply)
            assert r.metrics.crashes._value.get() == 1

    run(scenario)


@both_backends
def test_same_node_again_replaces_the_old_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            old = await joined(r)
            new = await joined(r, identity=old.identity)  # the same key: a restart, a reconnect
            reply = await old.recv(T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.REPLACED
            assert await closed_with(old) == 1008
            assert r.peer_count == 1
            assert isinstance(await new.request(p.StatsRequest(), T), p.StatsReply)

    run(scenario)


@both_backends
def test_healthz_and_metrics_over_plain_http(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            await joined(r)
            status, ctype, body = await asyncio.to_thread(http, r, "/healthz")
            assert (status, ctype) == (200, "application/json")
            assert json.loads(body)["status"] == "ok" and json.loads(body)["peers"] == 1
            status, ctype, body = await asyncio.to_thread(http, r, "/metrics")
            assert status == 200 and ctype.startswith("text/plain")
            for name in ("sapo_relay_peers 1.0", "sapo_relay_request_seconds_bucket", "sapo_relay_pool_bytes"):
                assert name in body

    run(scenario)


def test_stop_is_safe_twice_and_closes_peers_1001(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Relay(RelayConfig(data_dir=tmp_path, port=0))
        await r.start()
        node = await joined(r)
        await asyncio.gather(r.stop(), r.stop())
        await r.stop()
        assert await closed_with(node) == 1001

    run(scenario)


def test_bad_config_is_refused() -> None:
    for bad in ({"port": 70000}, {"rate_per_s": 0}, {"token": ""}, {"bytes_burst": 10}, {"max_completions": 1},
                {"max_completions": 65}, {"max_completion_chars": 0}):
        with pytest.raises(ValueError):
            RelayConfig(data_dir=Path("."), **bad)


@both_backends
def test_welcome_announces_the_limits_the_relay_enforces(tmp_path: Path) -> None:
    async def scenario() -> None:
        pool = PoolLimits(per_author=7, groups_per_minute=3)
        async with relay(tmp_path, pool=pool, max_completions=3, max_completion_chars=50) as r:
            node = SimNode(url(r), swarm="s")
            welcome = await node.connect(T)
            assert isinstance(welcome, p.Welcome) and welcome.node_id == node.node_id
            lim = welcome.limits
            assert (lim.groups_per_minute, lim.groups_per_author, lim.max_completions, lim.max_completion_chars) == (
                3, 7, 3, 50)
            too_many = synthetic_group(RNG, completions=4, chars=10)
            too_long = synthetic_group(RNG, completions=2, chars=60)
            ack = await publish(node, too_many, too_long, g(), g(), g(), g())
            assert [x.reason for x in ack.rejected] == ["over_limits", "over_limits", "rate_limited"]
            assert ack.accepted == 3

    run(scenario)


@both_backends
def test_same_content_from_another_author_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path) as r:
            a, copycat, b = await joined(r), await joined(r), await joined(r)
            original = g()
            assert (await publish(a, original)).accepted == 1
            copy = msgspec.structs.replace(original, spec=msgspec.structs.replace(original.spec, seed=1), round=7)
            ack = await publish(copycat, copy)
            assert ack.rejected == [p.Rejection(0, "duplicate_content")]
            assert {s.node_id for s in await sample(b)} == {a.node_id}

    run(scenario)


@both_backends
def test_allow_list_admits_only_listed_keys(tmp_path: Path) -> None:
    async def scenario() -> None:
        friend = Identity.generate()
        async with relay(tmp_path, allowed_keys=frozenset({friend.node_id})) as r:
            await joined(r, identity=friend)
            stranger = SimNode(url(r))
            reply = await stranger.connect(T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.UNAUTHORIZED
            assert stranger.node_id in reply.reason
            assert await closed_with(stranger) == 1008

    run(scenario)


@both_backends
def test_connections_per_address_can_be_capped(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with relay(tmp_path, max_peers_per_address=2) as r:
            a, b = await joined(r), await joined(r)
            third = SimNode(url(r))
            reply = await third.connect(T)
            assert isinstance(reply, p.Error) and reply.code == p.Code.FULL and "per address" in reply.reason
            again = await joined(r, identity=a.identity)  # a reconnect replaces; it is not a third
            assert await closed_with(a) == 1008
            await b.close()
            async with asyncio.timeout(T):
                while r.per_address.get("127.0.0.1") != 1:
                    await asyncio.sleep(0.01)
            await joined(r)  # room again
            assert isinstance(await again.request(p.StatsRequest(), T), p.StatsReply)

    run(scenario)
