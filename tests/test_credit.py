"""Credit only for original work (issue 23 item 4): a copier, speaking raw JSON to a real relay on 127.0.0.1,
re-publishes another node's groups (verbatim, re-spaced, re-cased, reordered, re-signed with its own key, and
on a question of its own stream with the same answer). It earns nothing, and nobody trains a copy.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from websockets.sync.client import connect

from engine.sharing.swarm_client import SwarmClient
from engine.tasks.questions import QuestionStream, build_mix
from wire import protocol as p
from wire.authorship import stream_seed
from wire.identity import Identity

from relay_process import RelayProcess

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

SWARM = "credit"
AUTHOR, COPIER, RECEIVER = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3))
MIX = build_mix("easy", tasks=["basic_arithmetic"])  # a tiny question space: 1-digit sums, differences, products


# --- the copier: every frame as raw JSON ---------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _send(ws, frame: dict) -> dict:
    ws.send(json.dumps({**frame, "v": p.PROTOCOL_VERSION}))
    return json.loads(ws.recv(timeout=10))


def raw_connect(url: str, me: Identity):
    ws = connect(url, max_size=p.MAX_FRAME_BYTES)
    challenge = _send(ws, {"type": "hello", "swarm": SWARM, "public_key": _b64(me.public_key), "model": "copier",
                           "client_version": "copier/1"})
    nonce = base64.b64decode(challenge["nonce"])
    assert _send(ws, {"type": "auth", "signature": _b64(p.sign_challenge(me, SWARM, nonce))})["type"] == "welcome"
    return ws


def raw_publish(ws, me: Identity, groups: list[dict]) -> dict:
    sigs = [_b64(p.sign_group(me, SWARM, msgspec.convert(g, p.Group))) for g in groups]
    return _send(ws, {"type": "publish", "groups": groups, "signatures": sigs})


def trivial_changes(g: dict) -> list[dict]:
    """The same work, changed as a copier would: spacing, case, completion order (rewards kept in step)."""
    spaced = {**g, "completions": ["  " + c.replace(" ", "\n  ") + " " for c in g["completions"]]}
    cased = {**g, "completions": [c.upper() for c in g["completions"]]}
    order = list(reversed(range(len(g["completions"]))))
    reordered = {**g, "completions": [g["completions"][i] for i in order], "rewards": [g["rewards"][i] for i in order]}
    return [g, spaced, cased, reordered]


def reseeded(groups: list[dict], me: Identity) -> list[dict]:
    """The author's completions on questions of the copier's own stream with the same answers, where 3,000 draws of
    that stream hold one (most answers of this small space; a rare one such as 9 * 9's may have none): each seed is
    the copier's, each text another, what it teaches the same."""
    stream = QuestionStream(MIX, me.node_id, 0, [])
    pool = stream.draw(3000)
    out = []
    for g in groups:
        q = next((q for q in pool if q.answer == g["answer"] and q.question != g["question"]), None)
        if q is None:
            continue
        spec = msgspec.to_builtins(q.spec)
        assert spec["seed"] == stream_seed(me.node_id, 0, "main", q.spec.dataset, q.spec.config)
        out.append({**g, "spec": spec, "question": q.question, "origin": {"seed": 0, "lane": "main"},
                    "completions": [c.upper() for c in g["completions"]]})
    return out


def author_groups(me: Identity, n: int) -> list[p.Group]:
    """Honest groups of ``me``'s own stream, two completions with reward spread."""
    qs = QuestionStream(MIX, me.node_id, 0, []).draw(n)
    return [p.Group(spec=q.spec, question=q.question, answer=q.answer,
                    completions=[f"{q.question} I work it out. <answer>{q.answer}</answer>", "<answer>100</answer>"],
                    rewards=[1.0, 0.0], model="smollm2-135m", round=1, origin=p.Origin()) for q in qs]


def board(url: str) -> dict[str, p.LeaderboardRow]:
    c = SwarmClient(url, SWARM, Identity.generate(), "x", None, on_status=lambda m: None)
    stats = c.stats()
    c.close()
    assert stats is not None
    return {row.node_id: row for row in stats.leaderboard}


def test_stream_seeds_are_the_authors_and_unchanged():
    """A node's questions are those it always drew (checkpoints draw on), and their seeds name their author."""
    assert stream_seed("ab" * 16, 7, "extra", "gcd", {}) == 2299802233508767818
    assert stream_seed("ab" * 16, 0, "main", "basic_arithmetic", {"max_digits": 1, "operators": ["+", "-"]}) == \
        1567744577444233515
    for lane in ("main", "extra"):
        for q in QuestionStream(build_mix("easy"), AUTHOR.node_id, 3, [], lane=lane).draw(8):
            g = p.Group(spec=q.spec, question=q.question, answer=q.answer, completions=["a", "b"], rewards=[0.0, 1.0],
                        model="m", origin=p.Origin(seed=3, lane=lane))
            assert p.authored_by(g, AUTHOR.node_id) and not p.authored_by(g, COPIER.node_id)


@pytest.fixture
def relay(tmp_path):
    r = RelayProcess(tmp_path / "relay").start()
    yield r
    r.stop()


def test_a_copier_earns_nothing_and_nobody_trains_a_copy(relay):
    author = SwarmClient(relay.url, SWARM, AUTHOR, "smollm2-135m", None, on_status=lambda m: None)
    receiver = SwarmClient(relay.url, SWARM, RECEIVER, "smollm2-135m", None, on_status=lambda m: None)
    ack = author.publish(author_groups(AUTHOR, 3))
    assert ack is not None and ack.accepted == 3

    # The copier takes the author's groups from the relay and publishes them back under its own key.
    ws = raw_connect(relay.url, COPIER)
    taken = _send(ws, {"type": "sample", "n": 8})["groups"]
    assert len(taken) == 3 and {s["node_id"] for s in taken} == {AUTHOR.node_id}
    copies = [c for s in taken for c in trivial_changes(s["group"])]
    ack = raw_publish(ws, COPIER, copies)
    assert ack["accepted"] == 0 and {r["reason"] for r in ack["rejected"]} == {"not_author"}  # a question not its own
    # ... and on questions of its own stream with the same answer: what they teach is already pooled.
    again = reseeded([s["group"] for s in taken], COPIER)
    assert again, f"no answer of {[s['group']['answer'] for s in taken]} in the copier's 3,000 draws"
    ack = raw_publish(ws, COPIER, again)
    assert ack["accepted"] == 0 and {r["reason"] for r in ack["rejected"]} == {"duplicate_content"}

    # The receiver gets the author's work only, trains and reports it: the author is credited, the copier never.
    got = receiver.sample(8, None)
    assert {s.node_id for s in got} == {AUTHOR.node_id} and all(receiver.screen(s) is None for s in got)
    for s in got:
        receiver.remember(p.group_digest(s.group), s.node_id)
    assert (receiver.report(1, [p.group_digest(s.group) for s in got]) or p.Ack(accepted=0)).accepted == 3
    rows = board(relay.url)
    assert rows[AUTHOR.node_id].groups_adopted == 3 and rows[AUTHOR.node_id].groups_shared == 3
    assert COPIER.node_id not in rows or (rows[COPIER.node_id].groups_shared, rows[COPIER.node_id].groups_adopted) == (0, 0)

    # Were a relay to pass the copies on (a hostile one, or the original gone from the pool), receivers still refuse
    # them: the re-signed ones are not the signer's questions, the re-seeded ones are work trained (or, for the
    # author, published) here already.
    def served(g: dict) -> p.SharedGroup:
        group = msgspec.convert(g, p.Group)
        return p.SharedGroup(group=group, node_id=COPIER.node_id, public_key=COPIER.public_key,
                             signature=p.sign_group(COPIER, SWARM, group), received_at=1.0)

    for node in (author, receiver):
        assert {node.screen(served(g)) for g in copies} == {"not_author"}
        assert {node.screen(served(g)) for g in again} == {"copy"}
    ws.close()
    author.close(), receiver.close()


@pytest.mark.parametrize("backend", ["embedded", "redis"])
def test_a_copy_published_after_the_original_left_the_pool_earns_nothing(tmp_path, backend, request):
    """The relay remembers pooled content past the pool (relay.seen: here a 2 s pool, 3 digests remembered), on
    both backends: the copier waits for the author's groups to age out, then publishes them on questions of its
    own stream (raw JSON). Refused while remembered; the oldest, pushed out by three newer ones, is not (the bound)."""
    extra = ["--redis", request.getfixturevalue("redis_server").url] if backend == "redis" else []
    relay = RelayProcess(tmp_path / "relay", "--pool-max-age-s", "2", "--seen-max", "3", *extra).start()
    try:
        mine = {g.answer: g for g in author_groups(AUTHOR, 40)}  # distinct answers: distinct copier questions
        originals = list(mine.values())[:4]
        author = SwarmClient(relay.url, SWARM, AUTHOR, "smollm2-135m", None, on_status=lambda m: None)
        for g in originals:  # one at a time, so the relay remembers them in this order
            assert (ack := author.publish([g])) is not None and ack.accepted == 1
        author.close()
        ws = raw_connect(relay.url, COPIER)
        taken = _send(ws, {"type": "sample", "n": 8})["groups"]
        assert len(taken) == 4
        by_answer = {s["group"]["answer"]: s["group"] for s in taken}
        copies = reseeded([by_answer[g.answer] for g in originals], COPIER)
        assert len(copies) == 4  # the author's answers here are common ones: each is in the copier's draws
        deadline = time.monotonic() + 30
        while _send(ws, {"type": "sample", "n": 8, "unseen_only": False})["groups"]:
            assert time.monotonic() < deadline, "the author's groups never left the pool"
            time.sleep(0.5)
        ack = raw_publish(ws, COPIER, copies[1:])
        assert ack["accepted"] == 0 and {r["reason"] for r in ack["rejected"]} == {"duplicate_content"}
        ack = raw_publish(ws, COPIER, copies[:1])  # the first original: forgotten (--seen-max 3)
        assert ack["accepted"] == 1, ack
        ws.close()
        rows = board(relay.url)
        assert rows[COPIER.node_id].groups_shared == 1 and rows[AUTHOR.node_id].groups_shared == 4
    finally:
        relay.stop()


SMALL = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--completions", "4", "--max-tokens", "24",
         "--eval-every", "0", "--eval-per-task", "4", "--threads", "1", "--quiet", "--swarm", SWARM,
         "--local", "2", "--external", "2"]


