"""A followed manifest's task this node's model never gets right: drawn less, learnt from peers' groups.

A swarm's manifest (engine/tasks/swarm_mix.py) sets one task mix for every node, whatever its model. A task the
node's model never answers right gives own groups without reward spread: they train nothing (GRPO needs spread),
so its own draws of that task waste its rounds. A peer's group of the task with spread is what sharing is for, and
the node keeps admitting and choosing those (admission and selection do not change: ``useful`` even weighs up
groups of tasks this node fails, engine/sharing/selection.py).

The rule (``update_all``), per task, on the node's own answers counted since it adopted the manifest:
- a task is *held back* while none of its own answers was fully correct (the format bonus never counts) and at
  least ``MIN_ANSWERS`` answers to at least ``MIN_GROUPS`` questions were graded; its draws then take ``FACTOR``
  of the manifest's weight, never 0: the node keeps checking;
- one fully correct answer restores the manifest's weight, for good (the counts only grow): a task the model can
  answer at all is one to draw. So a task is held back once at most, and restored once at most, per adoption.
Why 8 questions: a question's L answers are not independent draws (a question the model cannot do, it gets wrong
L times), so the evidence is the number of questions. Measured on the bundled SmolLM2-135M (one-digit sums and
differences at max_tokens 16, 48 questions x 4 samples): 0.32 of the answers right, yet 52 % of the questions got
none of their 4 right. Such a task, one to learn from, scores 0 on 3 questions with a chance of 0.52 ** 3 = 14 %
(a real node did, 0 of 16 answers on 4 questions), on 8 with 0.5 %. 32 answers at least: with L = 2 the rule waits
for 16 questions. A hold-back taken wrongly is cheap and undone at the first right answer.

With ``frontier`` (engine/tasks/frontier.py) a task scoring 0 goes down its ladder first; only answers at its
lowest level (a manifest's low level, else 0) count here (the caller picks them). Nothing here applies without a
manifest: a node's own mix is its own choice, and paired experiments draw exactly as before.

Pure: counts in, decision out. The counts live in the node's checkpoint state (``NodeState.held_back``), beside
the digest of the manifest they were counted under, so a restart goes on from them and a new manifest starts over.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

MIN_GROUPS = 8  # questions (own groups) graded before a task may be held back
MIN_ANSWERS = 32  # answers graded before a task may be held back
FACTOR = 0.25  # a held-back task's share of the manifest's weight in this node's own draws: never 0


@dataclass(frozen=True)
class Tally:
    """A task's own answers since the manifest was adopted: questions, answers, fully correct answers."""

    groups: int = 0
    answers: int = 0
    correct: int = 0

    @property
    def held(self) -> bool:
        return self.correct == 0 and self.groups >= MIN_GROUPS and self.answers >= MIN_ANSWERS


def update(tally: Tally, groups: int, answers: int, correct: int) -> Tally:
    """A task's tally after a round's ``groups`` own groups of it, ``answers`` answers, ``correct`` fully right."""
    if min(groups, answers, correct) < 0 or correct > answers:
        raise ValueError(f"counts must be 0 <= correct <= answers, got {groups}, {answers}, {correct}")
    return Tally(tally.groups + groups, tally.answers + answers, tally.correct + correct)


def update_all(tallies: Mapping[str, Mapping[str, Any]], rounds: Mapping[str, tuple[int, int, int]]
               ) -> tuple[dict[str, dict[str, int]], dict[str, bool]]:
    """Every task's tally after a round, as saved in the checkpoint, and the changes: task -> True (held back
    from now on) or False (restored to the manifest's weight).

    ``tallies``: task -> a ``Tally`` as a dict (absent: nothing counted yet); ``rounds``: task -> (groups, answers,
    fully correct answers) of this round's own groups that count.
    """
    out = {task: dict(t) for task, t in tallies.items()}
    changes: dict[str, bool] = {}
    for task, counts in rounds.items():
        before = Tally(**tallies.get(task, {}))
        after = update(before, *counts)
        out[task] = dataclasses.asdict(after)
        if after.held != before.held:
            changes[task] = after.held
    return out, changes


def factors(tallies: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Task -> the factor on its manifest weight in this node's own draws, for the held-back tasks only."""
    return {task: FACTOR for task, t in tallies.items() if Tally(**t).held}


def shares(weights: Mapping[str, float], factors: Mapping[str, float]) -> dict[str, float]:
    """Each task's share of this node's own draws, its weight times its factor (absent: 1) over the total."""
    scaled = {task: w * factors.get(task, 1.0) for task, w in weights.items()}
    total = sum(scaled.values())
    return {task: w / total for task, w in scaled.items()} if total > 0 else {}


def held_line(swarm: str, task: str, tally: Tally, before: float, after: float) -> str:
    """The one line a node says when it holds ``task`` back (``before`` / ``after``: its share of own draws)."""
    said = (f"swarm {swarm}: this model answered 0 of {tally.answers} {task} answers right ({tally.groups} questions "
            f"since it joined): ")
    if after >= before:  # no other task to draw instead: the mix's only task, or every task held back
        return said + f"it keeps drawing {task} (nothing else to draw instead) and learns it from peers' groups"
    return said + (f"it now draws {task} at {_fraction(FACTOR)} of the manifest's weight ({after:.0%} of its own "
                   f"questions instead of {before:.0%}) and learns it from peers' groups")


def restored_line(swarm: str, task: str, tally: Tally) -> str:
    """The one line a node says when a held-back task is answered right."""
    return (f"swarm {swarm}: this model answered {task} right ({tally.correct} of {tally.answers} answers since it "
            f"joined): it draws {task} at the manifest's weight again")


def still_line(swarm: str, tasks: Mapping[str, Tally]) -> str:
    """The line a resumed node says about the tasks it still holds back."""
    named = ", ".join(f"{task} (0 of {t.answers} answers right)" for task, t in sorted(tasks.items()))
    return f"swarm {swarm}: still drawing at {_fraction(FACTOR)} of the manifest's weight: {named}"


def _fraction(factor: float) -> str:
    return {0.25: "a quarter", 0.5: "half"}.get(factor, f"{factor:g} times")
