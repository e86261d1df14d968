"""A hostile peer, speaking raw JSON to a real relay, against a real node on the bundled model.

The peer publishes, for every dataset whose reasoning-gym scorer uses ``eval`` or sympy's
``parse_expr``, a real question with a right answer, an answer that writes a marker file and
``9**9**9**9``; a spec with a huge config; held-out questions (refused by the relay: not of the peer's
own stream); groups of very long and very many completions. The node must run nothing, stay alive, count every refusal by reason and
sender, train only within its own bounds, and keep every checkpoint.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from websockets.sync.client import connect

from engine.tasks.questions import QuestionStream, build_mix, heldout_set
from wire import protocol as p
from wire.authorship import stream_seed
from wire.identity import Identity

from relay_process import RelayProcess

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

EVAL_DATASETS = ["binary_matrix", "spiral_matrix", "string_insertion", "n_queens", "countdown", "puzzle24",
                 "polynomial_multiplication", "simple_integration", "intermediate_integration"]
EVIL = Identity.from_seed(b"e" * 32)
ROUNDS, LOCAL, EXTERNAL, L, MAX_TOKENS = 4, 1, 8, 2, 16


# --- the hand-written client: every frame as raw JSON, through these two functions ---------------
# It holds a key of its own (key pairs are free): signing is all it needs the protocol module for.

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _send(ws, frame: dict) -> dict:
    ws.send(json.dumps({**frame, "v": p.PROTOCOL_VERSION}))
    return json.loads(ws.recv(timeout=10))


def hostile_connect(url: str, swarm: str, me: Identity):
    """The handshake as raw JSON: hello with our key, sign the relay's nonce."""
    ws = connect(url, max_size=p.MAX_FRAME_BYTES)
    challenge = _send(ws, {"type": "hello", "swarm": swarm, "public_key": _b64(me.public_key), "model": "evil",
                           "client_version": "evil/1"})
    assert challenge["type"] == "challenge", challenge
    nonce = base64.b64decode(challenge["nonce"])
    welcome = _send(ws, {"type": "auth", "signature": _b64(p.sign_challenge(me, swarm, nonce))})
    assert welcome["type"] == "welcome", welcome
    return ws


def hostile_publish(ws, me: Identity, swarm: str, groups: list[dict]) -> dict:
    sigs = [_b64(p.sign_group(me, swarm, msgspec.convert(g, p.Group))) for g in groups]
    return _send(ws, {"type": "publish", "groups": groups, "signatures": sigs})


def _group(q, completions: list[str], rewards: list[float]) -> dict:
    spec = {"dataset": q.spec.dataset, "config": q.spec.config, "seed": q.spec.seed, "index": q.spec.index}
    return {"spec": spec, "question": q.question, "answer": q.answer, "completions": completions,
            "rewards": rewards, "model": "evil", "round": 1}


def hostile_groups(marker: Path) -> dict[str, list[dict]]:
    mix = build_mix("easy", tasks=EVAL_DATASETS)
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('pwned')"
    out: dict[str, list[dict]] = {}
    stream = QuestionStream(mix, EVIL.node_id, 0, [])
    drawn = {}
    while len(drawn) < len(EVAL_DATASETS):  # one real question per dataset
        q = stream.draw(1)[0]
        drawn.setdefault(q.spec.dataset, q)
    out["code"] = [_group(q, [f"<answer>{q.answer or 'x'}</answer>", f"<answer>{code}</answer>",
                              "<answer>9**9**9**9</answer>"], [1.0, 0.0, 0.0]) for q in drawn.values()]
    q = drawn["binary_matrix"]
    huge = _group(q, [f"<answer>{q.answer}</answer>", "<answer>0</answer>"], [1.0, 0.0])
    huge["spec"]["config"] = {"min_n": 10**6, "max_n": 10**6}
    huge["spec"]["seed"] = stream_seed(EVIL.node_id, 0, "main", "binary_matrix", huge["spec"]["config"])  # its own
    out["huge_config"] = [huge]
    held = heldout_set(mix, 4)
    out["heldout"] = [_group(h, [f"<answer>{h.answer or 'x'}</answer>", "<answer>no</answer>"], [1.0, 0.0])
                      for h in held[::9][:2]]
    long = [q for q in stream.draw(40) if q.spec.dataset == "string_insertion" and q.answer][:2]
    padding = "Let me think about this very carefully. " * 360  # ~14,000 characters
    out["long"] = [_group(q, [padding + f"<answer>{q.answer}</answer>", padding + "<answer>x</answer>"] * 4,
                          [1.0, 0.0] * 4) for q in long]
    many = [q for q in stream.draw(40) if q.spec.dataset == "string_insertion" and q.answer][:1]
    out["many"] = [_group(q, [f"<answer>{q.answer}</answer>", "<answer>x</answer>"] * 32, [1.0, 0.0] * 32)
                   for q in many]
    return out


