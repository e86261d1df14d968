"""`sapo-engine baseline` on the real bundled model (tiny N), and on bad input."""

from __future__ import annotations

import json

import pytest

from engine.run.evaluate import mean_and_se, task_spread
from engine.tasks.groups import ScoredGroup
from engine.tasks.rewards import Score
from engine.tasks.questions import build_mix, heldout_set
from tests.test_cli import assert_one_line_error, sapo

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers


def _group(q, correct: list[bool], formed: bool = True) -> ScoredGroup:
    scores = [Score(1.1 if c else 0.1, float(c), c, formed) for c in correct]
    return ScoredGroup(q, [], [], scores)


def test_task_spread_by_hand():
    qs = heldout_set(build_mix("easy", tasks=["chain_sum"]), 2)
    # greedy first, then the samples: question 1 greedy right, 1 of 2 samples right; question 2 all wrong
    spread = task_spread([_group(qs[0], [True, True, False]), _group(qs[1], [False, False, False], formed=False)])
    s = spread["chain_sum"]
    assert s["questions"] == 2 and s["samples"] == 2
    assert s["greedy_accuracy"] == 0.5 and s["greedy_se"] == 0.5  # stdev of [1, 0] = 0.707, / sqrt 2
    assert s["sampled_accuracy"] == 0.25 and s["sampled_se"] == 0.25  # per-question means 0.5 and 0
    assert s["format_rate"] == 0.5 and s["groups_with_spread"] == 0.5 and s["sampled_task_score"] == 0.25
    assert mean_and_se([0.3]) == (0.3, 0.0)


def test_baseline_on_the_bundled_model(tmp_path):
    proc = sapo("baseline", "--model", "smollm2-135m", "--tasks", "basic_arithmetic,chain_sum", "--per-task", "3",
                "--samples", "2", "--weights", "q8_0", "--prompts", "old,new", "--max-tokens", "32", "--json",
                timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["model"] == "smollm2-135m" and report["preset"] == "easy" and report["max_tokens"] == 32
    assert [(r["weights"], r["prompts"]) for r in report["runs"]] == [("q8_0", "old"), ("q8_0", "new")]
    for run in report["runs"]:
        assert run["format"] == "q8_0" and run["tokens"] > 0 and run["tokens_per_s"] > 0
        assert set(run["per_task"]) == {"basic_arithmetic", "chain_sum"}
        for s in run["per_task"].values():
            assert s["questions"] == 3 and s["samples"] == 2
            for k in ("greedy_accuracy", "sampled_accuracy", "format_rate", "groups_with_spread"):
                assert 0 <= s[k] <= 1
    # The worked examples make the model write a working: the same questions, longer answers.
    assert report["runs"][1]["tokens"] > report["runs"][0]["tokens"]
    text = sapo("baseline", "--model", "smollm2-135m", "--tasks", "chain_sum", "--per-task", "1", "--samples", "1",
                "--max-tokens", "8", timeout=900)
    assert text.returncode == 0, text.stderr
    assert "chain_sum" in text.stdout and "greedy" in text.stdout and "new tokens/s" in text.stdout


@pytest.mark.parametrize("args,needle", [
    (["--per-task", "0"], "--per-task"),
    (["--per-task", "lots"], "whole number"),
    (["--samples", "99"], "--samples"),
    (["--weights", "q3"], "weights"),
    (["--weights", ""], "weights"),
    (["--prompts", "fancy"], "prompts"),
    (["--tasks", "no_such_task"], "no_such_task"),
    (["--preset", "hard"], "preset"),
    (["--config", "/nonexistent.toml"], "nonexistent.toml"),
])
def test_baseline_bad_input(args, needle):
    proc = sapo("baseline", "--model", "smollm2-135m", *args)
    assert proc.returncode == 2
    assert_one_line_error(proc, needle)
