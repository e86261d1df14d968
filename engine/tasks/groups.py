"""Plain data that flows through a round: completions, scored groups, training groups.

No torch, no llama.cpp: the pure algorithm (``engine.learning.grpo``) and its tests use these
without loading a model.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.tasks.rewards import Score
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
        return [TrainSequence(self.prompt_ids, c, a) for c, a in zip(self.completions, self.advantages)]


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
