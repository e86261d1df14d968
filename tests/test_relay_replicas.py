"""Relay replicas sharing one Redis: real redis-server, real relay processes, the engine's real relay client.

Groups cross replicas and the stats agree; a replica SIGKILLed drops only its own connections and the
node moves on to the next URL; Redis killed and restarted: unhealthy, a clear ``unavailable``, then
healthy again by itself, with nothing acknowledged lost (AOF, appendfsync always). One test runs a real
node (the bundled model, small settings) through a replica's death.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from engine.sharing.swarm_client import SwarmClient
from engine.tasks.questions import QuestionStream, build_mix
from tools.relay_loadgen import SimNode, http_get
from wire import protocol as p
from wire.identity import Identity
from wire.protocol import Group, Origin, group_digest

from redis_server import RedisServer
from relay_process import RelayProcess

A, B, C = (Identity.from_seed(bytes([i]) * 32) for i in range(11, 14))
SCALE = float(os.environ.get("SAPO_TEST_TIMEOUT_SCALE", "1"))


def groups(node: str, n: int, start: int = 0) -> list[Group]:
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), node, start, []).draw(n)
    return [Group(spec=q.spec, question=q.question, answer=q.answer,
                  # (the question in the working: two questions with one answer and the same completions are one
                  # piece of work, wire.authorship)
                  completions=[f"{q.question} <answer>{q.answer}</answer>", "<answer>-1</answer>"], rewards=[1.0, 0.0],
                  model="m", round=1, origin=Origin(seed=start)) for q in qs]  # drawn with user seed `start`


def client(url: str, me: Identity, log: list[str] | None = None) -> SwarmClient:
    return SwarmClient(url, "rep", me, "smollm2-135m", None, on_status=(log if log is not None else []).append,
                       timeout_s=5)


def health(relay: RelayProcess) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{relay.port}/healthz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def eventually(check: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds * SCALE
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


@pytest.fixture
def replicas(tmp_path: Path, redis_server: RedisServer) -> Iterator[tuple[RelayProcess, RelayProcess]]:
    pair = tuple(RelayProcess(tmp_path / f"relay-{n}", "--redis", redis_server.url).start() for n in "ab")
    yield pair  # type: ignore[misc]
    for r in pair:
        r.stop()


def test_groups_cross_replicas_and_stats_agree(replicas: tuple[RelayProcess, RelayProcess]) -> None:
    ra, rb = replicas
    a, b = client(ra.url, A), client(rb.url, B)
    flat = msgspec.structs.replace(groups(A.node_id, 1, start=9)[0], rewards=[1.0, 1.0])
    ack = a.publish([*groups(A.node_id, 3), flat])
    assert ack is not None and ack.accepted == 3 and [r.reason for r in ack.rejected] == ["zero_advantage"]
    got = b.sample(5, ["basic_arithmetic"])  # through the other replica
    assert len(got) == 3 and {g.node_id for g in got} == {A.node_id}
    assert all(b.screen(g) is None for g in got)
    assert b.sample(5, None) == []  # sent once: unseen_only holds across replicas
    credited = b.report(1, [group_digest(g.group) for g in got[:2]])
    assert credited is not None and credited.accepted == 2

    def board(c: SwarmClient) -> dict[str, tuple[int, int, int]]:
        reply = c.stats()
        assert reply is not None
        return {r.node_id: (r.groups_shared, r.groups_adopted, r.rounds) for r in reply.leaderboard}

    via_a, via_b = board(a), board(b)
    assert via_a == via_b and via_a[A.node_id] == (3, 2, 1) and via_b[B.node_id] == (0, 0, 1)
    # Peers online counts both replicas' nodes (each replica's count reaches Redis once a second).
    eventually(lambda: (a.stats().peers_online, b.stats().peers_online) == (2, 2))  # type: ignore[union-attr]
    for r in replicas:
        status, body = health(r)
        assert status == 200 and body["state"] == "redis"
    eventually(lambda: all(health(r)[1]["pool_groups"] == 3 for r in replicas))
    # The status page of either replica shows the whole swarm.
    pages = [json.loads(http_get(f"http://127.0.0.1:{r.port}/api/swarm/rep")) for r in replicas]
    for page in pages:
        assert (page["peers_online"], page["pool_groups"], page["groups_per_minute"]) == (2, 3, 3)
        assert {row["node_id"]: (row["shared"], row["adopted"]) for row in page["leaderboard"]} == {
            A.node_id: (3, 2), B.node_id: (0, 0)}
    assert [row["online"] for row in pages[0]["leaderboard"]] == [True, False]  # "online": on this replica
    a.close(), b.close()


def test_a_replica_killed_drops_only_its_connections(replicas: tuple[RelayProcess, RelayProcess]) -> None:
    ra, rb = replicas
    log: list[str] = []
    mover = client(f"{ra.url},{rb.url}", A, log)
    stayer = client(rb.url, B)
    assert mover.publish(groups(A.node_id, 2)) is not None and mover.url == ra.url
    assert stayer.stats() is not None
    ra.kill()
    assert mover.publish(groups(A.node_id, 1, start=2)) is None and not mover.connected
    assert mover.url == rb.url and any(f"retrying with {rb.url}" in m for m in log)
    # The node on the surviving replica never noticed, and still sees what went through the dead one.
    assert len(stayer.sample(5, None)) == 2 and stayer.connected
    mover._next_try = 0  # skip the backoff wait
    ack = mover.publish(groups(A.node_id, 1, start=2))
    assert ack is not None and ack.accepted == 1 and mover.connected
    assert any(m.startswith(f"reconnected to relay {rb.url}") for m in log)
    assert len(stayer.sample(5, None)) == 1
    # The dead replica's heartbeat expires: peers online falls back to the living.
    eventually(lambda: stayer.stats().peers_online == 2)  # type: ignore[union-attr]
    mover.close(), stayer.close()


def test_redis_restarted_unhealthy_then_healthy_nothing_acknowledged_lost(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis", aof=True).start()
    relay = RelayProcess(tmp_path / "relay", "--redis", redis.url).start()
    try:
        author = client(relay.url, A)
        ack = author.publish(groups(A.node_id, 3))
        assert ack is not None and ack.accepted == 3
        redis.kill()  # SIGKILL: no shutdown save; only the AOF (fsync'd at every write) survives
        eventually(lambda: health(relay)[0] == 503)
        assert health(relay)[1]["status"] == "unavailable"

        async def during_outage() -> None:
            node = SimNode(relay.url, swarm="rep", identity=C)
            reply = await node.connect(10)
            assert isinstance(reply, p.Error) and reply.code == p.Code.UNAVAILABLE, reply
        asyncio.run(during_outage())
        assert author.publish(groups(A.node_id, 1, start=3)) is None  # answered "unavailable"; still connected
        assert author.connected and relay.proc is not None and relay.proc.poll() is None
        try:
            http_get(f"http://127.0.0.1:{relay.port}/api/swarm/rep")
            raise AssertionError("the status JSON answered without Redis")
        except urllib.error.HTTPError as err:
            assert err.code == 503

        redis.start()  # same port, same directory: the AOF is replayed
        eventually(lambda: health(relay)[0] == 200)
        reader = client(relay.url, B)
        got = reader.sample(10, None)
        assert sorted(group_digest(g.group) for g in got) == sorted(group_digest(g) for g in groups(A.node_id, 3))
        ack = author.publish(groups(A.node_id, 1, start=4))  # the same connection works again
        assert ack is not None and ack.accepted == 1
        author.close(), reader.close()
    finally:
        relay.stop()
        redis.stop()


SMALL = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--completions", "4", "--max-tokens", "24",
         "--eval-every", "0", "--threads", "1", "--quiet", "--swarm", "rep"]


@pytest.mark.slow
def test_a_node_keeps_training_when_its_replica_dies(tmp_path: Path, replicas: tuple[RelayProcess, RelayProcess],
                                                     model_cache: Path) -> None:
    ra, rb = replicas
    events = tmp_path / "node.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", *SMALL, "--relay", f"{ra.url},{rb.url}", "--data-dir",
         str(tmp_path / "node"), "--events", str(events), "--local", "2", "--external", "2", "--rounds", "4"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)})

    def read() -> list[dict]:
        return [json.loads(x) for x in events.read_text().splitlines() if x.strip()] if events.exists() else []

    try:
        eventually(lambda: proc.poll() is None and any(e["type"] == "round" for e in read()) or proc.poll() is not None,
                   900)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        ra.kill()
        peer = client(rb.url, C)  # a peer on the surviving replica shares groups the node can train on
        assert peer.publish(groups(C.node_id, 4)) is not None
        _, err = proc.communicate(timeout=900 * SCALE)
        assert proc.returncode == 0, err.decode()[-2000:]
        peer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    all_events = read()
    rounds = [e for e in all_events if e["type"] == "round"]
    assert [e["round"] for e in rounds] == [1, 2, 3, 4]  # never stopped training
    assert rounds[0]["relay_connected"] and rounds[-1]["relay_connected"]
    # The link's changes are `relay` events: replica A lost, then connected to replica B.
    links = [(e["state"], e["url"]) for e in all_events if e["type"] == "relay"]
    lost = next((i for i, (state, _) in enumerate(links) if state == "unreachable"), None)
    assert lost is not None and ("connected", rb.url) in links[lost:], links
    assert sum(e["external_groups"] for e in rounds[1:]) > 0, "trained on nothing from the surviving replica"


def test_a_replica_without_redis_sends_its_node_to_another(tmp_path: Path, redis_server: RedisServer) -> None:
    lost = RedisServer(tmp_path / "other-redis").start()  # replica A's Redis, which will die
    ra = RelayProcess(tmp_path / "relay-a", "--redis", lost.url).start()
    rb = RelayProcess(tmp_path / "relay-b", "--redis", redis_server.url).start()
    try:
        log: list[str] = []
        node = client(f"{ra.url},{rb.url}", A, log)
        assert node.stats() is not None and node.url == ra.url
        lost.kill()
        assert node.publish(groups(A.node_id, 1)) is None and not node.connected
        assert node.url == rb.url and any("is unavailable" in m for m in log)
        node._next_try = 0
        ack = node.publish(groups(A.node_id, 1))
        assert ack is not None and ack.accepted == 1 and node.url == rb.url
        node.close()
    finally:
        ra.stop(), rb.stop(), lost.stop()
