"""Held-back tasks (engine/tasks/held_back.py): the pure rule, its lines, and the question stream's weights."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.tasks import held_back
from engine.tasks.held_back import FACTOR, MIN_ANSWERS, MIN_GROUPS, Tally, factors, shares, update, update_all
from engine.tasks.questions import QuestionStream, StreamState, TaskEntry
from wire.authorship import derive_seed

MIX = (TaskEntry("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "max_digits": 1}),
       TaskEntry("chain_sum", 3.0, {"min_terms": 2, "max_terms": 2, "max_digits": 1}))


# --- the rule ----------------------------------------------------------------------------------------------------

def test_a_task_is_held_back_only_after_enough_answers_to_enough_questions_all_wrong():
    assert (MIN_GROUPS, MIN_ANSWERS) == (8, 32)  # why: engine/tasks/held_back.py (answers to one question go together)
    assert not Tally(MIN_GROUPS - 1, 100, 0).held  # many answers, too few questions: a few hard questions are no task
    assert not Tally(100, MIN_ANSWERS - 1, 0).held  # e.g. L = 2: 15 questions are 30 answers, not enough
    assert Tally(MIN_GROUPS, MIN_ANSWERS, 0).held
    assert not Tally(MIN_GROUPS, MIN_ANSWERS, 1).held  # one right answer: the model can do it
    assert not Tally().held


def test_counts_add_up_and_nonsense_counts_are_refused():
    assert update(Tally(1, 4, 0), 2, 8, 1) == Tally(3, 12, 1)
    for bad in ((-1, 4, 0), (1, -4, 0), (1, 4, 5), (1, 4, -1)):
        with pytest.raises(ValueError):
            update(Tally(), *bad)


def test_held_back_once_then_restored_at_the_first_right_answer_and_never_again():
    tallies: dict = {}
    tallies, changes = update_all(tallies, {"arc_1d": (7, 28, 0), "chain_sum": (7, 28, 3)})
    assert changes == {} and factors(tallies) == {}  # 7 questions: not yet
    tallies, changes = update_all(tallies, {"arc_1d": (1, 4, 0), "chain_sum": (2, 8, 0)})
    assert changes == {"arc_1d": True} and factors(tallies) == {"arc_1d": FACTOR}
    assert tallies["arc_1d"] == {"groups": 8, "answers": 32, "correct": 0}
    tallies, changes = update_all(tallies, {"arc_1d": (1, 4, 0)})
    assert changes == {} and factors(tallies) == {"arc_1d": FACTOR}  # said once, held while it stays 0
    tallies, changes = update_all(tallies, {})  # a round without the task (it is drawn less now): nothing moves
    assert changes == {} and factors(tallies) == {"arc_1d": FACTOR}
    tallies, changes = update_all(tallies, {"arc_1d": (1, 4, 1)})
    assert changes == {"arc_1d": False} and factors(tallies) == {}  # restored, said once
    for _ in range(5):  # the counts only grow: a task answered right once is never held back again
        tallies, changes = update_all(tallies, {"arc_1d": (8, 32, 0)})
        assert changes == {} and factors(tallies) == {}


rounds_strategy = st.lists(st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 6).flatmap(lambda g: st.integers(0, 8).flatmap(
        lambda per: st.tuples(st.just(g), st.just(g * per), st.integers(0, g * per))))), max_size=16)


@settings(max_examples=200, deadline=None)
@given(rounds_strategy)
def test_any_history_holds_back_exactly_the_tasks_without_a_right_answer_and_never_at_zero_weight(rounds):
    tallies: dict = {}
    said: dict[str, list[bool]] = {}
    totals: dict[str, list[int]] = {}
    for counts in rounds:
        before = factors(tallies)
        tallies, changes = update_all(tallies, counts)
        after = factors(tallies)
        for task, (g, a, c) in counts.items():
            t = totals.setdefault(task, [0, 0, 0])
            t[0], t[1], t[2] = t[0] + g, t[1] + a, t[2] + c
        # the decision is a pure function of the counts since adoption
        assert set(after) == {task for task, (g, a, c) in totals.items()
                              if c == 0 and g >= MIN_GROUPS and a >= MIN_ANSWERS}
        assert all(0 < f < 1 for f in after.values())  # never 0: the node keeps checking
        # a change is said exactly when a task's decision changes
        assert changes == {t: t in after for t in set(before) ^ set(after)}
        for task, held in changes.items():
            said.setdefault(task, []).append(held)
    for task, seq in said.items():  # held back once at most, restored once at most, in that order
        assert seq in ([True], [True, False]), (task, seq)


def test_shares_and_the_lines_a_volunteer_reads():
    weights = {"basic_arithmetic": 1.0, "arc_1d": 3.0}
    assert shares(weights, {}) == {"basic_arithmetic": 0.25, "arc_1d": 0.75}
    after = shares(weights, {"arc_1d": FACTOR})
    assert after["arc_1d"] == pytest.approx(0.75 / 1.75) and sum(after.values()) == pytest.approx(1.0)
    line = held_back.held_line("mixed", "arc_1d", Tally(8, 32, 0), 0.75, after["arc_1d"])
    assert line == ("swarm mixed: this model answered 0 of 32 arc_1d answers right (8 questions since it joined): "
                    "it now draws arc_1d at a quarter of the manifest's weight (43% of its own questions instead of "
                    "75%) and learns it from peers' groups")
    # The manifest's only task (or every task held back): the weights cannot say "less", and the line does not.
    alone = shares({"arc_1d": 1.0}, {"arc_1d": FACTOR})
    assert alone == {"arc_1d": 1.0}
    line = held_back.held_line("solo", "arc_1d", Tally(8, 32, 0), 1.0, alone["arc_1d"])
    assert "keeps drawing arc_1d (nothing else to draw instead)" in line and "quarter" not in line
    assert held_back.restored_line("mixed", "arc_1d", Tally(9, 36, 1)) == (
        "swarm mixed: this model answered arc_1d right (1 of 36 answers since it joined): it draws arc_1d at the "
        "manifest's weight again")
    assert held_back.still_line("mixed", {"arc_1d": Tally(5, 20, 0)}) == (
        "swarm mixed: still drawing at a quarter of the manifest's weight: arc_1d (0 of 20 answers right)")
    for line in (held_back.held_line("s", "t", Tally(8, 32, 0), 0.5, 0.2), held_back.restored_line("s", "t", Tally())):
        assert "\n" not in line


# --- the question stream -----------------------------------------------------------------------------------------

def _tasks(stream: QuestionStream, n: int) -> list[str]:
    return [q.spec.dataset for q in stream.draw(n)]


def test_without_factors_the_stream_draws_exactly_as_before():
    """Paired experiments and nodes without a manifest: no factor, the same draws as the plain weighted choice."""
    stream = QuestionStream(MIX, "node", 0, [])
    assert stream.weights() == [1.0, 3.0]
    expected = []
    for i in range(40):  # the draw rule as it was: one seeded choice per draw over the mix's weights
        rng = random.Random(derive_seed("pick", "node", 0, i))
        expected.append(rng.choices(MIX, weights=[e.weight for e in MIX])[0].dataset)
    assert _tasks(stream, 40) == expected


def test_a_held_back_task_is_drawn_less_never_zero_and_resumed_streams_draw_alike():
    plain, held = QuestionStream(MIX, "node", 0, []), QuestionStream(MIX, "node", 0, [])
    held.factors = {"chain_sum": FACTOR}
    assert held.weights() == [1.0, 3.0 * FACTOR] and all(w > 0 for w in held.weights())
    a, b = _tasks(plain, 400), _tasks(held, 400)
    assert b.count("chain_sum") < a.count("chain_sum") * 0.75
    assert b.count("chain_sum") > 0  # never zero: the node keeps checking
    # A stream rebuilt from a saved state with the same factors (a resumed node) goes on with the same draws.
    saved = StreamState(held.state.draws, dict(held.state.next_index))
    resumed = QuestionStream(MIX, "node", 0, [], state=saved)
    resumed.factors = dict(held.factors)
    assert [q.spec for q in resumed.draw(30)] == [q.spec for q in held.draw(30)]
