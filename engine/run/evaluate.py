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

import math
import statistics
from typing import Any, Callable

from engine.sampling.rollout import SamplingParams
from engine.tasks.questions import Question, question_key

SAMPLES_PER_QUESTION = 2


def evaluate(rollout: Callable[..., list[Any]], heldout: list[Question], params: SamplingParams,
             samples: int = SAMPLES_PER_QUESTION) -> dict[str, Any]:
    """``rollout(questions, params, n, greedy)`` is ``Node.rollout``: it returns scored groups,
    here each with one greedy answer first, then the sampled ones."""
    return summarize_eval(eval_groups(rollout, heldout, params, samples))


def eval_groups(rollout: Callable[..., list[Any]], heldout: list[Question], params: SamplingParams,
                samples: int = SAMPLES_PER_QUESTION) -> list[Any]:
    """The evaluation's one generate call: per question a greedy answer, then ``samples`` sampled ones."""
    return rollout(heldout, params, 1 + samples, greedy=1)


def summarize_eval(groups: list[Any]) -> dict[str, Any]:
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
        "eval_questions": len(groups),
        "per_task": {t: {"eval_accuracy": round(statistics.fmean(v["acc"]), 4),
                         "eval_sampled_reward": round(statistics.fmean(v["rew"]), 4),
                         "eval_sampled_accuracy": round(statistics.fmean(v["sacc"]), 4)}
                     for t, v in per_task.items()},
        # Per question, in held-out order: [key, greedy correct (0/1), sampled answers correct]. Every node
        # with the same mix has the same held-out questions, so an experiment's agents are not independent
        # samples of questions; these let a report take its interval over questions as well as over agents.
        "per_question": [[question_key(g.question), int(g.scores[0].correct), sum(int(sc.correct) for sc in g.scores[1:])]
                         for g in groups],
    }


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation / sqrt(n)); 0 for fewer than 2 values."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def task_spread(groups: list[Any]) -> dict[str, dict[str, float]]:
    """Per task, from evaluation groups: greedy and sampled accuracy, each with its standard error
    over questions (a question's sampled accuracy is the mean of its samples), the well-formed rate
    of sampled answers (what the format bonus pays for, apart from accuracy), the mean sampled
    task score (partial credit, no bonus), and the share of questions whose samples disagree
    (some right, some wrong: the groups GRPO learns from)."""
    by_task: dict[str, list[Any]] = {}
    for g in groups:
        by_task.setdefault(g.question.spec.dataset, []).append(g)
    out = {}
    for task, gs in by_task.items():
        greedy, greedy_se = mean_and_se([float(g.scores[0].correct) for g in gs])
        sampled, sampled_se = mean_and_se([statistics.fmean(float(s.correct) for s in g.scores[1:]) for g in gs])
        samples = [s for g in gs for s in g.scores[1:]]
        mixed = [len({s.correct for s in g.scores[1:]}) > 1 for g in gs]
        out[task] = {"questions": len(gs), "samples": len(gs[0].scores) - 1,
                     "greedy_accuracy": round(greedy, 4), "greedy_se": round(greedy_se, 4),
                     "sampled_accuracy": round(sampled, 4), "sampled_se": round(sampled_se, 4),
                     "sampled_task_score": round(statistics.fmean(s.task_score for s in samples), 4),
                     "format_rate": round(statistics.fmean(float(s.well_formed) for s in samples), 4),
                     "groups_with_spread": round(statistics.fmean(float(m) for m in mixed), 4)}
    return out
