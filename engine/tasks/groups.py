"""Plain data that flows through a round: completions, scored groups, training groups.

No torch, no llama.cpp: the pure algorithm (``engine.learning.grpo``) and its tests use these
without loading a model.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.tasks.rewards import Score
from wire.protocol import has_spread
from engine.tasks.questions import Question


@dataclass
class Completion:
    text: str
    token_ids: list[int]  # as sampled, end-of-generation token included when there was one
    finish: str  # "eog" | "length" | "answer" | "external"
    logprobs: list[float] | None = None  # the sampler's log-prob of each token, when asked for (engine.learning.offpolicy)


@dataclass
class ScoredGroup:
    """A question group ready for training: prompt ids, completions, their scores."""

    question: Question
    prompt_ids: list[int]
    completions: list[Completion]
    scores: list[Score]
    source: str = "local"  # or the sending node's id
    digest: str | None = None  # an external group's wire.protocol.group_digest (named in the trained report)

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.scores]


@dataclass(frozen=True)
class TrainSequence:
    """One sequence to train on: its prompt, its completion and the completion's advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    external: bool = False  # sampled by another node (its negatives follow ``external_negatives``)


@dataclass(frozen=True)
class TrainGroup:
    """One question group to train on: a prompt, its completions, one advantage per completion.

    The trainer runs the prompt once for all completions (``engine.learning.packing``).
    """

    prompt_ids: list[int]
    completions: list[list[int]]
    advantages: list[float]
    # The sampler's per-token log-probs per completion (None: unknown), for engine.learning.offpolicy's weights.
    behavior: list[list[float] | None] | None = None
    external: bool = False  # sampled by another node

    def __post_init__(self) -> None:
        if len(self.completions) != len(self.advantages):
            raise ValueError(f"{len(self.completions)} completions but {len(self.advantages)} advantages")
        if self.behavior is not None and len(self.behavior) != len(self.completions):
            raise ValueError(f"{len(self.completions)} completions but {len(self.behavior)} behavior log-prob lists")

    def sequences(self) -> list[TrainSequence]:
        return [TrainSequence(self.prompt_ids, c, a, self.external) for c, a in zip(self.completions, self.advantages)]


def summarize(groups: list[ScoredGroup]) -> dict[str, float]:
    scores = [s for g in groups for s in g.scores]
    if not scores:
        return {"reward_mean": 0.0, "accuracy": 0.0, "format_rate": 0.0, "task_score": 0.0}
    return {
        "reward_mean": statistics.fmean(s.reward for s in scores),
        "accuracy": statistics.fmean(s.correct for s in scores),
        "format_rate": statistics.fmean(s.well_formed for s in scores),
        "task_score": statistics.fmean(s.task_score for s in scores),
    }


def group_summary(g: ScoredGroup, own_accuracy: float | None = None) -> dict[str, object]:
    """One group a round had, in a few numbers: what the analysis of sharing needs (issue 21, item 6).

    ``positives``/``negatives`` count completions above/below the group's mean reward: those GRPO pushes
    up and down. ``own_accuracy`` is the receiver's running accuracy on the task (external groups), so a
    report can tell groups from the receiver's frontier from those it already solves or cannot.
    """
    rewards = g.rewards
    mean = statistics.fmean(rewards) if rewards else 0.0
    return {
        "task": g.question.spec.dataset,
        "source": "own" if g.source == "local" else g.source[:12],
        "completions": len(rewards),
        "correct": sum(s.correct for s in g.scores),
        "positives": sum(r > mean + 1e-9 for r in rewards),
        "negatives": sum(r < mean - 1e-9 for r in rewards),
        "spread": has_spread(rewards),
        **({"own_accuracy": round(own_accuracy, 3)} if own_accuracy is not None else {}),
    }
