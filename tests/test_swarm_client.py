"""The engine's relay client against a real relay on 127.0.0.1."""

from __future__ import annotations

import pytest

from engine.errors import SapoError
from engine.sharing.swarm_client import SwarmClient, check_relay_url, check_relay_urls
from engine.tasks.questions import QuestionStream, build_mix
from wire.identity import Identity
from wire.protocol import Group, group_digest, shared_group_ok

from relay_process import RelayProcess

A, B, C, D = (Identity.from_seed(bytes([i]) * 32) for i in range(1, 5))


def _groups(node: str, n: int) -> list[Group]:
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), node, 0, []).draw(n)
    return [Group(spec=q.spec, question=q.question, answer=q.answer,
                  completions=[f"<answer>{q.answer}</answer>", "<answer>0</answer>"], rewards=[1.0, 0.0],
                  model="m", round=1) for q in qs]


@pytest.fixture
def relay(tmp_path):
    r = RelayProcess(tmp_path / "relay", "--token", "sesame", "--groups-per-minute", "5").start()
    yield r
    r.stop()


def client(relay: RelayProcess, me: Identity, token: str | None = "sesame", log: list[str] | None = None) -> SwarmClient:
    return SwarmClient(relay.url, "test", me, "smollm2-135m", token, on_status=(log if log is not None else []).append,
                       timeout_s=5)


def test_publish_then_another_node_samples_and_reports(relay):
    a, b = client(relay, A), client(relay, B)
    sent = _groups(A.node_id, 3)
    ack = a.publish(sent)
    assert ack is not None and ack.accepted == 3
    assert a.limits is not None and a.limits.groups_per_minute == 5  # read from the welcome
    got = b.sample(5, ["basic_arithmetic"])
    assert len(got) == 3 and {g.node_id for g in got} == {A.node_id}
    assert all(b.screen(g) is None and shared_group_ok(g, "test") for g in got)
    assert a.sample(5, None) == []  # never one's own
    credited = b.report(1, [group_digest(g.group) for g in got[:2]])
    assert credited is not None and credited.accepted == 2
    assert b.screen(got[0]) == "replay" and b.screen(got[2]) is None  # trained once, never again
    stats = a.stats()
    assert stats is not None and stats.you.groups_shared == 3 and stats.you.groups_adopted == 2
    assert stats.you.node_id == A.node_id
    a.close(), b.close()


def test_publishing_stays_within_the_relays_rate(relay):
    log: list[str] = []
    a = client(relay, C, log=log)
    ack = a.publish(_groups(C.node_id, 8))
    assert ack is not None and ack.accepted == 5 and ack.rejected == []  # not even sent: 5 a minute
    assert any("3 group(s) not shared" in m for m in log)
    assert a.publish(_groups(C.node_id + "x", 2)) is None  # nothing left this minute
    a.close()


def test_wrong_token_is_a_clear_error_on_first_contact(relay):
    with pytest.raises(SapoError, match="refused"):
        client(relay, D, token="wrong").sample(1, None)


def test_unreachable_relay_degrades_and_reconnects(relay):
    log: list[str] = []
    c = client(relay, D, log=log)
    assert c.ensure_connected()
    relay.kill()
    assert c.publish(_groups(D.node_id, 1)) is None and not c.connected
    assert any("retrying" in m for m in log)
    relay.start()
    c._next_try = 0  # skip the backoff wait
    assert c.sample(1, None) == [] and c.connected
    assert any(m.startswith("reconnected") for m in log)
    c.close()


@pytest.mark.parametrize("url", ["http://x:1", "ws://", "relay.example.org", "ws://h:99999"])
def test_bad_relay_urls(url):
    with pytest.raises(SapoError, match="relay URL"):
        check_relay_url(url)


def test_several_relay_urls_are_replicas_tried_in_turn():
    assert check_relay_urls("ws://a:1, wss://b:2,ws://a:1,") == ["ws://a:1", "wss://b:2"]
    for bad in ("", " , ", "ws://a:1,http://b:2", "ws://a:1,ws://b:99999"):
        with pytest.raises(SapoError, match="relay"):
            check_relay_urls(bad)


def test_a_dead_relay_in_the_list_is_passed_over(tmp_path):
    alive = RelayProcess(tmp_path / "alive").start()
    try:
        log: list[str] = []
        dead = f"ws://127.0.0.1:{RelayProcess(tmp_path / 'never').port}"  # nothing listens there
        c = SwarmClient(f"{dead},{alive.url}", "test", A, "m", None, on_status=log.append, timeout_s=5)
        assert not c.ensure_connected() and c.url == alive.url
        assert any(f"retrying with {alive.url}" in m for m in log)
        c._next_try = 0  # skip the backoff wait
        assert c.ensure_connected() and any(m.startswith(f"connected to relay {alive.url}") for m in log)
        c.close()
    finally:
        alive.stop()


@pytest.mark.parametrize("text", ["ws://a:1", "ws://a:1,wss://b:2", "", "ws://a:1,http://b:2", "ws://a:1,ws://b:99999",
                                  "http://h:99999", "ws://:1", " , "])
def test_the_wire_relay_url_rule_agrees_with_the_engines(text):
    """The app checks relay URLs with wire.addresses; the engine (for now) with its own copy: same verdict, same words."""
    from wire.addresses import relay_urls_problem

    try:
        check_relay_urls(text)
        engine_problem = None
    except SapoError as err:
        engine_problem = str(err)
    assert relay_urls_problem(text) == engine_problem
