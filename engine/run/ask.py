"""Try the model: a question answered by the base model and by the trained one, side by side.

The app's ``ask`` command (wire/events.py) is served by the loop thread at a pause point
(engine/run/control.py), so training stops for no more than the answers take, and never mid-phase.
Both answers come from the node's own llama.cpp context: the trained one with the live adapter, the
base one with the adapter switched off (``LlamaModel.use_adapter``, no reload), greedy, so a question
asked twice gets the same pair. A task question is drawn from a stream of its own (seed "try"), at
the task's current level, never a held-out one, and prompted exactly as in training (same few-shot
examples); both answers are scored by the sandbox like any own answer. Nothing here touches the
training's question streams, random state or checkpoint.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.sandbox.workers import score_groups
from engine.tasks.groups import Completion
from engine.tasks.questions import Question, build_messages, derive_seed, question_key, regenerate
from wire import events as ev
from wire.protocol import TaskSpec

if TYPE_CHECKING:
    from engine.run.node import Node

MAX_DRAWS = 200  # a task whose questions are mostly held out still gets one


class Trial:
    """Answers ``ask`` commands on one node's model; holds only the try-stream's position."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.generator = RolloutGenerator(node.llm)  # its own: the training generator's state is untouched
        self.draws = 0
        self.heldout = frozenset(question_key(q) for q in node.heldout)  # never shown, as in training

    def answer(self, ask: ev.Ask) -> ev.Answer:
        """The ``answer`` event for one ``ask``; a bad ask (an unknown task) is an answer with ``error``."""
        t0 = time.perf_counter()
        node = self.node
        question: Question | None = None
        if ask.task:
            question = self._draw(ask.task)
            if question is None:
                tasks = ", ".join(e.dataset for e in node.mix)
                return ev.Answer(id=ask.id, task=ask.task, error=f"unknown task {ask.task!r}: this node trains on {tasks}")
            prompt = node.prompt_ids(question)
            text = question.question
        else:
            text = ask.question.strip()
            prompt = node.llm.prompt_tokens(build_messages(text, []))
        params = SamplingParams(max_tokens=ask.max_tokens, temperature=0.0)
        if len(prompt) + ask.max_tokens > node.llm.n_ctx:
            return ev.Answer(id=ask.id, task=ask.task, question=text[:ev.MAX_ANSWER_CHARS],
                             error=f"the question is too long for this model ({len(prompt)} tokens)")
        trained = self._complete(prompt, params) if node.llm.has_adapter else None
        node.llm.use_adapter(False)
        try:
            base = self._complete(prompt, params)
        finally:
            node.llm.use_adapter(True)
        out = ev.Answer(id=ask.id, question=text[:ev.MAX_ANSWER_CHARS], task=ask.task,
                        base=base.text[:ev.MAX_ANSWER_CHARS],
                        trained=None if trained is None else trained.text[:ev.MAX_ANSWER_CHARS], round=node.round)
        if question is not None:
            answers = [base] + ([trained] if trained is not None else [])
            scores = score_groups(node.sandbox, [(question, answers)], node.cfg.format_bonus)[0][0]
            out = _with_scores(out, question, scores)
        return _timed(out, t0)

    def _complete(self, prompt: list[int], params: SamplingParams) -> Completion:
        return self.generator.generate([prompt], 1, params)[0][0]

    def _draw(self, task: str) -> Question | None:
        node = self.node
        entry = next((e for e in node.mix if e.dataset == task), None)
        if entry is None:
            return None
        entry = node.stream.at_level(entry)
        seed = derive_seed("try", node.node_id, node.cfg.seed, entry.dataset)
        q = None
        for _ in range(MAX_DRAWS):
            self.draws += 1
            q = regenerate(TaskSpec(dataset=entry.dataset, config=dict(entry.config), seed=seed, index=self.draws))
            if question_key(q) not in self.heldout:
                break
        return q


def _with_scores(out: ev.Answer, q: Question, scores: list[Any]) -> ev.Answer:
    base = scores[0]
    trained = scores[1] if len(scores) > 1 else None
    return msgspec.structs.replace(
        out, expected=q.answer[:ev.MAX_ANSWER_CHARS], base_score=round(base.task_score, 4), base_correct=base.correct,
        trained_score=None if trained is None else round(trained.task_score, 4),
        trained_correct=None if trained is None else trained.correct)


def _timed(out: ev.Answer, t0: float) -> ev.Answer:
    return msgspec.structs.replace(out, seconds=round(time.perf_counter() - t0, 3))
