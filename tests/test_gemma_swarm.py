"""A mixed swarm: a SmolLM2 node and a Gemma 3 node join one swarm by its invite link, follow the manifest its
relay announces, and each trains on the other's groups, with no group refused as foreign to its mix.

Groups travel as plain text; the receiver re-verifies the question and answer, re-scores every
completion itself and re-encodes the text with its own tokenizer and chat template. Gemma's
ids (vocabulary 262,144) would not even index SmolLM2's embedding (49,152), so a SmolLM2 node
that trains on Gemma's groups without an error has re-encoded them. The manifest lets the two draw at
different values of a setting (max_digits 1 and 2) and still admit each other's groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.sharing.swarm_client import SwarmClient
from wire.identity import Identity
from wire.invite import parse_invite

from relay_process import RelayProcess
from test_swarm_e2e import _events, _node_id, finish

pytestmark = pytest.mark.slow

# The swarm: both sides share 2 x 4 completions of <= 24 tokens on one task, each at its own max_digits.
SWARMS = """
[swarms.mixed]
description = "Small sums, two model families"
completions = 4
max_tokens = 24
format_bonus = 0.1
models = ["smollm2-135m", "gemma-3-270m"]

[swarms.mixed.tasks.basic_arithmetic]
config = { min_terms = 2, max_terms = 2, min_digits = 1, operators = ["+", "-", "*"], allow_parentheses = false, allow_negation = false }
ranges = { max_digits = [1, 2] }
"""

# No external-token-share cap, so that a round whose own answers happen to be short still trains on the peer's
# groups (the cap is tested elsewhere). Uniform selection: every shared group has reward spread, but the default
# ("useful") also wants a success rate strictly between 0 and 1, and a 270M model's group can have spread from its
# format reward alone; SmolLM2's two rounds then found nothing eligible (CI, stop 27). Selection has its own tests.
FLAGS = ["--local", "2", "--external", "2", "--external-token-share", "1", "--external-selection", "uniform",
         "--eval-every", "0", "--threads", "1", "--quiet"]


def _start(tmp: Path, name: str, link: str, cache: Path, *flags: str) -> tuple[subprocess.Popen, Path]:
    events = tmp / f"{name}.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--join", link, *FLAGS, "--data-dir",
                             str(tmp / name), "--events", str(events), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "SAPO_CACHE_DIR": str(cache)})
    return proc, events


def trained_external(events: list[dict]) -> bool:
    return any(e["type"] == "round" and e["external_groups"] > 0 for e in events)


def _wait(path: Path, proc, ok, what: str, timeout: float = 1200) -> None:
    deadline = time.monotonic() + timeout
    while not ok(_events(path)):
        assert proc.poll() is None, f"the node exited while waiting for {what}: {proc.stderr.read().decode()[-1500:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.timeout(2400)  # two model families' first loads and rounds: far over 15 min on a loaded 2-core machine
def test_smollm2_and_gemma_join_by_invite_and_train_on_each_others_groups(tmp_path, model_cache, gemma_gguf):
    swarms = tmp_path / "swarms.toml"
    swarms.write_text(SWARMS)
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(swarms)).start()
    out = subprocess.run([sys.executable, "-m", "relay", "invite", "mixed", "--swarms", str(swarms), "--url", relay.url],
                         capture_output=True, text=True, check=True, timeout=120)
    link = out.stdout.splitlines()[0]
    digest = parse_invite(link).manifest_digest
    (tmp_path / "smol.toml").write_text("[task_config.basic_arithmetic]\nmax_digits = 2\n")  # its own value
    # The Gemma node starts first (its first round takes longest), so that the SmolLM2 node finds
    # Gemma's groups waiting. Both run until each has trained on the other's groups, then stop cleanly
    # (SIGTERM ends a node after the round in flight): a fixed count of SmolLM2 rounds could share too few
    # (CI, stop 61: two rounds shared one group, and it was one of Gemma's held-out questions).
    gemma, gemma_events = _start(tmp_path, "gemma", link, model_cache, "--model", str(gemma_gguf), "--rounds", "60")
    smol = None
    try:
        _wait(gemma_events, gemma, lambda evs: any(e["type"] == "round" and e.get("groups_shared", 0) > 0
                                                   for e in evs), "Gemma's first shared group")
        smol, smol_events = _start(tmp_path, "smol", link, model_cache, "--model", "smollm2-135m",
                                   "--config", str(tmp_path / "smol.toml"), "--rounds", "60")
        _wait(smol_events, smol, trained_external, "SmolLM2 to train on Gemma's groups")
        _wait(gemma_events, gemma, trained_external, "Gemma to train on SmolLM2's groups")
        for proc in (smol, gemma):
            proc.send_signal(signal.SIGTERM)
        finish(smol)
        finish(gemma)
        # Only two nodes in this swarm: each one's adopted groups were reported by the other.
        c = SwarmClient(relay.url, "mixed", Identity.generate(), "x", None, on_status=lambda m: None)
        try:
            board = {row.node_id: row for row in c.stats().leaderboard}
        finally:
            c.close()
    finally:
        for proc in (gemma, smol):
            if proc is not None and proc.poll() is None:
                proc.kill()
        relay.stop()
    models = {}
    for path, digits in ((gemma_events, 1), (smol_events, 2)):
        evs = _events(path)
        start = next(e for e in evs if e["type"] == "start")
        models[_node_id(path)] = who = start["model"]
        # Both follow the swarm's manifest (the one the invite pins), each at its own value in the range.
        (manifest,) = [e for e in evs if e["type"] == "manifest"]
        assert manifest["state"] == "adopted" and manifest["digest"] == digest, manifest
        assert start["manifest"] == digest and start["mix"] == manifest["mix"] == ["basic_arithmetic max_digits 1..2"]
        assert start["settings"]["completions"] == 4 and start["settings"]["max_tokens"] == 24
        assert start["settings"]["task_config"]["basic_arithmetic"]["max_digits"] == digits
        rounds = [e for e in evs if e["type"] == "round"]
        assert sum(e["external_groups"] for e in rounds) > 0, f"{who} never trained on a peer's group"
        assert sum(e["rejected_reasons"].get("foreign_task", 0) for e in rounds) == 0
        # Nothing refused, but a group met again after training on it (a small pool, many rounds), or a peer's
        # question that is one of this node's held-out ones (each runs its own value in the range, so its own
        # held-out set; the one-digit sums are few: CI, stop 29).
        assert {r for e in rounds for r in e["rejected_reasons"]} <= {"replay", "heldout", "heldout_leak"}, \
            [e["rejected_reasons"] for e in rounds]
        # I + J = 4; dead own slots (no spread) refilled by more swarm groups (fill_dead_slots, the default)
        assert all(e["groups"] + e["external_groups"] - e["dead_slots_filled"] == 4 for e in rounds)
        # Shared groups have reward spread (the relay refuses others), so a round with any trains on them.
        assert all(e["tokens_trained"] > 0 for e in rounds if e["external_groups"])
    assert sorted(models.values()) == [gemma_gguf.stem.lower(), "smollm2-135m"]
    assert set(models) <= set(board) and all(board[i].groups_adopted > 0 for i in models)