def _engine(tmp: Path, name: str, relay: RelayProcess, cache: Path, rounds: int) -> tuple[subprocess.Popen, Path]:
    data, events = tmp / name, tmp / f"{name}.jsonl"
    data.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", *SMALL, "--relay", relay.url, "--data-dir",
                             str(data), "--events", str(events), "--rounds", str(rounds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "SAPO_CACHE_DIR": str(cache)})
    return proc, events


def _wait(proc: subprocess.Popen) -> None:
    try:
        _, err = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]


def _rounds(path: Path) -> list[dict]:
    return [e for e in (json.loads(x) for x in path.read_text().splitlines() if x.strip()) if e["type"] == "round"]


@pytest.mark.timeout(3000)
def test_two_real_nodes_and_a_copier(tmp_path, relay, model_cache):
    """Node a shares a round; the copier re-publishes a's groups every way above; nodes a and b then run on.
    The copier is refused every time, nobody trains its copies, and only a and b are credited."""
    # A node shares only groups with reward spread, and its questions follow its new identity: a round whose every
    # group is all right or all wrong shares nothing (CI saw one), so node a runs on until a round has shared.
    for done in range(1, 5):
        a, a_events = _engine(tmp_path, "a", relay, model_cache, done)
        _wait(a)
        if _rounds(a_events)[-1]["groups_shared"] > 0:
            break
    assert _rounds(a_events)[-1]["groups_shared"] > 0, "node a shared nothing in 4 rounds"

    ws = raw_connect(relay.url, COPIER)
    taken = _send(ws, {"type": "sample", "n": 8})["groups"]
    assert taken, "node a shared nothing the copier could take"
    copies = [c for s in taken for c in trivial_changes(s["group"])]
    ack = raw_publish(ws, COPIER, copies)
    assert ack["accepted"] == 0 and {r["reason"] for r in ack["rejected"]} == {"not_author"}
    again = reseeded([s["group"] for s in taken], COPIER)
    assert again, f"no answer of {[s['group']['answer'] for s in taken]} in the copier's 3,000 draws"
    ack = raw_publish(ws, COPIER, again)
    assert ack["accepted"] == 0 and {r["reason"] for r in ack["rejected"]} == {"duplicate_content"}
    ws.close()

    a, a_events = _engine(tmp_path, "a", relay, model_cache, done + 1)  # resumes: one round more
    b, b_events = _engine(tmp_path, "b", relay, model_cache, 2)
    _wait(a), _wait(b)
    ids = {}
    for name, path in (("a", a_events), ("b", b_events)):
        rounds = _rounds(path)
        ids[name] = next(e["node_id"] for e in map(json.loads, path.read_text().splitlines()) if e["type"] == "start")
        assert all(e["relay_connected"] for e in rounds)
        # Nothing of the copier's reached a node, so nothing was refused, and no node trained its own work back.
        assert all(COPIER.node_id not in e["rejected_by_sender"] for e in rounds)
        assert all(not {"copy", "not_author", "own"} & set(e["rejected_reasons"]) for e in rounds)
    assert sum(e["external_groups"] for e in _rounds(b_events)) > 0, "b never trained a peer's group"
    rows = board(relay.url)
    assert rows[ids["a"]].groups_adopted > 0  # b trained a's original work and said so
    assert COPIER.node_id not in rows or (rows[COPIER.node_id].groups_shared, rows[COPIER.node_id].groups_adopted) == (0, 0)
