"""A mixed swarm: a SmolLM2 node and a Gemma 3 node on one real relay, each training on the other's groups.

Groups travel as plain text; the receiver re-verifies the question and answer, re-scores every
completion itself and re-encodes the text with its own tokenizer and chat template. Gemma's
ids (vocabulary 262,144) would not even index SmolLM2's embedding (49,152), so a SmolLM2 node
that trains on Gemma's groups without an error has re-encoded them.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from engine.sharing.swarm_client import SwarmClient
from wire.identity import Identity

from test_swarm_e2e import _events, _node_id, finish, relay, start_engine  # noqa: F401 - relay is a fixture

pytestmark = pytest.mark.slow

# Both sides share 2 x 4 completions of <= 24 tokens; no external-token-share cap, so that a round
# whose own answers happen to be short still trains on the peer's groups (the cap is tested elsewhere).
# Uniform selection: every shared group has reward spread, but the default ("useful") also wants a
# success rate strictly between 0 and 1, and a 270M model's group can have spread from its format
# reward alone; SmolLM2's two rounds then found nothing eligible (CI, stop 27). Selection has its own tests.
FLAGS = ["--local", "2", "--external", "2", "--external-token-share", "1", "--external-selection", "uniform"]


def _wait(path: Path, proc, ok, what: str, timeout: float = 1200) -> None:
    deadline = time.monotonic() + timeout
    while not ok(_events(path)):
        assert proc.poll() is None, f"the node exited while waiting for {what}: {proc.stderr.read().decode()[-1500:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_smollm2_and_gemma_train_on_each_others_groups(tmp_path, relay, model_cache, gemma_gguf):
    # The Gemma node starts first (its first round takes longest), so that the SmolLM2 node finds
    # Gemma's groups waiting; it keeps running until it has trained on SmolLM2's, then stops cleanly
    # (SIGTERM ends a node after the round in flight).
    gemma, gemma_events = start_engine(tmp_path, "gemma", None, relay, model_cache, "--model", str(gemma_gguf),
                                       *FLAGS, "--rounds", "12")
    smol = None
    try:
        _wait(gemma_events, gemma, lambda evs: any(e["type"] == "round" and e.get("groups_shared", 0) > 0
                                                   for e in evs), "Gemma's first shared group")
        smol, smol_events = start_engine(tmp_path, "smol", None, relay, model_cache, *FLAGS, "--rounds", "2")
        finish(smol)
        _wait(gemma_events, gemma, lambda evs: any(e["type"] == "round" and e["external_groups"] > 0 for e in evs),
              "Gemma to train on SmolLM2's groups")
        gemma.send_signal(signal.SIGTERM)
        finish(gemma)
    finally:
        for proc in (gemma, smol):
            if proc is not None and proc.poll() is None:
                proc.kill()
    models = {}
    for path in (gemma_events, smol_events):
        evs = _events(path)
        models[_node_id(path)] = next(e for e in evs if e["type"] == "start")["model"]
        rounds = [e for e in evs if e["type"] == "round"]
        who = models[_node_id(path)]
        assert sum(e["external_groups"] for e in rounds) > 0, f"{who} never trained on a peer's group"
        # Nothing refused, but a group met again after training on it (a small pool, many rounds).
        assert {r for e in rounds for r in e["rejected_reasons"]} <= {"replay"}, [e["rejected_reasons"] for e in rounds]
        # I + J = 4; dead own slots (no spread) refilled by more swarm groups (fill_dead_slots, the default)
        assert all(e["groups"] + e["external_groups"] - e["dead_slots_filled"] == 4 for e in rounds)
        # Shared groups have reward spread (the relay refuses others), so a round with any trains on them.
        assert all(e["tokens_trained"] > 0 for e in rounds if e["external_groups"])
    assert sorted(models.values()) == [gemma_gguf.stem.lower(), "smollm2-135m"]
    # Only two nodes in this swarm: each one's adopted groups were reported by the other.
    c = SwarmClient(relay.url, "e2e", Identity.generate(), "x", None, on_status=lambda m: None)
    try:
        board = {row.node_id: row for row in c.stats().leaderboard}
    finally:
        c.close()
    assert set(models) <= set(board) and all(board[i].groups_adopted > 0 for i in models)
