"""The engine's relay client against a real relay on 127.0.0.1."""

from __future__ import annotations

import pytest

from engine.errors import SapoError
from engine.swarm import SwarmClient, check_relay_url
from engine.tasks import QuestionStream, build_mix
from wire.protocol import Group

from relay_process import RelayProcess


def _groups(node: str, n: int) -> list[Group]:
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), node, 0, []).draw(n)
    return [Group(spec=q.spec, question=q.question, answer=q.answer,
                  completions=[f"<answer>{q.answer}</answer>", "<answer>0</answer>"], rewards=[1.0, 0.0],
                  model="m", round=1) for q in qs]


@pytest.fixture
def relay(tmp_path):
    r = RelayProcess(tmp_path / "relay", "--token", "sesame").start()
    yield r
    r.stop()


def client(relay: RelayProcess, node: str, token: str | None = "sesame", log: list[str] | None = None) -> SwarmClient:
    return SwarmClient(relay.url, "test", node, "smollm2-135m", token, on_status=(log if log is not None else []).append,
                       timeout_s=5)


def test_publish_then_another_node_samples(relay):
    a, b = client(relay, "a" * 32), client(relay, "b" * 32)
    ack = a.publish(_groups("a" * 32, 3))
    assert ack is not None and ack.accepted == 3
    got = b.sample(5, ["basic_arithmetic"])
    assert len(got) == 3 and {g.node_id for g in got} == {"a" * 32}
    assert a.sample(5, None) == []  # never one's own
    stats = a.stats()
    assert stats is not None and stats.you.groups_shared == 3 and stats.you.groups_adopted == 3
    a.close(), b.close()


def test_wrong_token_is_a_clear_error_on_first_contact(relay):
    with pytest.raises(SapoError, match="refused"):
        client(relay, "c" * 32, token="wrong").sample(1, None)


def test_unreachable_relay_degrades_and_reconnects(relay):
    log: list[str] = []
    c = client(relay, "d" * 32, log=log)
    assert c.ensure_connected()
    relay.kill()
    assert c.publish(_groups("d" * 32, 1)) is None and not c.connected
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
