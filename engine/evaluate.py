"""Held-out evaluation: greedy pass@1, and samples at the training temperature.

Both, because on small models RL first sharpens sampling toward what greedy decoding
already does: sampled reward shows that, greedy pass@1 shows whether the model itself
got better. Sampled accuracy (fully correct answers only) is reported apart from sampled
reward, which includes partial credit and the format bonus. Overall and per task.

Cost: one generate call. Each held-out prompt is decoded once and its keys/values shared by
its greedy answer and its sampled ones (``RolloutGenerator.generate(..., greedy=1)``), and all
questions go into as few llama.cpp batches as the context allows.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from engine.rollout import SamplingParams
from engine.tasks import Question

SAMPLES_PER_QUESTION = 2


def evaluate(rollout: Callable[..., list[Any]], heldout: list[Question], params: SamplingParams) -> dict[str, Any]:
    """``rollout(questions, params, n, greedy)`` is ``Node.rollout``: it returns scored groups,
    here each with one greedy answer first, then the sampled ones."""
    groups = rollout(heldout, params, 1 + SAMPLES_PER_QUESTION, greedy=1)
    per_task: dict[str, dict[str, list[float]]] = {}
    for g in groups:
        task = per_task.setdefault(g.question.spec.dataset, {"acc": [], "rew": [], "sacc": []})
        task["acc"].append(float(g.scores[0].correct))
        task["rew"] += [sc.reward for sc in g.scores[1:]]
        task["sacc"] += [float(sc.correct) for sc in g.scores[1:]]
    return {
        "eval_accuracy": statistics.fmean(float(g.scores[0].correct) for g in groups),
        "eval_sampled_reward": statistics.fmean(sc.reward for g in groups for sc in g.scores[1:]),
        "eval_sampled_accuracy": statistics.fmean(float(sc.correct) for g in groups for sc in g.scores[1:]),
        "eval_questions": len(heldout),
        "per_task": {t: {"eval_accuracy": round(statistics.fmean(v["acc"]), 4),
                         "eval_sampled_reward": round(statistics.fmean(v["rew"]), 4),
                         "eval_sampled_accuracy": round(statistics.fmean(v["sacc"]), 4)}
                     for t, v in per_task.items()},
    }
