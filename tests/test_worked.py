"""Worked few-shot examples: every task of both presets gets a correct working, scored by reasoning-gym itself."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from engine.tasks.rewards import ANSWER_OPEN, extract_answer
from engine.tasks.questions import (PAPER_TASKS, Prompts, _config_key, _spec, build_mix, derive_seed, fewshot_messages,
                          heldout_set, question_key, regenerate, scorer_for, style_for)
from engine.tasks.worked_examples import arithmetic_steps, worked_answer
from engine.errors import SapoError


def test_arithmetic_steps_follow_precedence_and_signs():
    steps, value = arithmetic_steps("-9 * -4 * -( -9 + 6 ) + 8")
    assert steps == ["-9 * -4 = 36", "-9 + 6 = -3", "36 * 3 = 108", "108 + 8 = 116"] and value == 116
    assert arithmetic_steps("7 - 2 - 3") == (["7 - 2 = 5", "5 - 3 = 2"], 2)  # left to right
    assert arithmetic_steps("6 / 4") == (["6 / 4 = 3/2"], Fraction(3, 2))
    with localcontext() as ctx:
        ctx.prec = 12
        assert arithmetic_steps("(9.661/4.907)", Decimal)[1] == Decimal("1.96882005299")


@pytest.mark.parametrize("text", ["__import__('os').system('x')", "2 ** 99999", "x + 1", "1 / 0", "[1] * 3", "1 +"])
def test_anything_but_plain_arithmetic_has_no_working(text):
    assert arithmetic_steps(text) is None


def _tasks() -> list[tuple[str, object]]:
    out = [("easy", e) for e in build_mix("easy")]
    return out + [("paper", e) for e in build_mix("paper")]


@pytest.mark.parametrize("preset,entry", _tasks(), ids=lambda v: getattr(v, "dataset", v))
def test_every_task_of_both_presets_has_worked_examples_that_score_1(preset, entry):
    msgs = fewshot_messages(entry, 2, worked=True)
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 2
    shown = 0
    for i in range(40):  # the example stream, and beyond it: each working's answer is the dataset's right answer
        q = regenerate(_spec(entry, derive_seed("fewshot", entry.dataset, _config_key(entry.config)), i))
        reply = worked_answer(entry.dataset, q.entry)
        if reply is None:
            continue
        shown += 1
        working, _, _ = reply.partition(ANSWER_OPEN)
        assert working.strip(), reply  # a working comes before the tag
        assert scorer_for(q.spec).score_answer(extract_answer(reply), q.entry) == 1.0, reply
    assert shown >= 10, entry.dataset


def test_worked_examples_stay_disjoint_from_heldout():
    mix = build_mix("easy", tasks=["calendar_arithmetic"])
    held = heldout_set(mix, 32)
    keys = {question_key(q) for q in held}
    shots = fewshot_messages(mix[0], 8, keys, worked=True)
    assert len(shots) == 16 and {m["content"] for m in shots[::2]}.isdisjoint(q.question for q in held)
    assert all("leap year" in m["content"] and not m["content"].startswith(ANSWER_OPEN) for m in shots[1::2])


def test_prompt_styles():
    mix = build_mix("easy", tasks=["basic_arithmetic"])
    q = heldout_set(mix, 1)[0]
    old = Prompts(mix, 2, frozenset(), lambda m: m, "old").messages(q)
    assert old[0]["role"] == "system" and old[2]["content"].startswith(ANSWER_OPEN)  # as before issue 10
    nosys = Prompts(mix, 2, frozenset(), lambda m: m, "worked-nosys").messages(q)
    assert nosys[0]["role"] == "user" and "=" in nosys[1]["content"] and nosys[-1]["content"] == q.question
    assert style_for("basic_arithmetic", "worked") == (True, True)
    # "new" (the default) takes each task's measured choice
    assert style_for("basic_arithmetic", "new") == (True, True) and style_for("bf", "new") == (False, True)
    assert style_for("propositional_logic", "new") == (True, True)
    with pytest.raises(SapoError, match="unknown prompts"):
        Prompts(mix, 2, frozenset(), lambda m: m, "fancy")


def test_paper_preset_is_covered():
    assert {e.dataset for e in build_mix("paper")} == set(PAPER_TASKS)


def test_equation_working_isolates_the_variable_and_refuses_other_forms():
    def work(eq: str, answer: str) -> str | None:
        return worked_answer("simple_equations", {"answer": answer, "metadata": {"equation": eq, "variable": "x"}})

    assert work("x + 5 = 12", "7") == "x = 12 - 5 = 7. <answer>7</answer>"
    assert work("9 - x = 3", "6") == "x = 9 - 3 = 6. <answer>6</answer>"
    assert work("x - 4 = -2", "2") == "x = -2 + 4 = 2. <answer>2</answer>"
    assert work("x + 5 = 12", "8") is None  # a working must reach the dataset's answer
    assert work("3 * x + 2 = 11", "3") is None  # not a two-term +/- equation: bare answer instead


def test_gcd_and_leg_workings():
    gcd = worked_answer("gcd", {"answer": "3", "metadata": {"numbers": [24, 39]}})
    assert gcd == "39 mod 24 = 15. 24 mod 15 = 9. 15 mod 9 = 6. 9 mod 6 = 3. 6 mod 3 = 0, so the GCD is 3. <answer>3</answer>"
    legs = worked_answer("leg_counting", {"answer": "8", "metadata": {"animals": {"chicken": 2, "cow": 1}}})
    assert legs == "2 chicken: 2 * 2 = 4. 1 cow: 1 * 4 = 4. 4 + 4 = 8. <answer>8</answer>"
    assert worked_answer("leg_counting", {"answer": "9", "metadata": {"animals": {"cow": 2}}}) is None
