"""The held-out leak rule (engine/tasks/leakage.py) on the easy preset's real held-out questions: every pair stated
with the question's own text or its expression is caught, and what only resembles one is not."""

from __future__ import annotations

from engine.tasks.leakage import LeakCheck
from engine.tasks.questions import build_mix, heldout_set

HELD = heldout_set(build_mix("easy"), 16)
CHECK = LeakCheck(HELD)


def test_every_held_out_pair_stated_with_its_own_words_is_caught():
    for h in HELD:
        for said in (f"I work it out. Also: {h.question} {h.answer}. <answer>1</answer>",  # the benchmark's wording
                     f"By the way, {h.question}\n  {h.answer}"):
            assert CHECK.leaks(said), said


def test_a_negative_answer_after_a_full_stop_is_caught_and_a_subtraction_is_not_one():
    h = next(h for h in HELD if h.answer.startswith("-"))  # e.g. "Calculate 6 - 9." "-3"
    expression = h.entry["metadata"]["expression"]
    assert CHECK.leaks(f"Also: {h.question} {h.answer}.")
    assert CHECK.leaks(f"{expression} = {h.answer}")
    assert not CHECK.leaks(f"{expression} and 1{h.answer} = {1 + int(h.answer)}")  # "1-3": no "-3" of its own
    assert not CHECK.leaks(f"{expression} is 0.{h.answer[1:]}")
