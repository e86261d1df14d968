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

from engine.swarm import SwarmClient

from test_swarm_e2e import _events, finish, relay, start_engine  # noqa: F401 - relay is a fixture

pytestmark = pytest.mark.slow

SMOL, GEMMA = "5" * 32, "6" * 32


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
    gemma, gemma_events = start_engine(tmp_path, "gemma", GEMMA, relay, model_cache, "--model", str(gemma_gguf),
                                       "--local", "2", "--external", "2", "--rounds", "12")
    smol = None
    try:
        _wait(gemma_events, gemma, lambda evs: any(e["type"] == "round" and e.get("groups_shared", 0) > 0
                                                   for e in evs), "Gemma's first shared group")
        smol, smol_events = start_engine(tmp_path, "smol", SMOL, relay, model_cache,
                                         "--local", "2", "--external", "2", "--rounds", "2")
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
    for path, me in ((gemma_events, GEMMA), (smol_events, SMOL)):
        evs = _events(path)
        models[me] = next(e for e in evs if e["type"] == "start")["model"]
        rounds = [e for e in evs if e["type"] == "round"]
        assert sum(e["external_groups"] for e in rounds) > 0, f"{models[me]} never trained on a peer's group"
        assert all(e["rejected_groups"] == 0 for e in rounds), [e["rejected_reasons"] for e in rounds]
        assert all(e["groups"] + e["external_groups"] == 4 for e in rounds)
        # Shared groups have reward spread (the relay refuses others), so a round with any trains on them.
        assert all(e["tokens_trained"] > 0 for e in rounds if e["external_groups"])
    assert models[SMOL] == "smollm2-135m" and models[GEMMA] != models[SMOL]
    # Only two nodes in this swarm: each one's adopted groups were adopted by the other.
    c = SwarmClient(relay.url, "e2e", "c" * 32, "x", None, on_status=lambda m: None)
    try:
        board = {row.node_id: row for row in c.stats().leaderboard}
    finally:
        c.close()
    assert board[SMOL].groups_adopted > 0 and board[GEMMA].groups_adopted > 0
