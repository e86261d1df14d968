"""The held-out leak rule (engine/tasks/leakage.py) on the easy preset's real held-out questions: every pair stated
with the question's own text or its expression, in digits or in words, is caught, and what only resembles one is not."""

from __future__ import annotations

import re

from num2words import num2words

from engine.tasks.leakage import LeakCheck, _year, digits_joined, spoken, squash
from engine.tasks.questions import build_mix, heldout_set

# The easy settings of every task the leak rule has a case for (leap years are no longer drawn by default, but a
# node that names calendar_arithmetic gets them, and their years are what people say in words).
HELD = heldout_set(build_mix("easy", tasks=["basic_arithmetic", "chain_sum", "calendar_arithmetic", "gcd"]), 16)
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


def say(text: str) -> str:
    """Every number and arithmetic operator of ``text`` in words (num2words), as a peer hiding a pair would."""
    text = re.sub(r"(?<![\w.])-?\d+", lambda m: num2words(int(m.group())), text)
    return re.sub(r"\s([*+/-])\s", lambda m: f" {WORDS[m.group(1)]} ", text)


WORDS = {"*": "times", "+": "plus", "-": "minus", "/": "divided by"}


def test_every_held_out_pair_spelled_out_in_words_is_caught():
    missed = []
    for h in HELD:
        said = f"I work it out. Also: {say(h.question)} {say(h.answer)}. <answer>1</answer>"
        assert any(ch.isdigit() for ch in h.answer + h.question) and not re.search(r"\d", said.split("<answer>")[0])
        if not CHECK.leaks(said):
            missed.append(said)
    assert not missed, missed


DIGITS = "zero one two three four five six seven eight nine".split()


def digit_by_digit(text: str) -> str:
    """Every digit of ``text`` as its word, one by one: ``8 * 10`` -> ``eight * one zero``."""
    return re.sub(r"\d+", lambda m: " ".join(DIGITS[int(ch)] for ch in m.group()), text)


def test_every_held_out_pair_spelled_digit_by_digit_is_caught():
    missed = []
    for h in HELD:
        said = f"I work it out. Also: {digit_by_digit(h.question)} {digit_by_digit(h.answer)}. <answer>1</answer>"
        assert not re.search(r"\d", said.split("<answer>")[0])
        if not CHECK.leaks(said):
            missed.append(said)
    assert not missed, missed


def test_digit_runs_join_only_single_digits_one_space_apart():
    assert squash(digits_joined("Eight * one zero is eight zero.")) == "8*10 is 80."
    assert squash(digits_joined("Is seven zero zero a leap year? 1 9 7 0.")) == "is 700 a leap year?1970."
    assert digits_joined("12 3, 1.5 2 and 4  5") == "12 3, 1.5 2 and 4  5"
    assert squash(digits_joined("twenty one, one hundred")) == "21,100"  # number words that are not digits: as spoken


def test_a_held_out_year_said_as_people_say_it_is_caught():
    years = [h for h in HELD if "year" in h.entry.get("metadata", {})]
    assert any(h.entry["metadata"]["year"] < 2000 for h in years)
    for h in years:
        year = h.entry["metadata"]["year"]
        for said in (num2words(year, to="year"), num2words(year)):  # "nineteen seventy", "one thousand, nine ..."
            text = f"Is {said} a leap year? {h.answer}. <answer>1</answer>"
            assert CHECK.leaks(text), text
        assert not CHECK.leaks(f"Is {year + 1} a leap year? {h.answer}.") or (year + 1) in {
            y.entry["metadata"]["year"] for y in years}


def test_years_with_a_nought_read_every_way_they_are_said():
    pattern = re.compile(_year(1905))
    for said in ("nineteen oh-five", "nineteen oh five", "nineteen o five", "nineteen zero five", "1905"):
        assert pattern.fullmatch(squash(spoken(said))), said
    assert not pattern.fullmatch(squash(spoken("nineteen fifteen")))


def test_spoken_reads_number_words_and_operators_as_symbols():
    assert squash(spoken("Eight times ten is eighty")) == "8*10 is 80"
    assert squash(spoken("six minus nine is minus three")) == "6-9 is-3"
    assert squash(spoken("Nine divided by three, multiplied by two")) == "9/3,*2"
    assert spoken("the sometimes plussed") == "the sometimes plussed"  # whole words only


def test_a_negative_answer_after_a_word_is_caught():
    h = next(h for h in HELD if h.answer.startswith("-"))
    expression = h.entry["metadata"]["expression"]
    assert CHECK.leaks(f"{expression} is {h.answer}")  # squashed: "is-3"
    assert not CHECK.leaks(f"{expression} is 1{h.answer}")


def test_honest_working_in_words_on_questions_not_held_out_is_not_a_leak():
    cores = {squash(h.entry["metadata"]["expression"]) for h in HELD if "expression" in h.entry.get("metadata", {})}
    cores |= {str(h.entry["metadata"]["year"]) for h in HELD if "year" in h.entry.get("metadata", {})}
    for text, core in (("Eight times nine is seventy-two. <answer>72</answer>", "8*9"),
                       ("Twelve minus five is seven, <answer>7</answer>", "12-5"),
                       ("The greatest common divisor of twelve and eighteen is six. <answer>6</answer>", None),
                       ("Two thousand and twenty-four is a leap year, so yes. <answer>Yes</answer>", "2024")):
        assert core not in cores  # not a held-out question: saying it is no leak
        assert not CHECK.leaks(text), text


PHRASES = {"*": "the product of {a} and {b}", "+": "the sum of {a} and {b}", "-": "the difference between {a} and {b}",
           "/": "the quotient of {a} and {b}"}


def test_every_held_out_expression_reworded_as_a_phrase_is_caught():
    """"The product of eight and ten is eighty": the two-number expressions of the easy tasks, said as a phrase,
    in digits and in words."""
    pairs = [h for h in HELD if re.fullmatch(r"-?\d+ [*+/-] -?\d+", h.entry.get("metadata", {}).get("expression", ""))]
    assert len(pairs) >= 16
    missed = []
    for h in pairs:
        a, op, b = h.entry["metadata"]["expression"].split()
        phrase = PHRASES[op].format(a=a, b=b)
        for said in (f"By the way, {phrase} is {h.answer}. <answer>1</answer>",
                     f"By the way, {say(phrase)} is {say(h.answer)}. <answer>1</answer>"):
            if not CHECK.leaks(said):
                missed.append(said)
    assert not missed, missed


def test_a_phrase_for_another_question_is_not_a_leak():
    """The phrase reads as the expression in its own order: the held-out "8 * 10" is not "the product of 10 and 8"
    (another question a node may draw), nor is a product the sum of the same numbers."""
    h = next(h for h in HELD if h.entry.get("metadata", {}).get("expression") == "8 * 10")
    assert CHECK.leaks(f"the product of 8 and 10 is {h.answer}")
    assert not CHECK.leaks(f"the product of 10 and 8 is {h.answer}")
    assert not CHECK.leaks("the sum of 8 and 10 is 18")
