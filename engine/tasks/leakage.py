"""Held-out answers stated in a peer's reasoning (issue 23 item 5).

A peer's group on a question of its own may carry, in its completions' working, a held-out question with
its answer ("by the way, 3 * 4 = 12"); trained on, that teaches the receiver its own evaluation. A receiver
refuses an external group any completion of which states a held-out question (``marks``: what decides the
question, e.g. an arithmetic expression or a leap-year question's year) together with its answer
(``heldout_leak``). Text is compared squashed (``squash``), whole numbers and words only, as written and with
numbers and operators spelled out in words read as symbols (``spoken``: "three times four is twelve" reads
"3*4 is 12"; text2num parses the number words), a leap year's year also as people say it ("nineteen
seventy"), numbers said digit by digit, joined (``digits_joined``: "one zero" reads ``10``), and two numbers'
operation said as a phrase ("the product of three and four" reads ``3 * 4``). Other rewordings are not caught,
nor a gcd's numbers in the other order; docs/SECURITY.md has the measured rates
(benchmarks/bench_heldout_leak.py) and the reasons.
"""

from __future__ import annotations

import re
from typing import Any

from text_to_num import alpha2digit

from engine.tasks.questions import Question

# Operators said in words, as the easy tasks' expressions write them. Longest first: "multiplied by" before "by".
_OPERATORS = [(re.compile(rf"\b{w}\b"), sym) for w, sym in (
    (r"multiplied\s+by", "*"), (r"divided\s+by", "/"), ("times", "*"), ("plus", "+"), ("minus", "-"))]
# Two numbers and an operation said as a phrase, as the easy tasks' two-number expressions are reworded:
# "the product of 8 and 10" -> "8 * 10", "subtract 2 from 8" -> "8 - 2". One pass each, linear in the text.
_N = r"(?<!\d)(-?\d+)(?!\d)"  # whole numbers only: a match starts at a number's first digit (no quadratic retries)
_PHRASES = [(re.compile(p), r) for p, r in (
    (rf"\bthe\s+product\s+of\s+{_N}\s+and\s+{_N}", r"\1 * \2"),
    (rf"\bthe\s+sum\s+of\s+{_N}\s+and\s+{_N}", r"\1 + \2"),
    (rf"\bthe\s+difference\s+(?:between|of)\s+{_N}\s+and\s+{_N}", r"\1 - \2"),
    (rf"\bthe\s+quotient\s+of\s+{_N}\s+and\s+{_N}", r"\1 / \2"),
    (rf"\bsubtract(?:ing)?\s+{_N}\s+from\s+{_N}", r"\2 - \1"),
    (rf"{_N}\s+added\s+to\s+{_N}", r"\2 + \1"),
    (rf"{_N}\s+(?:less|take\s+away)\s+{_N}", r"\1 - \2"))]


def squash(text: str) -> str:
    """Casefolded, no whitespace around symbols, one space between words: ``Calculate 2 + 5.`` -> ``calculate 2+5.``"""
    return " ".join(re.sub(r"\s*([^\w\s.])\s*", r"\1", str(text).casefold()).split())


def spoken(text: str) -> str:
    """Numbers and arithmetic operators written in words, as digits and symbols (casefolded):
    ``Eight times ten is eighty`` -> ``8 * 10 is 80``. Linear in the text (text2num is a Rust parser); the
    receiver checks completions already cut to its own ``max_tokens``."""
    text = re.sub(r"\boh-", "oh ", str(text).casefold())  # "nineteen oh-five": text2num reads "19 oh 5"
    text = alpha2digit(text, "en", threshold=0)  # threshold 0: "one" and "two" too
    for pattern, sym in _OPERATORS:
        text = pattern.sub(f" {sym} ", text)
    for pattern, expression in _PHRASES:
        text = pattern.sub(expression, text)
    return text


