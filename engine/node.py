"""One node's round loop.

A round: draw I questions -> L completions each (one llama.cpp batch) -> score ->
(share, sample J external groups) -> train -> export + swap the adapter -> checkpoint ->
events. This module wires the pieces together; each piece lives in its own module.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import NodeConfig
from engine.events import EventLog
from engine.llm import LlamaModel
from engine.rewards import Score, score_completion
from engine.rollout import Completion, RolloutGenerator, SamplingParams
from engine.tasks import (Question, QuestionStream, TaskEntry, build_messages, build_mix, derive_seed,
                          fewshot_messages, heldout_set, scorer_for)

MAX_SEQS_PER_BATCH = 64


@dataclass
class ScoredGroup:
    """A question group ready for training: prompt ids, completions, their scores."""

    question: Question
    prompt_ids: list[int]
    completions: list[Completion]
    scores: list[Score]
    source: str = "local"  # or the sending node's id

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.scores]


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


class Node:
    def __init__(self, cfg: NodeConfig, model_path: Path, model_name: str, node_id: str, events: EventLog,
                 threads: int) -> None:
        assert cfg.completions and cfg.max_tokens and cfg.preset and cfg.fewshot is not None
        self.cfg = cfg
        self.model_name = model_name
        self.node_id = node_id
        self.events = events
        self.mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
        self.heldout = heldout_set(self.mix, cfg.eval_per_task)
        self.stream = QuestionStream(self.mix, node_id, cfg.seed, self.heldout)
        budget = cfg.local_groups + cfg.external_groups
        n_seq = min(MAX_SEQS_PER_BATCH, max(budget * cfg.completions, 2))
        self.llm = LlamaModel(model_path, n_ctx=n_seq * cfg.max_tokens + 8192, n_seq_max=n_seq, threads=threads)
        self.generator = RolloutGenerator(self.llm, seed=derive_seed("sampling", node_id, cfg.seed))
        self.params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer)
        self.round = 0
        self._fewshot: dict[str, list[dict[str, str]]] = {}

    # --- prompts and scoring ---
    def prompt_ids(self, q: Question) -> list[int]:
        """The node's own prompt for a question: its chat template, its few-shot examples."""
        key = q.spec.dataset + json.dumps(q.spec.config, sort_keys=True)
        shots = self._fewshot.get(key)
        if shots is None:
            entry = TaskEntry(q.spec.dataset, config=dict(q.spec.config))
            shots = self._fewshot[key] = fewshot_messages(entry, self.cfg.fewshot or 0)
        return self.llm.prompt_tokens(build_messages(q.question, shots))

    def score(self, q: Question, completions: list[Completion]) -> list[Score]:
        scorer = scorer_for(q.spec)
        return [score_completion(scorer, q.entry, c.text, self.cfg.format_bonus or 0.0) for c in completions]

    def rollout(self, questions: list[Question], params: SamplingParams | None = None,
                n: int | None = None) -> list[ScoredGroup]:
        prompts = [self.prompt_ids(q) for q in questions]
        outs = self.generator.generate(prompts, n or self.cfg.completions or 2, params or self.params)
        return [ScoredGroup(q, p, cs, self.score(q, cs)) for q, p, cs in zip(questions, prompts, outs)]

    # --- the loop ---
    def run_round(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.round += 1
        self.generator.reseed(derive_seed("sampling", self.node_id, self.cfg.seed, self.round))
        n_local = self.cfg.local_groups + self.cfg.external_groups  # offline: the whole budget is local
        groups = self.rollout(self.stream.draw(n_local))
        stats = self.generator.last
        metrics: dict[str, Any] = {
            "round": self.round,
            **summarize(groups),
            "groups": len(groups),
            "gen_tokens": stats.tokens,
            "gen_s": round(stats.seconds, 3),
            "gen_tokens_per_s": round(stats.tokens_per_s, 1),
            "per_task": _per_task(groups),
        }
        metrics["round_s"] = round(time.perf_counter() - t0, 3)
        self.events.emit("round", **metrics)
        return metrics

    def close(self) -> None:
        self.llm.close()


def _per_task(groups: list[ScoredGroup]) -> dict[str, dict[str, float]]:
    by_task: dict[str, list[ScoredGroup]] = {}
    for g in groups:
        by_task.setdefault(g.question.spec.dataset, []).append(g)
    return {task: {"accuracy": round(summarize(gs)["accuracy"], 4), "reward_mean": round(summarize(gs)["reward_mean"], 4)}
            for task, gs in by_task.items()}
