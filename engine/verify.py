"""Verification of groups received from other nodes. Pure: no I/O, no model.

A peer's group is only trained on if
- its TaskSpec regenerates (known dataset, settings reasoning-gym accepts),
- the regenerated question and answer equal the ones it carries (no altered questions or labels),
- every completion, re-scored here, is consistent with the reward its sender claims:
  claimed = task_score + bonus if well formed, else task_score, with one bonus in [0, MAX_FORMAT_BONUS]
  for the whole group (nodes may shape format differently, but nobody may inflate).
The node trains on its own re-scored rewards either way; the claims only serve to catch liars.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.rewards import Score, score_completion
from engine.tasks import Question, regenerate, scorer_for
from wire.protocol import MAX_FORMAT_BONUS, Group

TOLERANCE = 1e-4


@dataclass(frozen=True)
class Verdict:
    question: Question | None
    scores: list[Score]  # re-scored here, with this node's format bonus
    reason: str | None  # None = accepted

    @property
    def ok(self) -> bool:
        return self.reason is None


def verify_group(group: Group, format_bonus: float) -> Verdict:
    try:
        q = regenerate(group.spec)
    except Exception:  # noqa: BLE001 - unknown dataset or settings reasoning-gym rejects
        return Verdict(None, [], "bad_spec")
    if q.question != group.question:
        return Verdict(q, [], "question_mismatch")
    if q.answer != group.answer:
        return Verdict(q, [], "answer_mismatch")
    scorer = scorer_for(group.spec)
    theirs = [score_completion(scorer, q.entry, text, 0.0) for text in group.completions]
    bonuses = set()
    for claimed, s in zip(group.rewards, theirs):
        extra = claimed - s.task_score
        if s.well_formed and -TOLERANCE <= extra <= MAX_FORMAT_BONUS + TOLERANCE:
            bonuses.add(round(extra, 3))
        elif abs(extra) > TOLERANCE:
            return Verdict(q, [], "reward_mismatch")
    if len(bonuses) > 1:
        return Verdict(q, [], "reward_mismatch")
    ours = [score_completion(scorer, q.entry, text, format_bonus) for text in group.completions]
    return Verdict(q, ours, None)
