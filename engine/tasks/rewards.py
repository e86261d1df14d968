"""Rewards: pure functions from a completion's text to numbers.

reward = task_score + format_bonus * well_formed

- The answer is the content of the *last* ``<answer>...</answer>`` pair (as the paper's
  reference implementation reads it), stripped of surrounding whitespace.
- ``task_score`` comes from reasoning-gym's own scorer for the question's dataset, so
  partial credit is whatever that dataset gives.
- Format shaping is optional and reported separately: ``accuracy`` only ever counts
  fully correct answers, never the bonus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_ANSWER = re.compile(re.escape(ANSWER_OPEN) + "(.*?)" + re.escape(ANSWER_CLOSE), re.DOTALL)


def tagged(answer: str) -> str:
    """An answer as the model should write it."""
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


class Scorer(Protocol):
    """reasoning-gym's ``ProceduralDataset.score_answer`` signature."""

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float: ...


@dataclass(frozen=True)
class Score:
    reward: float  # what the policy is trained on
    task_score: float  # reasoning-gym's score, in [0, 1]
    correct: bool  # task_score == 1
    well_formed: bool  # exactly one non-empty <answer> tag


def extract_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>``, or None if there is none."""
    matches = _ANSWER.findall(text)
    if not matches:
        return None
    return matches[-1].strip()


def is_well_formed(text: str) -> bool:
    """One answer tag pair, non-empty, nothing dangling: what the format bonus pays for."""
    matches = _ANSWER.findall(text)
    return (
        len(matches) == 1
        and matches[0].strip() != ""
        and text.count(ANSWER_OPEN) == 1
        and text.count(ANSWER_CLOSE) == 1
    )


def answer_score(scorer: Scorer, entry: dict[str, Any], answer: str | None) -> float:
    """reasoning-gym's score for an extracted answer, clamped to [0, 1].

    A missing answer scores 0 here even where a dataset would give a courtesy
    credit for ``None``: no tag, no reward.
    """
    if answer is None:
        return 0.0
    try:
        value = float(scorer.score_answer(answer, entry))
    except Exception:  # noqa: BLE001 - a scorer crashing on junk model output means "wrong"
        return 0.0
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, value))


def task_score(scorer: Scorer, entry: dict[str, Any], text: str) -> float:
    """``answer_score`` of a completion's answer."""
    return answer_score(scorer, entry, extract_answer(text))


def make_score(task_score: float, text: str, format_bonus: float = 0.0) -> Score:
    """A completion's Score from its task score (computed elsewhere, e.g. in the sandbox)."""
    formed = is_well_formed(text)
    return Score(
        reward=task_score + (format_bonus if formed else 0.0),
        task_score=task_score,
        correct=task_score >= 1.0,
        well_formed=formed,
    )


def score_completion(scorer: Scorer, entry: dict[str, Any], text: str, format_bonus: float = 0.0) -> Score:
    return make_score(task_score(scorer, entry, text), text, format_bonus)