_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()
_DIGIT_WORD_RUN = re.compile(rf"\b(?:{'|'.join(_DIGIT_WORDS)})(?:[ -]+(?:{'|'.join(_DIGIT_WORDS)})\b)+")
_DIGIT_RUN = re.compile(r"(?<![\d.])(?<!\d\.)\d(?: \d)+(?!\d|\.\d)")


def digits_joined(text: str) -> str:
    """Numbers said digit by digit, joined, then read as ``spoken`` reads: "eight * one zero" -> ``8 * 10``,
    "seven zero zero" -> ``700``, ``1 9 7 0`` -> ``1970``. Only runs of single digits (words, or digits one
    space apart): ``12 3`` and ``1.5 2`` stay as written. An extra reading of a completion, beside ``spoken``."""
    text = _DIGIT_WORD_RUN.sub(lambda m: "".join(str(_DIGIT_WORDS.index(w)) for w in re.split(r"[ -]+", m.group())),
                               str(text).casefold())
    return _DIGIT_RUN.sub(lambda m: m.group().replace(" ", ""), spoken(text))


def _year(year: int) -> str:
    """A year as digits, and as people say it once ``spoken`` has read it: "nineteen seventy" -> ``19 70``,
    "nineteen oh five" -> ``19 oh 5``, "one thousand, nine hundred and seventy" -> ``1000,970`` (squashed)."""
    century, rest = divmod(year, 100)
    forms = [str(year)]
    forms.append(f"{century} {rest}" if rest >= 10 else f"{century} (?:oh )?0?{rest}")
    if year % 1000 >= 100:
        forms.append(f"{year // 1000 * 1000},{year % 1000}")
    return "(?:" + "|".join(forms) + ")"


def _core(dataset: str, entry: dict[str, Any], question: str) -> str:
    """A regular expression for what decides the question, over squashed text."""
    meta = entry.get("metadata", {}) if isinstance(entry, dict) else {}
    try:
        if dataset in ("basic_arithmetic", "chain_sum"):
            return re.escape(squash(meta["expression"]))
        if dataset == "calendar_arithmetic" and meta.get("task") == "is_leap_year":
            return _year(int(meta["year"]))
        if dataset == "gcd":
            # In the question's order only: with the easy preset's numbers (1-10) the reversed pair is another
            # question a node may draw and train on honestly, and restates in its working (docs/SECURITY.md).
            return re.escape(",".join(str(n) for n in meta["numbers"]))
    except (KeyError, TypeError, ValueError):
        pass
    return re.escape(squash(question))


def marks(q: Question) -> re.Pattern[str] | None:
    """A pattern for "states this question and its answer" over squashed text (whole numbers and words only:
    ``2+5`` is not inside ``12+5``, ``no`` not inside ``not``); None where there is no answer to leak."""
    answer = squash(q.answer)
    if not answer:
        return None
    core = _core(q.spec.dataset, q.entry, q.question)
    edge_l, edge_r = r"(?<![0-9a-z.])", r"(?![0-9a-z]|\.[0-9])"
    # An answer led by a sign: squashing joins it to what comes before ("6 - 9. -3" -> "6-9.-3", "is -3" ->
    # "is-3"), so only a digit before the sign makes it part of something else ("6-3" is not "-3").
    answer_l = edge_l if answer[0].isalnum() else r"(?<![0-9])"
    a, c = answer_l + re.escape(answer) + edge_r, edge_l + core + edge_r
    return re.compile(f"(?=.*{c})(?=.*{a})", re.DOTALL)


class LeakCheck:
    """The held-out set's marks, and whether a completion states one of them."""

    def __init__(self, heldout: list[Question]) -> None:
        self.marks = [m for m in map(marks, heldout) if m is not None]

    def leaks(self, text: str) -> bool:
        if not self.marks:
            return False
        forms = (squash(text), squash(spoken(text)), squash(digits_joined(text)))
        return any(m.match(form) for form in forms for m in self.marks)
