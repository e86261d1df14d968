"""How far the round in flight is, and how long it still takes: Folding@home's "percent done, time left".

Plain Python, no Qt. Estimated from measurements only, never from a guess: the phase in
flight from its own rate (``done`` of ``total`` so far, in the time it has taken), the
phases after it from how long they took in the last rounds. Before a first round has
finished here there is no measurement of the later phases, so there is no round estimate
either (the screen then says when there will be one).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# The order of a round's phases (engine/run/node.py ``run_round``); a phase may be skipped.
ORDER = ("external", "generating", "sharing", "training", "swapping", "evaluating", "checkpointing")
# Phases a round event times on their own; the rest (receiving, sharing, saving) is its "other" time.
TIMED = {"generating", "training", "swapping", "evaluating"}
RECENT = 3  # rounds whose phase times predict the next one's: recent enough to follow a change of threads


class TimedRound(Protocol):
    """What a past round says about its time (``app.run_model.RoundPoint``)."""

    generate_s: float
    score_s: float
    train_s: float
    swap_s: float
    evaluate_s: float
    other_s: float
    round_s: float


@dataclass(frozen=True)
class Eta:
    fraction: float | None  # of the round (or of the practice test) done, 0..1; None: not known yet
    remaining_s: float | None


def phase_remaining(done: int, total: int, elapsed_s: float) -> float | None:
    """The phase in flight at the rate it has gone so far; None before its first unit is done."""
    if total <= 0 or done <= 0:
        return None
    return elapsed_s * (total - done) / done


def expected_phases(rounds: Sequence[TimedRound], last_eval_s: float | None) -> dict[str, float] | None:
    """Seconds each timed phase took in the last rounds (mean), "other" for the rest; None without rounds."""
    recent = list(rounds[-RECENT:])
    if not recent:
        return None

    def mean(f) -> float:  # type: ignore[no-untyped-def]
        return statistics.fmean(f(r) for r in recent)

    return {"generating": mean(lambda r: r.generate_s + r.score_s),  # answers are scored as they are written
            "training": mean(lambda r: r.train_s), "swapping": mean(lambda r: r.swap_s),
            "evaluating": last_eval_s or 0.0, "other": mean(lambda r: r.other_s)}


def round_eta(phase: str, done: int, total: int, phase_elapsed_s: float, round_elapsed_s: float,
              spent: dict[str, float], expected: dict[str, float] | None, evaluates: bool) -> Eta:
    """The round in flight: ``spent`` is the seconds of its earlier phases, by phase; ``evaluates``: this
    round ends with a practice test."""
    if expected is None:
        return Eta(None, None)
    now_rate = phase_remaining(done, total, phase_elapsed_s)
    later = [p for p in ORDER[ORDER.index(phase) + 1:] if p in TIMED and (p != "evaluating" or evaluates)] \
        if phase in ORDER else []
    remaining = sum(expected[p] for p in later)
    if phase in TIMED:
        remaining += now_rate if now_rate is not None else max(0.0, expected[phase] - phase_elapsed_s)
    # The untimed phases share one budget: what the last rounds spent outside the timed ones, less what this
    # round has spent there so far.
    other_so_far = sum(s for p, s in spent.items() if p not in TIMED)
    other_so_far += 0.0 if phase in TIMED else phase_elapsed_s
    remaining += max(0.0, expected["other"] - other_so_far)
    whole = round_elapsed_s + remaining
    return Eta(round_elapsed_s / whole if whole > 0 else 0.0, remaining)


def practice_test_eta(done: int, total: int, elapsed_s: float, last_eval_s: float | None) -> Eta:
    """The practice test's own progress: its answers so far, and the time left at their rate (or, before
    the first, the last test's time)."""
    rate = phase_remaining(done, total, elapsed_s)
    fraction = done / total if total > 0 else None
    if rate is None and last_eval_s:
        rate = max(0.0, last_eval_s - elapsed_s)
    return Eta(fraction, rate)


def rounds_per_hour(rounds: Sequence[TimedRound], window: int = 5) -> float | None:
    """From the last rounds' real times (their practice tests included: an hour has some)."""
    recent = [r.round_s for r in rounds[-window:] if r.round_s > 0]
    return 3600 / statistics.fmean(recent) if recent else None


def duration_words(seconds: float) -> str:
    """'about 40 s', 'about 3 min', 'about 1.5 h': rounded, never more precise than an estimate is."""
    if seconds < 55:
        return f"about {max(5, 5 * round(seconds / 5)):.0f} s"
    if seconds < 5400:
        return f"about {max(1, round(seconds / 60)):.0f} min"
    return f"about {seconds / 3600:.1f} h"
