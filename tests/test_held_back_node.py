"""A real node (bundled SmolLM2-135M) follows a relay's manifest with a task its model cannot answer: it holds the
task back within three rounds, says so once, records it in its round events, draws it less, and goes on after a restart.

arc_1d at 10 cells: every answer is 25 tokens with its tags (SmolLM2's tokenizer, 400 questions), so at the
manifest's max_tokens 16 no answer can be right (measured with `sapo-engine baseline --max-tokens 16`: 0 of 128
sampled, 0 of 32 greedy, none well-formed). One-digit sums at 16 tokens: 0.34 sampled, 0.56 greedy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.sharing.keyfile import install
from engine.tasks.held_back import FACTOR, Tally, held_line, shares, still_line
from engine.tasks.questions import QuestionStream
from engine.tasks.swarm_mix import swarm_mix
from relay.swarms import load_swarms
from wire.identity import Identity

from relay_process import RelayProcess

pytestmark = pytest.mark.slow

SWARMS = """
[swarms.mixed]
description = "One-digit sums, and a task the bundled model cannot answer in 16 tokens"
completions = 4
max_tokens = 16
format_bonus = 0.1

[swarms.mixed.tasks.basic_arithmetic]
config = { min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1, operators = ["+", "-"], allow_parentheses = false, allow_negation = false }

[swarms.mixed.tasks.arc_1d]
weight = 3.0
config = { min_size = 10, max_size = 10 }
"""
# Its draws (seed 0, I = J = 2, no peer online: 4 own groups a round) hold 3, 2 and 3 arc_1d questions in rounds 1-3:
# 8 questions, 32 answers, the rule's minimum (engine/tasks/held_back.py), so it is held back after round 3 and round
# 4 draws at the lowered weight (asserted below against the stream itself: 2 arc_1d questions without, 0 with).
IDENTITY = Identity.from_seed(bytes([10]) * 32)
FLAGS = ["--model", "smollm2-135m", "--swarm", "mixed", "--local", "2", "--external", "2", "--eval-every", "0",
         "--threads", "1", "--quiet"]


def _events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _run(tmp: Path, relay: RelayProcess, cache: Path, rounds: int, name: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--relay", relay.url, *FLAGS, "--rounds", str(rounds),
                           "--data-dir", str(tmp / "node"), "--events", str(tmp / f"{name}.jsonl")],
                          capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _events(tmp / f"{name}.jsonl")


def _expected_draws(swarms: Path, rounds: int) -> list[list[str]]:
    """The tasks of each round's own questions: rounds 1-3 at the manifest's weights, later rounds with arc_1d held."""
    declared = load_swarms(swarms)[0]["mixed"]
    mix = swarm_mix(declared.manifest, declared.digest, {}, {}).mix
    main = QuestionStream(mix, IDENTITY.node_id, 0, [])
    extra = QuestionStream(mix, IDENTITY.node_id, 0, [], lane="extra")
    out = []
    for r in range(rounds):
        if r == 3:
            main.factors = extra.factors = {"arc_1d": FACTOR}
        out.append([q.spec.dataset for q in main.draw(2) + extra.draw(2)])
    return out


def _own(round_event: dict) -> list[dict]:
    return [g for g in round_event["group_summaries"] if g["source"] == "own"]


def test_a_task_the_model_never_answers_is_held_back_said_once_recorded_and_kept_after_a_restart(tmp_path,
                                                                                                    model_cache):
    swarms = tmp_path / "swarms.toml"
    swarms.write_text(SWARMS)
    (tmp_path / "node").mkdir()
    install(tmp_path / "node", IDENTITY)  # a fixed id: its question stream is known in advance
    expected = _expected_draws(swarms, 4)
    assert [r.count("arc_1d") for r in expected] == [3, 2, 3, 0]  # MIN_GROUPS after round 3
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(swarms)).start()
    try:
        first = _run(tmp_path, relay, model_cache, 3, "first")
        second = _run(tmp_path, relay, model_cache, 4, "second")  # restarted: resumes at round 4
    finally:
        relay.stop()

    (adopted,) = [e for e in first if e["type"] == "manifest"]
    assert adopted["state"] == "adopted" and adopted["mix"] == ["basic_arithmetic", "arc_1d x3"]
    rounds = [e for e in first if e["type"] == "round"]
    assert [e["round"] for e in rounds] == [1, 2, 3]
    assert [[g["task"] for g in _own(e)] for e in rounds] == expected[:3]
    arc = [g for e in rounds for g in _own(e) if g["task"] == "arc_1d"]
    assert sum(g["correct"] for g in arc) == 0
    held = [e["message"] for e in first if e["type"] == "status" and "arc_1d answers right" in e["message"]]
    before = shares({"basic_arithmetic": 1.0, "arc_1d": 3.0}, {})["arc_1d"]
    after = shares({"basic_arithmetic": 1.0, "arc_1d": 3.0}, {"arc_1d": FACTOR})["arc_1d"]
    tally = Tally(len(arc), sum(g["completions"] for g in arc), 0)
    assert held == [held_line("mixed", "arc_1d", tally, before, after)]  # once, in one line
    assert "0 of 32 arc_1d answers right" in held[0] and "43% of its own questions instead of 75%" in held[0]
    kinds = [e["type"] for e in first]
    status_at = next(i for i, e in enumerate(first) if e["type"] == "status" and e["message"] == held[0])
    assert kinds[:status_at].count("round") == 2  # said in round 3, before its round event
    assert [e["tasks_held_back"] for e in rounds] == [{}, {}, {"arc_1d": FACTOR}]
    assert not any("basic_arithmetic answers right" in e.get("message", "") for e in first)

    # Restarted: the counts come back from the checkpoint; the node says what it still holds back, once, and draws
    # round 4 at the lowered weight (the tasks an uninterrupted stream draws).
    rounds = [e for e in second if e["type"] == "round"]
    assert [e["round"] for e in rounds] == [4]
    still = [e["message"] for e in second if e["type"] == "status" and "still drawing" in e["message"]]
    assert still == [still_line("mixed", {"arc_1d": Tally(len(arc), sum(g["completions"] for g in arc), 0)})]
    assert not any("arc_1d answers right" in e.get("message", "") for e in second)  # not said again
    assert [g["task"] for g in _own(rounds[0])] == expected[3]
    # (basic_arithmetic reaches 8 questions in round 4: the bundled model gets its sums at 16 tokens right ~1 in 3,
    # but on a run whose sampling differs it could score 0 and be held back too; measured: 2 of its 32 right)
    assert rounds[0]["tasks_held_back"]["arc_1d"] == FACTOR
