"""A hostile relay serving forged groups: the receiver checks authorship itself, before anything else.

The relay here is a tiny websockets server written for the test: it admits anyone and hands out
whatever groups it likes. A real ``SwarmClient`` and a real node (bundled model, small settings)
must reject every group whose signature, key or id does not hold up, count it per claimed sender
as ``bad_signature``, train only on the genuine one, and report (signed) only that one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.sharing.swarm_client import SwarmClient
from engine.tasks.questions import QuestionStream, build_mix
from wire import protocol as p
from wire.identity import Identity, node_id_for

from fake_relay import FakeRelay

SWARM = "hostile"
FRAMED = Identity.from_seed(b"\x07" * 32)  # an honest node whose name the relay abuses
EVIL = Identity.from_seed(b"\x66" * 32)


def honest_group(index: int) -> p.Group:
    q = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), FRAMED.node_id, 0, []).draw(index + 1)[index]
    return p.Group(spec=q.spec, question=q.question, answer=q.answer,
                   completions=[f"<answer>{q.answer}</answer>", "<answer>-999</answer>"], rewards=[1.0, 0.0],
                   model="smollm2-135m", round=1)


def shared(group: p.Group, signature: bytes, node_id: str = FRAMED.node_id,
           public_key: bytes = FRAMED.public_key) -> p.SharedGroup:
    return p.SharedGroup(group=group, node_id=node_id, public_key=public_key, signature=signature, received_at=1.0)


def forged_and_genuine() -> tuple[list[p.SharedGroup], p.Group]:
    g = [honest_group(i) for i in range(5)]
    altered = msgspec.structs.replace(g[3], completions=["<answer>-999</answer>", f"<answer>{g[3].answer}</answer>"],
                                      rewards=[0.0, 1.0])
    served = [
        shared(g[0], secrets.token_bytes(64)),  # garbage signature under the framed node's key
        shared(g[1], p.sign_group(EVIL, SWARM, g[1]), public_key=EVIL.public_key),  # evil key, framed id
        shared(g[2], p.sign_group(FRAMED, "another-swarm", g[2])),  # genuine, but for another swarm
        shared(altered, p.sign_group(FRAMED, SWARM, g[3])),  # genuine signature, content altered after
        shared(g[4], p.sign_group(FRAMED, SWARM, g[4])),  # genuine
    ]
    return served, g[4]


class HostileRelay(FakeRelay):
    """Admits anyone, serves ``served`` to the first sample, records hellos and reports."""

    def __init__(self, served: list[p.SharedGroup]) -> None:
        super().__init__(server_version="evil/1")
        self.served = served
        self.reports: list[tuple[p.Report, bool]] = []  # and whether its signature checked out
        self._sent = False

    def answer(self, hello: p.Hello, me: str, msg: Any) -> p.Message:
        if isinstance(msg, p.Sample):
            first, self._sent = not self._sent, True
            return p.Groups(groups=self.served if first else [])
        if isinstance(msg, p.Report):
            ok = p.report_signature_ok(hello.public_key, msg.signature, hello.swarm, msg.round, msg.trained)
            self.reports.append((msg, ok))
        return super().answer(hello, me, msg)


@pytest.fixture
def hostile() -> Iterator[tuple[HostileRelay, p.Group]]:
    served, genuine = forged_and_genuine()
    with HostileRelay(served) as relay:
        yield relay, genuine


def test_swarm_client_screens_forged_groups(hostile: tuple[HostileRelay, p.Group]) -> None:
    relay, genuine = hostile
    client = SwarmClient(relay.url, SWARM, Identity.generate(), "m", None, on_status=lambda m: None, timeout_s=5)
    got = client.sample(5, None)
    assert [client.screen(s) for s in got] == ["bad_signature"] * 4 + [None]
    assert got[4].group == genuine
    client.close()


def test_a_hostile_relay_cannot_send_more_than_asked(hostile: tuple[HostileRelay, p.Group]) -> None:
    relay, _ = hostile
    client = SwarmClient(relay.url, SWARM, Identity.generate(), "m", None, on_status=lambda m: None, timeout_s=5)
    assert len(client.sample(2, None)) == 2
    client.close()


SMALL = ["--model", "smollm2-135m", "--preset", "easy", "--tasks", "basic_arithmetic", "--completions", "4",
         "--max-tokens", "24", "--eval-every", "0", "--threads", "1", "--quiet", "--swarm", SWARM]


@pytest.mark.slow
def test_a_real_node_rejects_forged_groups_and_reports_only_what_it_trained(
    tmp_path: Path, hostile: tuple[HostileRelay, p.Group], model_cache: Path
) -> None:
    relay, genuine = hostile
    events = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "run", *SMALL, "--relay", relay.url, "--data-dir", str(tmp_path / "data"),
         "--events", str(events), "--local", "1", "--external", "5", "--rounds", "1"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in events.read_text().splitlines() if x.strip()]
    (rnd,) = [e for e in lines if e["type"] == "round"]
    assert rnd["rejected_reasons"] == {"bad_signature": 4}
    assert rnd["rejected_by_sender"] == {FRAMED.node_id: 4}  # the claimed sender: the relay framed it
    assert rnd["external_groups"] == 1 and rnd["groups"] == 5  # the budget I + J filled locally
    # The node said who it is with its own key, and reported (signed) only the group it trained.
    (hello,) = relay.hellos
    start = next(e for e in lines if e["type"] == "start")
    assert node_id_for(hello.public_key) == start["node_id"]
    assert [(r.round, r.trained, ok) for r, ok in relay.reports] == [(1, [p.group_digest(genuine)], True)]
