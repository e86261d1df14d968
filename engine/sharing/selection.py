"""Which external groups a node trains on, and how many: pure functions, no I/O.

Selection (``external_selection``), over candidates the node has already verified and re-scored:
- ``uniform``: the paper's rule, any candidate with reward spread, in random order;
- ``top``: GenRL's rule, the highest mean reward (under this node's scoring) first;
- ``useful``: groups this node can learn from: success rate (fully correct answers, under this
  node's re-scoring) strictly between 0 and 1, closest to 0.5 first (the learning signal of a
  group peaks there: online difficulty filtering, arXiv 2504.03380; ExGRPO prefers 25-75 %),
  weighted up for tasks this node currently fails and, with ``frontier``, down by the distance
  between the group's level of its task and this node's (engine/tasks/frontier.py): a peer's group
  from this node's own frontier first;
- ``rare``: the same groups as ``useful``, the lowest success rate first (then as ``useful``): a
  peer's rare success is most likely an answer this node does not find itself (same model, same
  task), where ``useful`` would train the groups nearest 0.5 first. A probe (docs/RESULTS.md,
  chain3-rare), not a default.

Budget (``fill_dead_slots``): the paper counts *drawn* groups (I own + J external); own groups
without reward spread then train nothing. Filling dead slots keeps the number of *trained*
groups at I + J: each own group without spread frees a slot for one more candidate with spread.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping, Sequence

from engine.config import EXTERNAL_SELECTIONS

SELECTIONS = EXTERNAL_SELECTIONS  # defined once, with the setting it checks
UNKNOWN_ACCURACY = 0.5  # a task this node has not drawn yet: neither failed nor mastered
ACCURACY_EMA = 0.3  # weight of the latest round in a task's running accuracy


@dataclass(frozen=True)
class Candidate:
    """What selection needs to know of a verified external group (all under this node's scoring)."""

    task: str
    success: float  # fraction of completions fully correct
    reward_mean: float
    spread: bool  # rewards differ: the group has a GRPO signal
    distance: int = 0  # levels between the group's task settings and this node's current ones (frontier)


def usefulness(success: float, task_accuracy: float) -> float:
    """4 p (1 - p), peaking at 1 for p = 0.5, times (1 - acc / 2): a failed task counts double a mastered one."""
    return 4.0 * success * (1.0 - success) * (1.0 - task_accuracy / 2.0)


def rank(candidates: Sequence[Candidate], mode: str, task_accuracy: Mapping[str, float],
         rng: random.Random) -> list[int]:
    """Indices of the eligible candidates, best first. Ties keep arrival order (stable sorts)."""
    if mode == "uniform":
        order = [i for i, c in enumerate(candidates) if c.spread]
        rng.shuffle(order)
        return order
    if mode == "top":
        eligible = [i for i, c in enumerate(candidates) if c.spread]
        return sorted(eligible, key=lambda i: -candidates[i].reward_mean)
    if mode in ("useful", "rare"):
        eligible = [i for i, c in enumerate(candidates) if c.spread and 0.0 < c.success < 1.0]

        def score(i: int) -> float:
            c = candidates[i]
            return usefulness(c.success, task_accuracy.get(c.task, UNKNOWN_ACCURACY)) / (1 + c.distance)

        if mode == "rare":
            return sorted(eligible, key=lambda i: (candidates[i].success, -score(i)))
        return sorted(eligible, key=lambda i: -score(i))
    raise ValueError(f"unknown external selection {mode!r}: choose one of {', '.join(SELECTIONS)}")


def dead_slots(own_spread: Sequence[bool], n_external: int, budget: int) -> int:
    """Slots to refill so that trained groups reach ``budget`` (I + J): own groups without spread
    train nothing, external ones all have spread."""
    return max(0, budget - sum(own_spread) - n_external)


def candidates_to_sample(local: int, external: int, mode: str, fill: bool) -> int:
    """How many groups to ask the swarm for: J for the paper's rule, more when there is a choice to make."""
    if external == 0:
        return 0
    if mode == "uniform" and not fill:
        return external
    return 2 * (local + external)  # room to choose J, plus up to I dead slots, with some left over


def update_task_accuracy(previous: Mapping[str, float], round_accuracy: Mapping[str, float],
                         alpha: float = ACCURACY_EMA) -> dict[str, float]:
    """Running accuracy per task: an exponential moving average of each round's own accuracy."""
    out = dict(previous)
    for task, acc in round_accuracy.items():
        out[task] = acc if task not in out else (1 - alpha) * out[task] + alpha * acc
    return out