def _events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


@pytest.fixture
def relay(tmp_path):
    r = RelayProcess(tmp_path / "relay").start()
    yield r
    r.stop()


@pytest.mark.timeout(3000)  # one real node run of 4 rounds: ~3 min idle, far more on a loaded 2-core machine
def test_a_hostile_peer_cannot_run_code_hang_flood_or_reach_the_heldout_set(tmp_path, relay, model_cache):
    marker = tmp_path / "marker"
    groups = hostile_groups(marker)
    ws = hostile_connect(relay.url, "hostile", EVIL)
    published = [g for kind in groups.values() for g in kind]
    ack = hostile_publish(ws, EVIL, "hostile", published)
    # Held-out questions are not of the peer's own stream: the relay refuses them (wire.authorship); a peer's own
    # question that happens to be held out is refused by the node (tests/test_verify.py).
    held = [i for i, g in enumerate(published) if g in groups["heldout"]]
    assert ack["type"] == "ack" and ack["accepted"] == len(published) - len(held), ack
    assert [(r["index"], r["reason"]) for r in ack["rejected"]] == [(i, "not_author") for i in held]
    published = [g for g in published if g not in groups["heldout"]]

    data = tmp_path / "victim"
    data.mkdir()
    events = tmp_path / "victim.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--tasks", ",".join(EVAL_DATASETS),
         "--local", str(LOCAL), "--external", str(EXTERNAL), "--completions", str(L), "--max-tokens", str(MAX_TOKENS),
         "--eval-every", "0", "--eval-per-task", "4", "--fewshot", "0", "--threads", "1", "--quiet", "--swarm", "hostile",
         "--relay", relay.url, "--rounds", str(ROUNDS), "--data-dir", str(data), "--events", str(events)],
        capture_output=True, text=True, timeout=2700, env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)})
    ws.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists(), "a peer's answer ran as code"

    rounds = [e for e in _events(events) if e["type"] == "round"]
    assert [e["round"] for e in rounds] == list(range(1, ROUNDS + 1))
    reasons: dict[str, int] = {}
    for e in rounds:
        for k, v in e["rejected_reasons"].items():
            reasons[k] = reasons.get(k, 0) + v
    seen = sum(e["external_groups"] + e["rejected_groups"] for e in rounds)
    assert 0 < seen <= len(published)  # the relay hands out what fits its frames; each seen one is accounted for
    # Every refusal is counted, by reason and by sender, and none is for a hang or a dead worker.
    # (question_mismatch: reasoning-gym's polynomial_multiplication words its questions by Python's string
    # hashing; nodes run with one hash seed (engine/tasks/hashseed.py), but this test's sender is the pytest process.)
    assert set(reasons) <= {"foreign_task", "reward_mismatch", "token_share", "question_mismatch",
                            "sender_budget"}, reasons
    assert reasons.get("question_mismatch", 0) <= 1
    assert rounds[-1]["rejected_by_sender"].get(EVIL.node_id, 0) == sum(v for k, v in reasons.items() if k != "token_share")
    if seen == len(published) and not reasons.get("sender_budget"):  # (over its budget: refused before the sandbox)
        assert reasons.get("foreign_task") == 1
    # Nothing longer than max_tokens was trained, and never more than L completions of a group.
    for e in rounds:
        assert e["tokens_trained"] <= (LOCAL + EXTERNAL) * L * MAX_TOKENS
    # Nothing lost: one checkpoint per round, the last one current and readable.
    ckpts = data / "checkpoints" / "smollm2-135m"
    assert (ckpts / "LATEST").read_text().strip() == f"round-{ROUNDS:06d}"
    from engine.learning.checkpoint import CheckpointStore

    state = CheckpointStore(ckpts).load_state(ckpts / f"round-{ROUNDS:06d}")
    assert state.round == ROUNDS
