"""What a node tells the dashboard while a round runs: phase progress and a feed of answers.

``PhaseReporter`` turns the per-step callbacks of rollout and training into ``phase``
events, a few per second at most, so a progress bar moves during a long round without
flooding the GUI. ``feed_samples`` picks a few recent answers, own and received, cut short.
"""

from __future__ import annotations

import time
from typing import Callable

from engine.tasks.groups import ScoredGroup
from engine.tasks.rewards import extract_answer
from wire import events as ev
from wire.identity import display_name

EVERY_S = 0.3  # at most ~3 progress events a second
QUESTION_CHARS = 300
ANSWER_CHARS = 120
FEED_OWN, FEED_EXTERNAL = 3, 3  # answers per round in the feed


class PhaseReporter:
    def __init__(self, emit: Callable[[ev.Event], object], every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit = emit
        self._every = every_s
        self._clock = clock
        self._last = -1e9
        self._key: tuple[int, str] | None = None
        self._last_count: tuple[int, int] | None = None
        self.round = 0
        self.phase: ev.Phase = "generating"
        # Called at every phase start and step: a safe point between steps (the CPU-time limit sleeps here).
        self.on_step: Callable[[], None] = lambda: None

    def start(self, rnd: int, phase: ev.Phase, total: int = 0) -> None:
        """A new phase begins (always reported)."""
        self.round, self.phase = rnd, phase
        self._send(0, total, force=True)
        self.on_step()

    def progress(self, done: int, total: int) -> None:
        """Inside the current phase; reported when due, and always at its end."""
        self._send(done, total, force=done >= total > 0)
        self.on_step()

    def _send(self, done: int, total: int, force: bool) -> None:
        now = self._clock()
        key = (self.round, self.phase)
        if key == self._key and (done, total) == self._last_count:
            return  # nothing new to show
        if force or key != self._key or now - self._last >= self._every:
            self._key, self._last, self._last_count = key, now, (done, total)
            self._emit(ev.PhaseProgress(round=self.round, phase=self.phase, done=done, total=total))


def feed_samples(own: list[ScoredGroup], external: list[ScoredGroup]) -> list[ev.RolloutSample]:
    """A few answers of this round: the best-scored of some own groups and of some received ones."""
    out = []
    for groups, n in ((own, FEED_OWN), (external, FEED_EXTERNAL)):
        for g in groups[:n]:
            if not g.completions:
                continue
            best = max(range(len(g.completions)), key=lambda i: g.scores[i].reward)
            answer = extract_answer(g.completions[best].text)
            score = g.scores[best]
            out.append(ev.RolloutSample(
                task=g.question.spec.dataset,
                question=_cut(g.question.question, QUESTION_CHARS),
                answer=_cut(answer, ANSWER_CHARS) if answer is not None else None,
                reward=round(score.reward, 3),
                correct=score.correct,
                source="own" if g.source == "local" else display_name(g.source),
            ))
    return out


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
